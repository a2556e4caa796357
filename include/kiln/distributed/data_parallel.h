// nn::DistributedDataParallel: data-parallel training over a process group (torch's DDP).
// Each rank runs the same model on its own slice of the batch; during backward, gradients are
// averaged across ranks in buckets whose allreduce starts as soon as the bucket's last gradient
// is ready, so communication overlaps the rest of the backward pass. The guide is
// docs/distributed.md.
//
//   kiln::distributed::init_process_group();
//   auto model = std::make_shared<MLP>();
//   kiln::nn::DistributedDataParallel ddp(model);   // rank 0's parameters on every rank
//   Tensor loss = cross_entropy(ddp(x), y);         // ddp(...) calls model->forward(...)
//   loss.backward();                                // grads averaged over the ranks
//   opt.step();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/distributed/process_group.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct DistributedDataParallelOptions {
  // Bucket sizes (torch's bucket_cap_mb, 25; the first bucket is small so that its allreduce
  // starts early: 1 MiB, torch's _DEFAULT_FIRST_BUCKET_BYTES).
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;
  // Copies rank 0's buffers (BatchNorm's running stats) to every rank before each forward.
  bool broadcast_buffers = true;
  // Parameters the forward did not use get a zero gradient in the allreduce instead of making
  // backward wait for them (costs a walk of the autograd graph after each forward). A parameter
  // no rank used keeps an undefined grad(), as in torch.
  bool find_unused_parameters = false;
  // Gradients are views into the buckets (no copy back after the allreduce).
  bool gradient_as_bucket_view = false;
  // When the backward runs inside a kiln::compile'd function: break the graph at each bucket
  // boundary (torch's DDPOptimizer), so that bucket k's allreduce runs while the next piece of
  // the backward computes. false: one graph, and every allreduce starts after the whole
  // backward (no overlap).
  bool split_compiled_graphs = true;
};

}  // namespace kiln::nn

namespace kiln::distributed {

// One bucket of gradients, as a communication hook sees it (torch's GradBucket): `buffer` holds
// the bucket's gradients one after another (flattened, in `parameters`' order).
struct GradBucket {
  size_t index = 0;
  Tensor buffer;
  std::vector<Tensor> parameters;
  bool is_last = false;
};
// What DistributedDataParallel runs on each full bucket instead of its allreduce (torch's
// register_comm_hook): it starts the communication and returns its Work; when the Work is done,
// `buffer` must hold the value every rank's gradients should take (the average).
using CommHook = std::function<Work(GradBucket& bucket)>;
namespace comm_hooks {
// The default: the average of the ranks' buckets (ReduceOp::Avg).
CommHook allreduce();
// torch's fp16_compress_hook: the average sent as float16 (half the bytes; float32 buckets).
CommHook fp16_compress();
}  // namespace comm_hooks

}  // namespace kiln::distributed

namespace kiln::distributed::detail {

// Bucket assignment (torch's compute_bucket_assignment_by_size): walks tensors in `order`,
// one open bucket per dtype, closing a bucket once it holds `first_cap_bytes` (the first of its
// dtype) or `cap_bytes` (later ones). Buckets come back ordered by their first tensor's place
// in `order`; each lists tensor indices.
struct BucketTensor {
  DType dtype;
  int64_t bytes;
};
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketTensor>& tensors,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes);

// The gradient reducer behind DistributedDataParallel (non-template part).
class DataParallelBase : public nn::Module {
 public:
  // What the last synchronised backward pass communicated.
  struct Stats {
    int buckets = 0;
    int64_t bytes_allreduced = 0;      // as sent (half the gradients' bytes with fp16_compress)
    double communication_seconds = 0;  // the communication thread's time in the allreduces
    double exposed_seconds = 0;        // the backward pass's wait for them at its end
    // Buckets whose allreduce started as soon as their last gradient was accumulated, before
    // the end of the backward pass (all, normally; 0 for a compiled step with
    // split_compiled_graphs = false, whose allreduces all start at its end).
    int buckets_launched_early = 0;
  };
  ~DataParallelBase() override;
  const Stats& last_stats() const { return stats_; }
  // The buckets' parameter names, in launch order (after the first backward, in the order the
  // gradients became ready).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  // torch's no_sync(): backward passes inside the scope accumulate gradients locally; the first
  // backward after it averages the accumulated sums.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DataParallelBase& ddp) : ddp_(ddp), prev_(ddp.require_sync_) {
      ddp.require_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DataParallelBase& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Replaces the allreduce of each bucket with `hook` (distributed::comm_hooks has torch's
  // default and fp16 compression). Before the first backward, once (as torch).
  void register_comm_hook(CommHook hook);

 protected:
  DataParallelBase(std::shared_ptr<nn::Module> module, nn::DistributedDataParallelOptions options);
  // Around the wrapped forward: before_forward returns what must live until the forward
  // returns (inside kiln::compile, the check that breaks the graph before each bucket's first
  // parameter, so that each bucket's backward is a compiled piece of its own).
  [[nodiscard]] std::shared_ptr<void> before_forward();
  void after_forward(const std::vector<Tensor>& outputs);

 private:
  struct Bucket;
  struct State;
  void build_buckets(const std::vector<size_t>& order);
  void mark_ready(size_t param);
  void launch_ready_buckets(bool at_end = false);
  void finish_backward();

  std::shared_ptr<nn::Module> module_;
  nn::DistributedDataParallelOptions options_;
  std::unique_ptr<State> state_;
  Stats stats_;
  bool require_sync_ = true;
  CommHook comm_hook_;
  bool backward_ran_ = false;
};

template <class T>
void collect_output_tensors(const T& out, std::vector<Tensor>& into) {
  if constexpr (std::is_same_v<T, Tensor>) {
    into.push_back(out);
  } else if constexpr (requires {
                         out.begin();
                         out.end();
                       }) {
    for (const auto& x : out) collect_output_tensors(x, into);
  } else if constexpr (requires { std::tuple_size<T>::value; }) {
    std::apply([&](const auto&... xs) { (collect_output_tensors(xs, into), ...); }, out);
  }
}

}  // namespace kiln::distributed::detail

namespace kiln::nn {

// Wraps `module` (any Module with a forward): ddp(args...) calls module->forward(args...).
// Construction needs an initialised process group; it checks that every rank's parameters have
// the same names and shapes (Error naming the first mismatch) and copies rank 0's parameters
// and buffers to every rank.
template <class M>
class DistributedDataParallel : public distributed::detail::DataParallelBase {
 public:
  explicit DistributedDataParallel(std::shared_ptr<M> module,
                                   DistributedDataParallelOptions options = {})
      : DataParallelBase(module, options), module_(std::move(module)) {}

  template <class... Args>
  auto forward(Args&&... args) {
    const std::shared_ptr<void> scope = before_forward();
    auto out = module_->forward(std::forward<Args>(args)...);
    std::vector<Tensor> tensors;
    distributed::detail::collect_output_tensors(out, tensors);
    after_forward(tensors);
    return out;
  }
  template <class... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }
  // Runs `fn` as the forward, for a module used through another method:
  // `ddp.call([&] { return gpt->loss(x, y); })`. What fn returns is the forward's output.
  template <class F>
  auto call(F&& fn) {
    const std::shared_ptr<void> scope = before_forward();
    auto out = fn();
    std::vector<Tensor> tensors;
    distributed::detail::collect_output_tensors(out, tensors);
    after_forward(tensors);
    return out;
  }
  M& module() { return *module_; }
  const std::shared_ptr<M>& module_ptr() const { return module_; }

 private:
  std::shared_ptr<M> module_;
};

}  // namespace kiln::nn
