// W7's training step data-parallel: run under `kiln launch` (each rank trains its share of
// W7's batch of 32 through DistributedDataParallel) or alone (the whole batch, no DDP), and
// report, from rank 0, the step time, tokens/s and what the gradients' allreduces cost:
//
//   kiln launch --nproc-per-node 2 --threads 1 -- kiln_data_parallel_bench --mode compiled
//   OMP_NUM_THREADS=2 kiln_data_parallel_bench --mode compiled
//
// --mode eager | compiled (the step through kiln::compile, broken at bucket boundaries) |
// compiled_unsplit (one graph, every allreduce after the backward); --steps N (timed, after 3
// warm-up steps); --bucket-cap-mb F (DDP's bucket cap; the first bucket is min(1, F) MiB);
// --fp16 (the fp16 compression hook).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
namespace dist = kiln::distributed;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = "compiled";
  int steps = 20;
  double cap_mb = 25;
  bool fp16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--fp16") {
      fp16 = true;
    } else if (i + 1 < argc && flag == "--mode") {
      mode = argv[++i];
    } else if (i + 1 < argc && flag == "--steps") {
      steps = std::atoi(argv[++i]);
    } else if (i + 1 < argc && flag == "--bucket-cap-mb") {
      cap_mb = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown flag or missing value: %s\n", flag.c_str());
      return 2;
    }
  }
  if (mode != "eager" && mode != "compiled" && mode != "compiled_unsplit") {
    std::fprintf(stderr, "--mode: eager, compiled or compiled_unsplit\n");
    return 2;
  }
  const char* world_env = std::getenv("WORLD_SIZE");
  const bool parallel = world_env && std::string(world_env) != "1";
  if (parallel) dist::init_process_group();
  const int rank = dist::get_rank(), world = dist::get_world_size();
  if (const char* t = std::getenv("OMP_NUM_THREADS")) set_num_threads(std::atoi(t));

  manual_seed(7);
  nn::GPTConfig config;
  config.vocab_size = 96;
  config.block_size = 64;
  auto model = std::make_shared<nn::GPT>(config);
  optim::AdamW opt(model->parameters(), {.lr = 3e-3, .weight_decay = 0.1});
  nn::DistributedDataParallelOptions options;
  options.bucket_cap_mb = cap_mb;
  options.first_bucket_cap_mb = std::min(1.0, cap_mb);
  options.split_compiled_graphs = mode != "compiled_unsplit";
  std::optional<nn::DistributedDataParallel<nn::GPT>> ddp;
  if (parallel) ddp.emplace(model, options);
  if (ddp && fp16) ddp->register_comm_hook(dist::comm_hooks::fp16_compress());
  const int64_t batch = 32 / world;
  Generator data(1);
  Tensor x = randint(0, 96, {32, 64}, DType::Int64, &data).narrow(0, rank * batch, batch);
  Tensor y = randint(0, 96, {32, 64}, DType::Int64, &data).narrow(0, rank * batch, batch);
  std::function<Tensor()> step = [&] {
    opt.zero_grad();
    Tensor loss = ddp ? ddp->call([&] { return model->loss(x, y); }) : model->loss(x, y);
    loss.backward();
    optim::clip_grad_norm_tensor_(model->parameters(), 1.0);
    opt.step();
    return loss.detach();
  };
  if (mode != "eager") step = kiln::compile(step);
  std::vector<double> seconds, comm, exposed;
  for (int i = 0; i < steps + 3; ++i) {
    if (parallel) dist::barrier();  // every rank starts the step together
    const auto start = std::chrono::steady_clock::now();
    step().item<double>();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i < 3) continue;
    seconds.push_back(s);
    if (ddp) {
      comm.push_back(ddp->last_stats().communication_seconds);
      exposed.push_back(ddp->last_stats().exposed_seconds);
    }
  }
  if (rank == 0) {
    const double t = median(seconds);
    std::printf("%s%s, %d rank%s x %d thread%s: step %.2f ms, %.0f tokens/s", mode.c_str(),
                fp16 ? " fp16" : "", world, world == 1 ? "" : "s", get_num_threads(),
                get_num_threads() == 1 ? "" : "s", t * 1e3, 32 * 64 / t);
    if (ddp) {
      const auto& st = ddp->last_stats();
      std::printf(
          "; %d buckets, %lld bytes allreduced a step; communication %.2f ms, exposed "
          "%.2f ms (%.0f%%)",
          st.buckets, static_cast<long long>(st.bytes_allreduced), median(comm) * 1e3,
          median(exposed) * 1e3, 100 * median(exposed) / std::max(median(comm), 1e-12));
    }
    std::printf("\n");
  }
  if (parallel) dist::destroy_process_group();
  return 0;
}
