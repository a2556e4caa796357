// One rank of the multi-process tests (distributed_test.cpp starts it through `kiln launch`):
// runs the scenario named by argv[1], prints what it checked, and exits 0 when every check
// held. A kiln::Error is printed as "ERROR: <message>" with exit status 3.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "kiln/distributed/data_parallel.h"
#include "kiln/distributed/process_group.h"
#include "kiln/kiln.h"

using namespace kiln;
namespace dist = kiln::distributed;

namespace {

int g_failures = 0;
bool g_fp16_hook = false;  // scenario parity_fp16: the fp16 compression hook
#define CHECK_TRUE(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      ++g_failures;                                                                            \
      std::cout << "FAILED (rank " << dist::get_rank() << ", line " << __LINE__ << "): " #cond \
                << " " << kiln::detail::concat(__VA_ARGS__) << std::endl;                      \
    }                                                                                          \
  } while (0)

// An MLP with an optional parameter the forward never uses.
class MLP : public nn::Module {
 public:
  MLP(int64_t in, int64_t hidden, int64_t out, bool with_unused = false) : Module("MLP") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, hidden));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden, out));
    if (with_unused) unused = register_module("unused", std::make_shared<nn::Linear>(hidden, 3));
  }
  Tensor forward(const Tensor& x) {
    return fc3->forward(tanh(fc2->forward(relu(fc1->forward(x)))));
  }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3, unused;
};

void copy_parameters(const nn::Module& from, nn::Module& to) {
  NoGradGuard no_grad;
  auto src = from.named_parameters();
  auto dst = to.named_parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].second.detach().copy_(src[i].second);
}

double max_excess(const Tensor& got, const Tensor& want, double rtol, double atol) {
  const Tensor g = got.contiguous(), w = want.contiguous();
  double worst = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double a = g.data_ptr<float>()[i], b = w.data_ptr<float>()[i];
    worst = std::max(worst, std::abs(a - b) - (atol + rtol * std::abs(b)));
  }
  return worst;
}

// Every rank holds bitwise the same parameters.
void check_parameters_equal_across_ranks(const nn::Module& m, const std::string& when) {
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor mine = p.detach().contiguous().clone();
    std::vector<Tensor> all;
    for (int r = 0; r < dist::get_world_size(); ++r) all.push_back(zeros_like(mine));
    dist::all_gather(all, mine);
    for (int r = 0; r < dist::get_world_size(); ++r)
      CHECK_TRUE(std::memcmp(all[r].data_ptr(), mine.data_ptr(), mine.numel() * 4) == 0, name,
                 " differs between this rank and rank ", r, " ", when);
  }
}

void scenario_collectives() {
  const int rank = dist::get_rank(), size = dist::get_world_size();
  for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
    Tensor t = full({5}, static_cast<int64_t>(rank + 1), dt);
    dist::all_reduce(t);
    const Tensor want_sum = full({5}, static_cast<int64_t>(size * (size + 1) / 2), dt);
    CHECK_TRUE(equal(t, want_sum), "sum of ", dt, ": ", t);
    Tensor mx = full({3}, static_cast<int64_t>(rank), dt);
    dist::all_reduce(mx, dist::ReduceOp::Max);
    CHECK_TRUE(equal(mx, full({3}, static_cast<int64_t>(size - 1), dt)), "max of ", dt);
    Tensor mn = full({3}, static_cast<int64_t>(rank + 2), dt);
    dist::all_reduce(mn, dist::ReduceOp::Min);
    CHECK_TRUE(equal(mn, full({3}, int64_t{2}, dt)), "min of ", dt);
    Tensor pr = full({2}, int64_t{2}, dt);
    dist::all_reduce(pr, dist::ReduceOp::Product);
    CHECK_TRUE(equal(pr, full({2}, static_cast<int64_t>(1) << size, dt)), "product of ", dt);
  }
  Tensor avg = full({4}, static_cast<double>(rank), DType::Float64);
  dist::all_reduce(avg, dist::ReduceOp::Avg);
  CHECK_TRUE(equal(avg, full({4}, (size - 1) / 2.0, DType::Float64)), "avg: ", avg);
  // A large tensor (several of Gloo's 1 MiB segments) and values that differ per element.
  Tensor big = arange(0, 1 << 20, 1, DType::Float32) + static_cast<double>(rank);
  dist::all_reduce(big);
  Tensor want_big = arange(0, 1 << 20, 1, DType::Float32) * static_cast<double>(size) +
                    static_cast<double>(size * (size - 1) / 2);
  CHECK_TRUE(equal(big, want_big), "the 2^20-element sum differs");
  // Broadcast from the last rank.
  Tensor b = full({2, 3}, static_cast<int64_t>(rank * 10), DType::Int64);
  dist::broadcast(b, size - 1);
  CHECK_TRUE(equal(b, full({2, 3}, static_cast<int64_t>((size - 1) * 10), DType::Int64)),
             "broadcast: ", b);
  // all_gather.
  std::vector<Tensor> outs;
  for (int r = 0; r < size; ++r) outs.push_back(zeros({2}, DType::Int32));
  dist::all_gather(outs, full({2}, static_cast<int64_t>(rank * rank), DType::Int32));
  for (int r = 0; r < size; ++r)
    CHECK_TRUE(equal(outs[r], full({2}, static_cast<int64_t>(r * r), DType::Int32)),
               "all_gather slot ", r);
  // Async: several in flight, waited for in any order.
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000}, static_cast<double>(k + rank), DType::Float32));
    works.push_back(dist::all_reduce_async(ts.back()));
  }
  for (int k = 3; k >= 0; --k) {
    works[k].wait();
    CHECK_TRUE(equal(ts[k], full({1000}, static_cast<double>(k * size + size * (size - 1) / 2),
                                 DType::Float32)),
               "async all_reduce ", k);
  }
  dist::barrier();
  std::cout << "collectives checked on rank " << rank << " of " << size << std::endl;
}

// DDP on `world` ranks x `b` rows against one model on the whole batch, every step.
void scenario_parity(bool bucket_view, bool with_unused, bool find_unused,
                     const std::string& backend = "", bool whole_step = false, bool split = true) {
  const int rank = dist::get_rank(), size = dist::get_world_size();
  const int64_t b = 4, in = 16, hidden = 64, out = 8;
  manual_seed(1000 + rank);  // differently initialised: DDP's broadcast makes them equal
  auto model = std::make_shared<MLP>(in, hidden, out, with_unused);
  nn::DistributedDataParallelOptions options;
  options.first_bucket_cap_mb = 1.0 / 1024;  // 1 KiB and 8 KiB: several buckets
  options.bucket_cap_mb = 8.0 / 1024;
  options.gradient_as_bucket_view = bucket_view;
  options.find_unused_parameters = find_unused;
  options.split_compiled_graphs = split;
  nn::DistributedDataParallel ddp(model, options);
  if (g_fp16_hook) ddp.register_comm_hook(dist::comm_hooks::fp16_compress());
  check_parameters_equal_across_ranks(*model, "after construction");
  std::cout << "buckets: " << ddp.bucket_parameter_names().size() << std::endl;
  auto reference = std::make_shared<MLP>(in, hidden, out, with_unused);
  copy_parameters(*model, *reference);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.05, .momentum = 0.9});
  // The loss eagerly, or the forward and loss through kiln::compile (backward outside).
  std::function<Tensor(const Tensor&, const Tensor&)> loss_of =
      [&](const Tensor& x, const Tensor& y) { return mse_loss(ddp(x), y); };
  if (!backend.empty()) loss_of = kiln::compile(loss_of, {.backend = backend});
  // The whole step compiled: forward, loss and backward in one function.
  std::function<Tensor(const Tensor&, const Tensor&)> step_of = [&](const Tensor& x,
                                                                    const Tensor& y) {
    Tensor loss = mse_loss(ddp(x), y);
    loss.backward();
    return loss.detach();
  };
  if (!backend.empty()) step_of = kiln::compile(step_of, {.backend = backend});
  auto run_step = [&](const Tensor& x, const Tensor& y) {
    if (whole_step)
      step_of(x, y);
    else
      loss_of(x, y).backward();
  };
  Generator data(7);
  for (int step = 0; step < 6; ++step) {
    const bool accumulate = step >= 4;  // two micro-batches, the first under no_sync
    const int micro = accumulate ? 2 : 1;
    opt.zero_grad();
    ref_opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      Tensor x = randn({b * size, in}, DType::Float32, &data);
      Tensor y = randn({b * size, out}, DType::Float32, &data);
      Tensor xl = x.narrow(0, rank * b, b), yl = y.narrow(0, rank * b, b);
      if (accumulate && m == 0) {
        auto guard = ddp.no_sync();
        run_step(xl, yl);
      } else {
        run_step(xl, yl);
      }
      mse_loss(reference->forward(x), y).backward();
    }
    auto got = model->named_parameters();
    auto want = reference->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      const Tensor& g = got[i].second.grad();
      const Tensor& w = want[i].second.grad();
      if (!w.defined()) {
        CHECK_TRUE(!g.defined(), got[i].first, " has a gradient but the reference has none");
        continue;
      }
      CHECK_TRUE(g.defined(), got[i].first, " has no gradient at step ", step);
      if (g.defined())
        CHECK_TRUE(max_excess(g, w, g_fp16_hook ? 2e-3 : 1.3e-6, g_fp16_hook ? 1e-4 : 1e-5) <= 0,
                   got[i].first, " gradient differs at step ", step, " by ",
                   max_excess(g, w, 0, 0));
    }
    opt.step();
    ref_opt.step();
    check_parameters_equal_across_ranks(*model, "after step " + std::to_string(step));
  }
  if (whole_step) {
    // Split, the compiled step's forward breaks before each bucket's first parameter, so it is
    // one piece per bucket, each with its own compiled backward; every bucket's allreduce
    // starts as soon as its piece's backward has run (a break in the backward too, where the
    // piece was traced into the graph). Unsplit: one graph, and the allreduces after it.
    Tensor x = randn({b, in}, DType::Float32, &data), y = randn({b, out}, DType::Float32, &data);
    opt.zero_grad();
    const ExplainOutput e = kiln::explain([&] {
      Tensor loss = mse_loss(ddp(x), y);
      loss.backward();
      return loss.detach();
    });
    int forward_breaks = 0, backward_breaks = 0;
    for (const auto& br : e.break_reasons) {
      forward_breaks +=
          br.reason.find("DDP bucket boundary: the forward reaches") != std::string::npos;
      backward_breaks += br.reason.find("is ready; its allreduce") != std::string::npos;
    }
    const int buckets = static_cast<int>(ddp.bucket_parameter_names().size());
    std::cout << "compiled step: " << e.graph_count << " graphs, " << forward_breaks + 1
              << " forward pieces, split " << split << ", "
              << ddp.last_stats().buckets_launched_early << " buckets launched early" << std::endl;
    CHECK_TRUE(ddp.last_stats().buckets_launched_early == (split ? ddp.last_stats().buckets : 0),
               ddp.last_stats().buckets_launched_early);
    CHECK_TRUE(forward_breaks == (split ? buckets - 1 : 0), e.str());
    CHECK_TRUE(split ? backward_breaks >= 1 && backward_breaks <= buckets : backward_breaks == 0,
               e.str());
  }
  const auto& stats = ddp.last_stats();
  std::cout << "parity checked on rank " << rank << ": " << stats.buckets << " buckets, "
            << stats.bytes_allreduced << " bytes allreduced" << std::endl;
}

// The GPT (tied embedding and head, layer norms, attention) through DDP on 2 ranks against
// one model on the whole batch.
void scenario_parity_gpt() {
  const int rank = dist::get_rank(), size = dist::get_world_size();
  nn::GPTConfig config;
  config.vocab_size = 40;
  config.block_size = 16;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 32;
  manual_seed(11 + rank);
  auto model = std::make_shared<nn::GPT>(config);
  nn::DistributedDataParallel ddp(model);
  auto reference = std::make_shared<nn::GPT>(config);
  copy_parameters(*model, *reference);
  optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  optim::AdamW ref_opt(reference->parameters(), {.lr = 1e-2});
  Generator data(3);
  const int64_t b = 4;
  for (int step = 0; step < 3; ++step) {
    Tensor x = randint(0, 40, {b * size, 16}, DType::Int64, &data);
    Tensor y = randint(0, 40, {b * size, 16}, DType::Int64, &data);
    model->zero_grad();
    reference->zero_grad();
    ddp.call([&] { return model->loss(x.narrow(0, rank * b, b), y.narrow(0, rank * b, b)); })
        .backward();
    reference->loss(x, y).backward();
    auto got = model->named_parameters();
    auto want = reference->named_parameters();
    for (size_t i = 0; i < got.size(); ++i)
      CHECK_TRUE(max_excess(got[i].second.grad(), want[i].second.grad(), 1.3e-6, 1e-5) <= 0,
                 got[i].first, " gradient differs at step ", step, " by ",
                 max_excess(got[i].second.grad(), want[i].second.grad(), 0, 0));
    opt.step();
    ref_opt.step();
    check_parameters_equal_across_ranks(*model, "after step " + std::to_string(step));
  }
  std::cout << "gpt parity checked on rank " << rank << std::endl;
}

// Rank 1's data runs out a step early: rank 0's last backward finds it gone.
void scenario_uneven() {
  manual_seed(3);
  auto model = std::make_shared<MLP>(4, 8, 2);
  nn::DistributedDataParallel ddp(model);
  const int steps = dist::get_rank() == 1 ? 2 : 3;
  for (int step = 0; step < steps; ++step) mse_loss(ddp(randn({2, 4})), zeros({2, 2})).backward();
  std::cout << "rank " << dist::get_rank() << " finished its " << steps << " steps" << std::endl;
}

void scenario_unused() {
  manual_seed(3);
  auto model = std::make_shared<MLP>(4, 8, 2, /*with_unused=*/true);
  nn::DistributedDataParallel ddp(model);
  Tensor x = randn({2, 4});
  mse_loss(ddp(x), zeros({2, 2})).backward();  // throws: 'unused.weight' got no gradient
  std::cout << "backward returned" << std::endl;
}

void scenario_shape_mismatch() {
  auto model = std::make_shared<MLP>(4, dist::get_rank() == 1 ? 9 : 8, 2);
  nn::DistributedDataParallel ddp(model);
}

void scenario_debug_mismatch() {
  Tensor t = ones({dist::get_rank() == 1 ? 5 : 4});
  dist::all_reduce(t);
}

void scenario_timeout() {
  if (dist::get_rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(8));
  Tensor t = ones({4});
  dist::all_reduce(t);
}

void scenario_die() {
  Tensor t = ones({4});
  dist::all_reduce(t);  // both arrive
  if (dist::get_rank() == 1) {
    std::cout << "rank 1 kills itself" << std::endl;
    ::kill(::getpid(), SIGKILL);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  dist::all_reduce(t);  // the peer is gone: an error, not a hang
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    dist::InitOptions options;
    if (scenario == "timeout") options.timeout = std::chrono::seconds(2);
    dist::init_process_group("gloo", options);
    if (scenario == "collectives")
      scenario_collectives();
    else if (scenario == "parity")
      scenario_parity(false, false, false);
    else if (scenario == "parity_bucket_view")
      scenario_parity(true, false, false);
    else if (scenario == "parity_find_unused")
      scenario_parity(false, true, true);
    else if (scenario == "parity_compiled")
      scenario_parity(false, false, false, "inductor");
    else if (scenario == "parity_compiled_step")
      scenario_parity(false, false, false, "inductor", true);
    else if (scenario == "parity_compiled_step_unsplit")
      scenario_parity(false, false, false, "inductor", true, false);
    else if (scenario == "parity_fp16") {
      g_fp16_hook = true;
      scenario_parity(false, false, false);
    } else if (scenario == "parity_gpt")
      scenario_parity_gpt();
    else if (scenario == "uneven")
      scenario_uneven();
    else if (scenario == "unused")
      scenario_unused();
    else if (scenario == "shape_mismatch")
      scenario_shape_mismatch();
    else if (scenario == "debug_mismatch")
      scenario_debug_mismatch();
    else if (scenario == "timeout")
      scenario_timeout();
    else if (scenario == "die")
      scenario_die();
    else {
      std::cout << "unknown scenario '" << scenario << "'" << std::endl;
      return 2;
    }
    dist::destroy_process_group();
  } catch (const kiln::Error& e) {
    std::cout << "ERROR: " << e.what() << std::endl;
    return 3;
  }
  return g_failures == 0 ? 0 : 1;
}
