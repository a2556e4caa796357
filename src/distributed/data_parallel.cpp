// DistributedDataParallel's reducer: buckets of gradients, allreduced from the autograd hooks
// as each bucket fills, in bucket order, waited for at the end of backward.
#include "kiln/distributed/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <unordered_set>

#include "capture/state.h"
#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"
#include "kiln/core/error.h"
#include "kiln/ops/factory.h"

namespace kiln::distributed::detail {

using kiln::detail::concat;
using nn::Module;

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketTensor>& tensors,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes) {
  struct Open {
    std::vector<size_t> members;
    int64_t bytes = 0;
    bool closed_one = false;  // later buckets of this dtype take cap_bytes
  };
  std::map<DType, Open> open;
  std::vector<std::vector<size_t>> result;
  for (size_t i : order) {
    KILN_CHECK(i < tensors.size(), IndexError, "assign_buckets: index ", i, " of ", tensors.size(),
               " tensors");
    Open& b = open[tensors[i].dtype];
    b.members.push_back(i);
    b.bytes += tensors[i].bytes;
    if (b.bytes >= (b.closed_one ? cap_bytes : first_cap_bytes)) {
      result.push_back(std::move(b.members));
      b.members.clear();
      b.bytes = 0;
      b.closed_one = true;
    }
  }
  for (auto& [dtype, b] : open)
    if (!b.members.empty()) result.push_back(std::move(b.members));
  std::vector<size_t> place(tensors.size());
  for (size_t k = 0; k < order.size(); ++k) place[order[k]] = k;
  std::stable_sort(result.begin(), result.end(),
                   [&](const auto& a, const auto& b) { return place[a[0]] < place[b[0]]; });
  return result;
}

struct DataParallelBase::Bucket {
  std::vector<size_t> params;
  Tensor flat;                // every member's gradient, one after another
  std::vector<Tensor> slots;  // per member: its region of flat, in the parameter's shape
  int pending = 0;            // members not ready yet in this backward
  bool launched = false;
  bool launched_early = false;  // before the end of the backward pass
  distributed::Work work;
};

struct DataParallelBase::State {
  std::vector<Tensor> params;  // the module's parameters that require grad
  std::vector<std::string> names;
  std::vector<Tensor> buffers;
  std::vector<std::pair<size_t, size_t>> where;  // param -> (bucket, slot)
  std::vector<Bucket> buckets;
  std::vector<size_t> hooks;
  // This backward pass.
  bool prepared = false;  // the forward ran with synchronisation on
  bool callback_queued = false;
  std::vector<char> ready;
  std::vector<int32_t> used;  // find_unused_parameters: 1 where this rank's forward used it
  size_t next_launch = 0;
  // The first backward's order, to rebuild the buckets once.
  bool rebuilt = false;
  std::vector<size_t> ready_order;
  // The forward under kiln::compile: which parameters it has used, the bucket of the graph
  // piece being recorded, and the check the tracer asks before each op.
  std::unordered_map<const TensorImpl*, size_t> param_index;
  std::vector<char> used_in_forward;
  size_t piece_bucket = SIZE_MAX;
  capture::BreakBeforeOp break_check;
};

namespace {

int64_t shape_code(const Tensor& t) {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(t.dtype());
  for (int64_t s : t.sizes()) h = (h ^ static_cast<uint64_t>(s)) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

// Every rank must hold the same parameters: compares counts, then each parameter's shape.
void check_same_parameters(const std::vector<std::string>& names,
                           const std::vector<Tensor>& params) {
  const int size = distributed::get_world_size();
  const int rank = distributed::get_rank();
  std::vector<Tensor> counts;
  for (int r = 0; r < size; ++r) counts.push_back(zeros({1}, DType::Int64));
  distributed::all_gather(counts, full({1}, static_cast<int64_t>(params.size()), DType::Int64));
  for (int r = 0; r < size; ++r) {
    const int64_t n = counts[r].data_ptr<int64_t>()[0];
    KILN_CHECK(n == static_cast<int64_t>(params.size()), Error, "DistributedDataParallel: rank ",
               rank, "'s module has ", params.size(), " parameters but rank ", r, "'s has ", n,
               ": every rank must build the same model");
  }
  if (params.empty()) return;
  Tensor mine = zeros({static_cast<int64_t>(params.size())}, DType::Int64);
  for (size_t i = 0; i < params.size(); ++i) mine.data_ptr<int64_t>()[i] = shape_code(params[i]);
  std::vector<Tensor> all;
  for (int r = 0; r < size; ++r) all.push_back(zeros_like(mine));
  distributed::all_gather(all, mine);
  for (size_t i = 0; i < params.size(); ++i)
    for (int r = 0; r < size; ++r)
      KILN_CHECK(all[r].data_ptr<int64_t>()[i] == mine.data_ptr<int64_t>()[i], Error,
                 "DistributedDataParallel: parameter '", names[i], "' has shape ",
                 params[i].shape_str(), " and dtype ", params[i].dtype(), " on rank ", rank,
                 " but another shape or dtype on rank ", r,
                 ": every rank must build the same model");
}

}  // namespace

DataParallelBase::DataParallelBase(std::shared_ptr<Module> module,
                                   nn::DistributedDataParallelOptions options)
    : Module("DistributedDataParallel"),
      module_(std::move(module)),
      options_(options),
      state_(std::make_unique<State>()) {
  KILN_CHECK(module_ != nullptr, ValueError, "DistributedDataParallel: the module is null");
  KILN_CHECK(distributed::is_initialized(), Error,
             "DistributedDataParallel: no process group: call "
             "kiln::distributed::init_process_group() first");
  KILN_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0, ValueError,
             "DistributedDataParallel: bucket sizes must be positive, got bucket_cap_mb = ",
             options_.bucket_cap_mb, ", first_bucket_cap_mb = ", options_.first_bucket_cap_mb);
  register_module("module", module_);
  State& s = *state_;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    s.names.push_back(name);
    s.params.push_back(p);
  }
  for (auto& [name, b] : module_->named_buffers()) s.buffers.push_back(b);
  check_same_parameters(s.names, s.params);
  {
    NoGradGuard no_grad;
    for (const auto& [name, p] : module_->named_parameters()) distributed::broadcast(p.detach(), 0);
    for (const Tensor& b : s.buffers) distributed::broadcast(b, 0);
  }
  // Reverse parameter order: the last layers' gradients are ready first.
  std::vector<size_t> order(s.params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
  build_buckets(order);
  s.ready.assign(s.params.size(), 0);
  s.used.assign(s.params.size(), 1);
  s.used_in_forward.assign(s.params.size(), 0);
  for (size_t i = 0; i < s.params.size(); ++i) s.param_index[s.params[i].impl()] = i;
  // DDPOptimizer's split, as the forward is captured: a graph break before the first op that
  // reads a parameter of another bucket than the piece being recorded. Each piece then has
  // its own compiled backward, which runs while the allreduce of the bucket after it (in
  // backward order) is on the wire.
  s.break_check = [this](const OpDef&, std::span<const Tensor> inputs) -> std::string {
    State& st = *state_;
    for (const Tensor& t : inputs) {
      const auto it = st.param_index.find(t.impl());
      if (it == st.param_index.end() || st.used_in_forward[it->second]) continue;
      st.used_in_forward[it->second] = 1;
      const size_t bucket = st.where[it->second].first;
      if (st.piece_bucket == SIZE_MAX) {
        st.piece_bucket = bucket;
      } else if (bucket != st.piece_bucket) {
        st.piece_bucket = bucket;
        return concat("DDP bucket boundary: the forward reaches bucket ", bucket, " of ",
                      st.buckets.size(), " ('", st.names[it->second],
                      "'), whose gradients are allreduced apart from the previous piece's");
      }
    }
    return "";
  };
  for (size_t i = 0; i < s.params.size(); ++i)
    s.hooks.push_back(s.params[i].register_post_accumulate_grad_hook(
        [this, i](const Tensor&) { mark_ready(i); }));
}

DataParallelBase::~DataParallelBase() {
  for (size_t i = 0; i < state_->params.size() && i < state_->hooks.size(); ++i)
    state_->params[i].remove_hook(state_->hooks[i]);
}

std::vector<std::vector<std::string>> DataParallelBase::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : state_->buckets) {
    out.emplace_back();
    for (size_t p : b.params) out.back().push_back(state_->names[p]);
  }
  return out;
}

void DataParallelBase::build_buckets(const std::vector<size_t>& order) {
  State& s = *state_;
  std::vector<BucketTensor> sizes;
  for (const Tensor& p : s.params) sizes.push_back({p.dtype(), p.numel() * p.element_size()});
  constexpr double kMiB = 1024.0 * 1024.0;
  auto assignment =
      assign_buckets(sizes, order, static_cast<int64_t>(options_.first_bucket_cap_mb * kMiB),
                     static_cast<int64_t>(options_.bucket_cap_mb * kMiB));
  // The same buckets with the same members (in any order inside a bucket) launch the same way:
  // keep them, so that a compiled step sees the same tensors (a rebuild costs it a recompile).
  if (assignment.size() == s.buckets.size()) {
    bool same = true;
    for (size_t b = 0; b < assignment.size() && same; ++b) {
      std::vector<size_t> now = assignment[b], before = s.buckets[b].params;
      std::sort(now.begin(), now.end());
      std::sort(before.begin(), before.end());
      same = now == before;
    }
    if (same) return;
  }
  std::vector<Bucket> buckets;
  s.where.assign(s.params.size(), {0, 0});
  NoGradGuard no_grad;
  for (const auto& members : assignment) {
    Bucket b;
    b.params = members;
    int64_t total = 0;
    for (size_t p : members) total += s.params[p].numel();
    b.flat = zeros({total}, s.params[members[0]].dtype());
    int64_t offset = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      const Tensor& p = s.params[members[k]];
      b.slots.push_back(b.flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
      s.where[members[k]] = {buckets.size(), k};
      // Gradients that were views of the old buckets move to the new ones.
      if (options_.gradient_as_bucket_view && p.grad().defined()) {
        b.slots.back().copy_(p.grad());
        Tensor(p).set_grad(b.slots.back());
      }
    }
    buckets.push_back(std::move(b));
  }
  s.buckets = std::move(buckets);
}

std::shared_ptr<void> DataParallelBase::before_forward() {
  State& s = *state_;
  KILN_CHECK(!s.prepared || !s.callback_queued, Error,
             "DistributedDataParallel: a forward began while the previous backward's gradients "
             "are still being reduced");
  if (options_.broadcast_buffers && !s.buffers.empty() && distributed::get_world_size() > 1) {
    NoGradGuard no_grad;
    for (const Tensor& b : s.buffers) distributed::broadcast(b, 0);
  }
  s.prepared = require_sync_ && is_grad_enabled();
  if (!s.prepared) return nullptr;
  std::fill(s.ready.begin(), s.ready.end(), 0);
  std::fill(s.used.begin(), s.used.end(), 1);
  for (Bucket& b : s.buckets) {
    b.pending = static_cast<int>(b.params.size());
    b.launched = false;
    b.work = distributed::Work();
  }
  s.next_launch = 0;
  s.callback_queued = false;
  s.ready_order.clear();
  if (!is_dynamo_compiling() || !options_.split_compiled_graphs) return nullptr;
  std::fill(s.used_in_forward.begin(), s.used_in_forward.end(), 0);
  s.piece_bucket = SIZE_MAX;
  return std::make_shared<capture::BreakBeforeOpScope>(&s.break_check);
}

void DataParallelBase::after_forward(const std::vector<Tensor>& outputs) {
  State& s = *state_;
  if (!s.prepared || !options_.find_unused_parameters) return;
  KILN_CHECK(!outputs.empty(), Error,
             "DistributedDataParallel: find_unused_parameters needs the forward's output "
             "tensors, but the module's forward returned none Kiln can see (return a Tensor, a "
             "tuple or a vector of them)");
  // Walk the autograd graph from the outputs: parameters whose accumulator it does not reach
  // get no gradient in this backward, so they are ready (with a zero gradient) now.
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> stack;
  for (const Tensor& t : outputs)
    if (t.defined() && t.grad_fn() && seen.insert(t.grad_fn().get()).second)
      stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges())
      if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    const auto& m = s.params[i].impl()->autograd_meta();
    std::shared_ptr<Node> acc = m ? m->grad_accumulator.lock() : nullptr;
    if (acc && seen.count(acc.get())) continue;
    s.used[i] = 0;
    auto [b, k] = s.where[i];
    NoGradGuard no_grad;
    s.buckets[b].slots[k].zero_();
    s.ready[i] = 1;
    if (--s.buckets[b].pending == 0) launch_ready_buckets();
  }
}

void DataParallelBase::register_comm_hook(CommHook hook) {
  KILN_CHECK(hook != nullptr, ValueError, "register_comm_hook: the hook is empty");
  KILN_CHECK(!comm_hook_, Error, "register_comm_hook: a communication hook is registered already");
  KILN_CHECK(!backward_ran_, Error,
             "register_comm_hook: register the hook before the first backward pass");
  comm_hook_ = std::move(hook);
}

void DataParallelBase::mark_ready(size_t i) {
  State& s = *state_;
  if (!s.prepared) return;  // no_sync, no_grad forward, or a backward without a forward here
  KILN_CHECK(!s.ready[i], Error, "DistributedDataParallel: parameter '", s.names[i],
             "' received a gradient twice in one iteration (two backward passes through one "
             "forward, or find_unused_parameters found it unused); call the wrapped module's "
             "forward once per backward");
  s.ready[i] = 1;
  if (!s.rebuilt) s.ready_order.push_back(i);
  if (!s.callback_queued) {
    s.callback_queued = true;
    autograd::queue_callback([this] { finish_backward(); });
  }
  auto [b, k] = s.where[i];
  Bucket& bucket = s.buckets[b];
  const Tensor& param = s.params[i];
  const Tensor& grad = param.grad();
  NoGradGuard no_grad;
  if (!(options_.gradient_as_bucket_view && grad.impl() == bucket.slots[k].impl())) {
    bucket.slots[k].copy_(grad);
    if (options_.gradient_as_bucket_view) Tensor(param).set_grad(bucket.slots[k]);
  }
  if (--bucket.pending == 0) launch_ready_buckets();
}

void DataParallelBase::launch_ready_buckets(bool at_end) {
  State& s = *state_;
  // Inside a compiled function, a bucket's allreduce needs its gradients computed: the graph
  // breaks here (the pieces before run now, the rest of the backward is captured on), unless
  // the user asked for one graph (then everything is launched at the end of backward).
  const bool capturing = is_dynamo_compiling();
  if (capturing && !options_.split_compiled_graphs && !at_end) return;
  while (s.next_launch < s.buckets.size() && s.buckets[s.next_launch].pending == 0) {
    const size_t k = s.next_launch++;
    Bucket& b = s.buckets[k];
    if (capturing)
      capture::sync_current(
          at_end ? concat("DDP: the gradient allreduces after the whole backward "
                          "(split_compiled_graphs = false)")
                 : concat("DDP bucket boundary: bucket ", k, " of ", s.buckets.size(), " (",
                          b.flat.numel() * b.flat.element_size(),
                          " bytes) is ready; its allreduce overlaps the rest of the backward"),
          std::source_location::current(), false);
    if (comm_hook_) {
      GradBucket view{k, b.flat, {}, k + 1 == s.buckets.size()};
      for (size_t p : b.params) view.parameters.push_back(s.params[p]);
      b.work = comm_hook_(view);
    } else {
      // Averaged: each rank's values divided by the world size, then summed (torch's order).
      b.work = distributed::all_reduce_async(b.flat, distributed::ReduceOp::Avg);
    }
    b.launched = true;
    b.launched_early = !at_end;
  }
}

void DataParallelBase::finish_backward() {
  State& s = *state_;
  s.callback_queued = false;
  s.prepared = false;
  backward_ran_ = true;
  // A bucket with a parameter that got no gradient was never launched: on every rank that
  // runs the same code the same bucket is missing, so every rank stops here (no hang).
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (s.ready[i]) continue;
    for (Bucket& b : s.buckets)  // the launched ones must finish before anything is rebuilt
      if (b.launched) b.work.wait();
    throw Error(concat(
        "DistributedDataParallel: rank ", distributed::get_rank(), ": parameter '", s.names[i],
        "' received no gradient in this backward pass (the forward did not use it to compute "
        "the loss), so its bucket's allreduce could not start. Pass find_unused_parameters = "
        "true in DistributedDataParallelOptions if some parameters go unused in some "
        "iterations, or remove the parameter"));
  }
  launch_ready_buckets(/*at_end=*/true);  // split_compiled_graphs = false left them for now
  const auto wait_start = std::chrono::steady_clock::now();
  Stats stats;
  for (Bucket& b : s.buckets) {
    b.work.wait();
    stats.buckets++;
    stats.bytes_allreduced += b.work.bytes();
    stats.communication_seconds += b.work.seconds();
    stats.buckets_launched_early += b.launched_early;
  }
  stats.exposed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  // Which parameters some rank used (find_unused_parameters): one no rank used keeps its
  // undefined grad, as in torch.
  std::vector<int32_t> used_anywhere;
  if (options_.find_unused_parameters) {
    Tensor used = zeros({static_cast<int64_t>(s.used.size())}, DType::Int32);
    std::copy(s.used.begin(), s.used.end(), used.data_ptr<int32_t>());
    distributed::all_reduce(used);
    used_anywhere.assign(used.data_ptr<int32_t>(), used.data_ptr<int32_t>() + used.numel());
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!used_anywhere.empty() && used_anywhere[i] == 0) continue;
    auto [b, k] = s.where[i];
    const Tensor& slot = s.buckets[b].slots[k];
    Tensor param = s.params[i];
    if (options_.gradient_as_bucket_view) {
      if (param.grad().impl() != slot.impl()) param.set_grad(slot);
    } else if (param.grad().defined()) {
      param.grad().copy_(slot);
    } else {
      param.set_grad(slot.clone());
    }
  }
  stats_ = stats;
  if (!s.rebuilt) {
    // Rebuild once from the order the gradients became ready (torch does the same after its
    // first iteration), so that buckets fill in launch order.
    s.rebuilt = true;
    std::vector<size_t> order = s.ready_order;
    std::vector<char> in(s.params.size(), 0);
    for (size_t i : order) in[i] = 1;
    for (size_t i = s.params.size(); i-- > 0;)
      if (!in[i]) order.push_back(i);
    if (!options_.find_unused_parameters) build_buckets(order);
  }
}

}  // namespace kiln::distributed::detail

namespace kiln::distributed::comm_hooks {
CommHook allreduce() {
  return [](GradBucket& b) { return all_reduce_async(b.buffer, ReduceOp::Avg); };
}
CommHook fp16_compress() {
  return [](GradBucket& b) { return all_reduce_fp16_async(b.buffer); };
}
}  // namespace kiln::distributed::comm_hooks
