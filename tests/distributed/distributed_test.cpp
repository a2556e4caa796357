// kiln::distributed and nn::DistributedDataParallel: bucket assignment and a one-rank group in
// this process; collectives, DDP parity and faults with 2 and 4 ranks, each a process running
// tests/distributed/worker.cpp, started through `kiln launch` when the tools are built (else
// directly, with the variables a launcher sets).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "core/subprocess.h"
#include "kiln/distributed/data_parallel.h"
#include "kiln/distributed/process_group.h"
#include "kiln/kiln.h"

using namespace kiln;
namespace dist = kiln::distributed;

namespace {

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

struct RanksResult {
  int status = 0;      // the launcher's exit status (or the first failing rank's)
  std::string output;  // everything, each line prefixed "[rank r] " by the launcher
  bool timed_out = false;
};

// Runs `worker scenario` on `n` ranks, each with `env` set too.
RanksResult run_ranks(const std::string& scenario, int n, const std::vector<std::string>& env = {},
                      double timeout = 120) {
  RanksResult r;
#ifdef KILN_CLI
  std::vector<std::string> argv = {"env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {KILN_CLI, "launch", "--nproc-per-node", std::to_string(n), "--grace",
                           "5", "--", KILN_DISTRIBUTED_WORKER, scenario});
  const auto p = kiln::detail::run_process(argv, timeout);
  r.output = p.output;
  r.timed_out = p.timed_out;
  r.status = p.exit_code >= 0 ? p.exit_code : 128 + p.signal;
#else
  const std::string folder = (std::filesystem::temp_directory_path() /
                              ("kiln-test-rdzv-" + std::to_string(::getpid()) + "-" + scenario))
                                 .string();
  std::filesystem::remove_all(folder);
  std::vector<std::vector<std::string>> argvs;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<std::string> argv = {"env", "RANK=" + std::to_string(rank),
                                     "WORLD_SIZE=" + std::to_string(n),
                                     "KILN_RENDEZVOUS_DIR=" + folder, "OMP_NUM_THREADS=1"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {KILN_DISTRIBUTED_WORKER, scenario});
    argvs.push_back(argv);
  }
  const auto results = kiln::detail::run_processes(argvs, timeout);
  for (int rank = 0; rank < n; ++rank) {
    const auto& p = results[rank];
    std::string prefixed;
    std::istringstream lines(p.output);
    for (std::string line; std::getline(lines, line);)
      prefixed += "[rank " + std::to_string(rank) + "] " + line + "\n";
    r.output += prefixed;
    r.timed_out = r.timed_out || p.timed_out;
    const int status = p.exit_code >= 0 ? p.exit_code : 128 + p.signal;
    if (r.status == 0) r.status = status;
  }
  std::filesystem::remove_all(folder);
#endif
  return r;
}

// Runs a scenario that must pass on `n` ranks and returns what they printed.
std::string passing_output(const std::string& scenario, int n = 2) {
  const RanksResult r = run_ranks(scenario, n);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "FAILED")) << r.output;
  return r.output;
}

// Runs a scenario that must fail (on 2 ranks, within a minute: an error, not a hang) and
// returns what the ranks printed.
std::string failing_output(const std::string& scenario, const std::vector<std::string>& env = {}) {
  const RanksResult r = run_ranks(scenario, 2, env, 60);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  return r.output;
}

// ---- in this process ----

TEST(Buckets, ReverseOrderFirstBucketSmallThenCapPerDtype) {
  using dist::detail::BucketTensor;
  // Sizes in bytes; caps 100 (first) and 250.
  std::vector<BucketTensor> t = {{DType::Float32, 40}, {DType::Float32, 80},  {DType::Float32, 120},
                                 {DType::Float64, 64}, {DType::Float32, 200}, {DType::Float32, 60}};
  const std::vector<size_t> order = {5, 4, 3, 2, 1, 0};
  const auto b = dist::detail::assign_buckets(t, order, 100, 250);
  // float32 in order 5, 4, 2, 1, 0: {5, 4} reaches 100 first; then {2, 1, 0} = 240 < 250 stays
  // open to the end; float64 {3} alone. Ordered by first member's place: {5,4}, {3}, {2,1,0}.
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{5, 4}));
  EXPECT_EQ(b[1], (std::vector<size_t>{3}));
  EXPECT_EQ(b[2], (std::vector<size_t>{2, 1, 0}));
  // One huge tensor is a bucket of its own; every index lands in exactly one bucket.
  const auto c = dist::detail::assign_buckets({{DType::Float32, 1000}, {DType::Float32, 10}},
                                              {0, 1}, 100, 250);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], (std::vector<size_t>{0}));
  EXPECT_EQ(c[1], (std::vector<size_t>{1}));
  EXPECT_THROW(dist::detail::assign_buckets(t, {7}, 100, 250), IndexError);
}

class OneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ =
        std::filesystem::temp_directory_path() / ("kiln-one-rank-" + std::to_string(::getpid()));
    dist::InitOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.rendezvous = "file://" + folder_.string();
    dist::init_process_group("gloo", o);
  }
  void TearDown() override {
    dist::destroy_process_group();
    std::filesystem::remove_all(folder_);
  }
  std::filesystem::path folder_;
};

TEST_F(OneRank, CollectivesLeaveValuesAndCheckTheirArguments) {
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_EQ(dist::get_rank(), 0);
  EXPECT_EQ(dist::get_world_size(), 1);
  Tensor t = arange(0, 6, 1, DType::Float32);
  const uint64_t version = t.version();
  dist::all_reduce(t);
  EXPECT_TRUE(equal(t, arange(0, 6, 1, DType::Float32)));
  EXPECT_GT(t.version(), version);  // written in place, as far as autograd knows
  dist::all_reduce(t, dist::ReduceOp::Avg);
  EXPECT_TRUE(equal(t, arange(0, 6, 1, DType::Float32)));
  dist::broadcast(t, 0);
  dist::barrier();
  try {
    dist::broadcast(t, 1);
    FAIL() << "broadcast from rank 1 of 1";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "src 1 is not a rank of the group (world size 1)")) << e.what();
  }
  Tensor w = ones({3}).requires_grad_();
  try {
    dist::all_reduce(w);
    FAIL() << "a tensor that requires grad";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "requires grad; collectives are not differentiable"))
        << e.what();
  }
  EXPECT_THROW(dist::all_reduce(ones({4, 4}).transpose(0, 1)), ValueError);
  EXPECT_THROW(dist::all_reduce(ones({4}, DType::Bool)), ValueError);
  EXPECT_THROW(dist::all_reduce(ones({4}, DType::Int64), dist::ReduceOp::Avg), ValueError);
  EXPECT_THROW(dist::init_process_group(), Error);  // joined already
}

TEST_F(OneRank, DataParallelOnOneRankGivesThePlainGradients) {
  manual_seed(5);
  auto model = std::make_shared<nn::Linear>(6, 3);
  auto plain = std::make_shared<nn::Linear>(6, 3);
  {
    NoGradGuard g;
    plain->weight.detach().copy_(model->weight);
    plain->bias.detach().copy_(model->bias);
  }
  nn::DistributedDataParallel ddp(model);
  EXPECT_EQ(ddp.named_parameters()[0].first, "module.weight");
  Tensor x = randn({5, 6});
  for (int step = 0; step < 2; ++step) {
    model->zero_grad();
    plain->zero_grad();
    sum(ddp(x) * ddp(x).detach()).backward();  // the second call: no gradients, so no sync
    sum(plain->forward(x) * plain->forward(x).detach()).backward();
    EXPECT_TRUE(allclose(model->weight.grad(), plain->weight.grad()));
    EXPECT_TRUE(allclose(model->bias.grad(), plain->bias.grad()));
  }
  EXPECT_EQ(ddp.last_stats().buckets, 1);
  EXPECT_EQ(ddp.last_stats().bytes_allreduced, (6 * 3 + 3) * 4);
  try {
    ddp.register_comm_hook(dist::comm_hooks::fp16_compress());
    FAIL() << "a hook after the first backward";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "before the first backward")) << e.what();
  }
}

TEST(ProcessGroup, WithoutAGroupCollectivesSayWhatToCall) {
  EXPECT_FALSE(dist::is_initialized());
  EXPECT_EQ(dist::get_world_size(), 1);
  try {
    dist::all_reduce(ones({2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "call kiln::distributed::init_process_group() first"))
        << e.what();
  }
  try {
    nn::DistributedDataParallel ddp(std::make_shared<nn::Linear>(2, 2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no process group")) << e.what();
  }
  EXPECT_THROW(dist::init_process_group("nccl"), ValueError);
}

// ---- several processes ----

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, CollectivesGiveExactResults) {
  const int n = GetParam();
  const std::string out = passing_output("collectives", n);
  for (int rank = 0; rank < n; ++rank)
    EXPECT_TRUE(contains(out, "[rank " + std::to_string(rank) + "] collectives checked on rank " +
                                  std::to_string(rank) + " of " + std::to_string(n)))
        << out;
}
INSTANTIATE_TEST_SUITE_P(DistributedRanks, Ranks, ::testing::Values(1, 2, 4));

// mpirun's variables (OMPI_COMM_WORLD_RANK / _SIZE) stand for RANK / WORLD_SIZE.
TEST(ProcessGroup, MpirunsVariablesGiveTheRankAndWorldSize) {
  const std::string folder =
      (std::filesystem::temp_directory_path() / ("kiln-test-ompi-" + std::to_string(::getpid())))
          .string();
  std::vector<std::vector<std::string>> argvs;
  for (int rank = 0; rank < 2; ++rank)
    argvs.push_back({"env", "-u", "RANK", "-u", "WORLD_SIZE",
                     "OMPI_COMM_WORLD_RANK=" + std::to_string(rank), "OMPI_COMM_WORLD_SIZE=2",
                     "KILN_RENDEZVOUS_DIR=" + folder, KILN_DISTRIBUTED_WORKER, "collectives"});
  const auto results = kiln::detail::run_processes(argvs, 60);
  std::filesystem::remove_all(folder);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].succeeded()) << results[rank].describe(60) << results[rank].output;
    EXPECT_TRUE(contains(results[rank].output,
                         "collectives checked on rank " + std::to_string(rank) + " of 2"))
        << results[rank].output;
  }
}

TEST(DataParallel, TwoRanksMatchOneProcessOnTheWholeBatchEveryStep) {
  for (const std::string scenario :
       {"parity", "parity_bucket_view", "parity_find_unused", "parity_compiled",
        "parity_compiled_step", "parity_compiled_step_unsplit"}) {
    const std::string out = passing_output(scenario);
    EXPECT_TRUE(contains(out, "[rank 1] parity checked on rank 1")) << out;
    // Small buckets: the MLP's parameters span several.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("buckets: (\\d+)"))) << out;
    EXPECT_GE(std::stoi(m[1]), 3) << out;
  }
}

TEST(DataParallel, ACompiledStepBreaksItsGraphAtEachBucketBoundary) {
  // The worker checks the count against its buckets (explain()'s break reasons); here, that
  // both modes ran it: split (one "DDP bucket boundary" per bucket) and one graph.
  std::string out = passing_output("parity_compiled_step");
  EXPECT_TRUE(contains(out, "3 forward pieces, split 1, 3 buckets launched early")) << out;
  out = passing_output("parity_compiled_step_unsplit");
  EXPECT_TRUE(contains(out, "1 forward pieces, split 0, 0 buckets launched early")) << out;
}

TEST(DataParallel, TheGPTOnTwoRanksMatchesOneProcess) {
  const std::string out = passing_output("parity_gpt");
  EXPECT_TRUE(contains(out, "[rank 1] gpt parity checked on rank 1")) << out;
}

TEST(DataParallel, TheFp16CompressionHookSendsHalfTheBytesWithinHalfPrecision) {
  const std::string plain = passing_output("parity");
  const std::string half = passing_output("parity_fp16");
  std::smatch a, b;
  const std::regex bytes("\\[rank 0\\] parity checked on rank 0: \\d+ buckets, (\\d+) bytes");
  ASSERT_TRUE(std::regex_search(plain, a, bytes)) << plain;
  ASSERT_TRUE(std::regex_search(half, b, bytes)) << half;
  EXPECT_EQ(std::stoll(b[1]) * 2, std::stoll(a[1]));
}

// Every rank misses the same bucket and stops with the error; whichever says so first, the
// launcher then stops the other, which may not have printed yet.
TEST(DataParallel, AnUnusedParameterIsAnErrorNamingItNotAHang) {
  const std::string out = failing_output("unused");
  EXPECT_TRUE(std::regex_search(out, std::regex("DistributedDataParallel: rank [01]: parameter "
                                                "'unused.weight' received no gradient")))
      << out;
  EXPECT_TRUE(contains(out, "find_unused_parameters = true")) << out;
  EXPECT_FALSE(contains(out, "backward returned")) << out;
#ifndef KILN_CLI  // started directly, every rank runs to its end: each says it
  for (const char* rank : {"rank 0", "rank 1"})
    EXPECT_TRUE(contains(out, std::string("DistributedDataParallel: ") + rank +
                                  ": parameter 'unused.weight' received no gradient"))
        << out;
#endif
}

TEST(DataParallel, ARankWhoseDataRunsOutEarlyLeavesTheOthersAnErrorNotAHang) {
  const std::string out = failing_output("uneven");
  EXPECT_TRUE(contains(out, "rank 1 finished its 2 steps")) << out;
  EXPECT_TRUE(contains(out, "ran out of data before this one")) << out;
}

TEST(DataParallel, DifferentModelsOnTwoRanksAreAnErrorNamingTheParameter) {
  const std::string out = failing_output("shape_mismatch");
  EXPECT_TRUE(std::regex_search(out, std::regex("parameter 'fc1.weight' has shape \\[(8|9), 4\\]")))
      << out;
}

TEST(ProcessGroup, DebugModeFindsMismatchedCollectives) {
  const std::string out = failing_output("debug_mismatch", {"KILN_DISTRIBUTED_DEBUG=1"});
  EXPECT_TRUE(contains(out, "mismatched collectives")) << out;
  EXPECT_TRUE(contains(out, "all_reduce (sum) of 4 float32 elements")) << out;
}

TEST(ProcessGroup, ATimeoutNamesTheCollectiveAndTheRankThatDidNotArrive) {
  const std::string out = failing_output("timeout");
  EXPECT_TRUE(contains(out,
                       "[rank 0] ERROR: kiln::distributed: all_reduce (sum) of 4 "
                       "float32 elements (collective #0) failed on rank 0 of 2: timed out"))
      << out;
  EXPECT_TRUE(contains(out, "ranks that did not arrive at it: 1")) << out;
}

TEST(ProcessGroup, ARankKilledMidRunEndsTheOthersWithAnErrorNotAHang) {
  const std::string out = failing_output("die");
  EXPECT_TRUE(contains(out, "rank 1 kills itself")) << out;
#ifdef KILN_CLI
  EXPECT_TRUE(contains(out, "kiln launch: rank 1 (pid")) << out;
  EXPECT_TRUE(contains(out, "was killed by signal 9 (SIGKILL); stopping the other ranks")) << out;
#endif
}

}  // namespace
