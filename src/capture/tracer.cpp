// The tracer: records op calls into the current graph segment and runs segments at sync points.
#include "capture/tracer.h"

#include <algorithm>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "ir/attr_utils.h"
#include "ir/compare.h"
#include "kiln/ir/passes.h"
#include "kiln/ops/pointwise.h"

namespace kiln::ops {
extern const OpDef& as_strided_scatter_op;
extern const OpDef& to_copy_op;
}  // namespace kiln::ops

namespace kiln::capture {

namespace {
const OpDef& as_strided_op() {
  static const OpDef& op = *find_op("as_strided");
  return op;
}

// The metadata of a view's graph value (whether it requires grad is autograd's business).
TensorMeta view_info(const Tensor& t) {
  return {t.dtype(), t.sizes(), t.strides(), t.storage_offset(), false};
}
Attrs as_strided_attrs(const Tensor& t) {
  return Attrs{t.sizes().vec(), t.strides().vec(), t.storage_offset()};
}
// Whether attribute k of `op` is a runtime value (a random op's Philox seed or offset).
bool is_philox_attr(const OpDef& op, size_t k) {
  return static_cast<int>(k) == op.philox_attrs[0] || static_cast<int>(k) == op.philox_attrs[1];
}
// Bit k: output k of `n` requires grad (as recorded) / could (a floating dtype).
uint32_t recorded_grad_bits(const std::vector<TensorMeta>& outputs) {
  uint32_t bits = 0;
  for (size_t k = 0; k < outputs.size() && k < 32; ++k)
    if (outputs[k].requires_grad) bits |= 1u << k;
  return bits;
}
uint32_t floating_bits(const std::vector<TensorMeta>& outputs) {
  uint32_t bits = 0;
  for (size_t k = 0; k < outputs.size() && k < 32; ++k)
    if (is_floating(outputs[k].dtype)) bits |= 1u << k;
  return bits;
}
bool covers_whole(const Tensor& t, const Buffer& b) {
  return t.storage_offset() == 0 && t.is_contiguous() && t.numel() == b.numel;
}

// What a pending tensor left alive after its capture was abandoned says when read.
struct AbandonedValue final : PendingValue {
  std::string why;
  explicit AbandonedValue(std::string w) : why(std::move(w)) {}
  void materialize(TensorImpl&, const char*, const std::source_location*) override {
    throw Error(
        "this tensor was being computed by a compiled function whose capture was "
        "abandoned (" +
        why + "), so it has no value");
  }
  void share_with(const TensorImpl&, const std::shared_ptr<TensorImpl>& alias) override {
    alias->set_pending(std::make_shared<AbandonedValue>(why));
  }
  const void* memory_id() const override { return this; }
  uint64_t version() const override { return 0; }
  int64_t capacity() const override { return 0; }
};

// Marks a concrete storage that the segment writes: reading it runs the segment first.
struct StorageWriter final : PendingValue {
  Tracer* tracer;
  explicit StorageWriter(Tracer* t) : tracer(t) {}
  void materialize(TensorImpl&, const char* why, const std::source_location* where) override {
    tracer->flush(why,
                  where ? user_call_site(*where, true)
                        : user_call_site(std::source_location::current(), false),
                  false);
  }
  void share_with(const TensorImpl&, const std::shared_ptr<TensorImpl>&) override {}
  const void* memory_id() const override { return this; }
  uint64_t version() const override { return 0; }
  int64_t capacity() const override { return 0; }
};
}  // namespace

// ---- PendingTensor ----
void PendingTensor::materialize(TensorImpl&, const char* why, const std::source_location* where) {
  KILN_CHECK(std::this_thread::get_id() == thread, Error,
             "a tensor computed by a compiled function still running on another thread was read "
             "(",
             why,
             "); it has no value until that function reaches a sync point or returns: "
             "hand tensors to other threads after the compiled call");
  tracer->flush(
      why,
      where ? user_call_site(*where, true) : user_call_site(std::source_location::current(), false),
      false);
}

void PendingTensor::share_with(const TensorImpl& self, const std::shared_ptr<TensorImpl>& alias) {
  KILN_CHECK(std::this_thread::get_id() == thread, Error,
             "a view or detach() was made of a tensor that a compiled function still running on "
             "another thread has not computed yet: hand tensors to other threads after the "
             "compiled call");
  // A view the tracer records gets its own value next (record_view). Otherwise the alias is a
  // detach() or a view made while capture is paused (a backend or a compiled backward viewing
  // a pending tensor): it has no history, and it reads as this tensor's value only with this
  // tensor's geometry and where no graph value carries gradients (without AOT autograd); else
  // it is re-derived from the buffer, without gradient, when read.
  const bool same_geometry = alias->sizes() == self.sizes() && alias->strides() == self.strides() &&
                             alias->storage_offset() == self.storage_offset();
  const bool shares_value = same_geometry && !tracer->records_autograd();
  // (self's pending value is this tensor: no enable_shared_from_this, whose weak reference
  // cost every op's result two atomic operations.)
  auto p = std::make_shared<PendingTensor>(
      owner_ ? owner_ : std::static_pointer_cast<PendingTensor>(self.pending()), value,
      shares_value ? value_version : kStale);
  p->without_history = true;
  alias->set_pending(std::move(p));
  tracer->register_pending(alias);  // it becomes concrete with the rest
}

// ---- Tracer: recording and replay ----
namespace {
// Which capture has writes recorded into which concrete storage. A second capture (another
// thread's) writing the same storage before the first has run is a data race the user must
// hear about, as it would be in eager mode.
struct StorageClaims {
  std::mutex mu;
  std::unordered_map<const Storage*, const Tracer*> owner;
};
StorageClaims& storage_claims() {
  static auto* claims = new StorageClaims();
  return *claims;
}
bool claim_storage(const Storage* s, const Tracer* t) {
  StorageClaims& c = storage_claims();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.owner.try_emplace(s, t).first->second == t;
}
void release_storage(const Storage* s, const Tracer* t) {
  StorageClaims& c = storage_claims();
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto it = c.owner.find(s); it != c.owner.end() && it->second == t) c.owner.erase(it);
}

// The capacity of the last finished tracer's per-segment vectors on this thread: a compiled
// function's every call makes a tracer, whose list of pending tensors grew from empty (seven
// reallocations and copies for W6's 100 ops). A tracer takes these and gives them back.
struct SpareRecording {
  std::vector<std::weak_ptr<TensorImpl>> pending;
  std::vector<Tensor> inputs;
};
thread_local bool tls_spare_gone = false;  // (trivially destructible: readable at thread exit)
SpareRecording* spare_recording() {
  if (tls_spare_gone) return nullptr;
  thread_local struct Holder {
    SpareRecording spare;
    ~Holder() { tls_spare_gone = true; }
  } holder;
  return &holder.spare;
}
}  // namespace

Tracer::Tracer(std::shared_ptr<detail::CompiledState> state, bool frozen,
               const detail::ArgumentTensors& args)
    : state_(std::move(state)), frozen_(frozen), args_(args) {
  if (SpareRecording* spare = spare_recording()) {
    rec_.pending.swap(spare->pending);
    rec_.inputs.swap(spare->inputs);
  }
  if (state_->options.pure) pure_ = std::make_shared<PureObservation>();
  if (const Backend::AotCompilers* aot = state_->backend.aot())
    autograd_ = make_segment_autograd(*this, *aot);
  start_replay();
}

PendingValue* Tracer::writer_of(const Storage& storage) {
  return written_.storages.count(&storage) ? written_.writer.get() : nullptr;
}

// Storages still claimed would point to written_.writer, which dies with the tracer: release them.
Tracer::~Tracer() {
  release_written_storages();
  if (SpareRecording* spare = spare_recording();
      spare && rec_.pending.capacity() > spare->pending.capacity()) {
    rec_.pending.clear();
    rec_.inputs.clear();
    rec_.pending.swap(spare->pending);
    rec_.inputs.swap(spare->inputs);
  }
}

void Tracer::start_replay() {
  replay_.entry.reset();
  replay_.candidates.clear();
  replay_.cursor = 0;
  replay_.runtime_values.clear();
  detail::CompiledState& st = *state_;
  std::lock_guard<std::mutex> lock(st.mu);
  if (segment_index_ < st.recent.size() && !st.recent[segment_index_].empty()) {
    replay_.entry = st.recent[segment_index_].front();  // the others are fetched if it differs
    replay_.generation = st.generation;
  }
}

void Tracer::fetch_replay_candidates() {
  if (!replay_.candidates.empty()) return;
  detail::CompiledState& st = *state_;
  std::lock_guard<std::mutex> lock(st.mu);
  if (segment_index_ < st.recent.size() && st.generation == replay_.generation)
    replay_.candidates = st.recent[segment_index_];
}

template <class Matches>
bool Tracer::replay_matches(Matches&& matches) {
  const auto& nodes = replay_.entry->graph.nodes;
  if (replay_.cursor < nodes.size() && matches(nodes[replay_.cursor])) return true;
  // Another recent entry that shares the prefix matched so far may go on from here (a function
  // alternating between shapes, say).
  if (switch_replay([&](const CacheEntry& e) {
        return e.graph.nodes.size() > replay_.cursor && matches(e.graph.nodes[replay_.cursor]);
      }))
    return true;
  stop_replay();
  return false;
}

bool Tracer::shares_replayed_prefix(const CacheEntry& other) const {
  if (other.graph.nodes.size() < replay_.cursor) return false;
  for (size_t i = 0; i < replay_.cursor; ++i)
    if (!ir::same_node_at(replay_.entry->graph, other.graph, i)) return false;
  return true;
}

void Tracer::stop_replay() {
  if (!replay_.entry) return;
  const std::shared_ptr<CacheEntry> entry = std::move(replay_.entry);
  rec_.diverging_from = entry;
  replay_.entry.reset();
  const ir::Graph& g = entry->graph;
  for (size_t i = 0; i < replay_.cursor; ++i) {
    const ir::Node& n = g.nodes[i];
    switch (n.kind) {
      case ir::NodeKind::Placeholder:
        rec_.graph.add_placeholder(n.outputs[0]);
        break;
      case ir::NodeKind::Constant:
        rec_.graph.add_constant(n.attrs.scalar(0), n.attrs.dtype(1));
        break;
      case ir::NodeKind::Call:
        rec_.graph.add_call(*n.op, n.inputs, n.attrs, n.outputs, n.loc);
        break;
    }
  }
  // This call's runtime values replace the cached ones (runtime_attrs are in node order).
  size_t k = 0;
  for (const ir::RuntimeAttr& r : g.runtime_attrs) {
    if (static_cast<size_t>(r.node) >= replay_.cursor) break;
    ir::Node& n = rec_.graph.nodes[static_cast<size_t>(r.node)];
    n.attrs = ir::with_attr(n.attrs, static_cast<size_t>(r.attr), replay_.runtime_values[k++]);
    rec_.graph.runtime_attrs.push_back(r);
  }
  replay_.cursor = 0;
  replay_.runtime_values.clear();
}

void Tracer::note_divergence(ir::ValueRef recorded) {
  if (!rec_.diverging_from) return;
  const ir::Graph& cached = rec_.diverging_from->graph;
  const auto node = static_cast<size_t>(recorded.node);
  if (node < cached.nodes.size() && ir::same_node_but_sizes(cached, rec_.graph, node)) return;
  rec_.diverging_from.reset();
  CallSite site = user_call_site(std::source_location::current(), false);
  if (site.loc.known())
    rec_.graph.nodes[node].loc = std::move(site.loc);
  else if (!site.frames.empty())
    rec_.divergence_frame.emplace(recorded.node, site.frames.front());
}

ir::SourceLoc Tracer::recorded_call_site(int32_t node) const {
  if (node < 0 || static_cast<size_t>(node) >= rec_.graph.nodes.size()) return {};
  if (const ir::SourceLoc& loc = rec_.graph.nodes[static_cast<size_t>(node)].loc; loc.known())
    return loc;
  if (!rec_.divergence_frame || rec_.divergence_frame->first != node) return {};
  return CallSite{{}, {rec_.divergence_frame->second}}.resolve();
}

ir::ValueRef Tracer::record_placeholder(const TensorMeta& info) {
  if (replay_.entry && replay_matches([&](const ir::Node& n) {
        return n.kind == ir::NodeKind::Placeholder && ir::same_guarded_meta(n.outputs[0], info);
      }))
    return {static_cast<int32_t>(replay_.cursor++), 0};
  const ir::ValueRef v = rec_.graph.add_placeholder(info);
  note_divergence(v);
  return v;
}

ir::ValueRef Tracer::record_constant(const Scalar& value, DType dtype) {
  if (replay_.entry && replay_matches([&](const ir::Node& n) {
        return n.kind == ir::NodeKind::Constant && n.attrs.dtype(1) == dtype &&
               ir::same_attr(n.attrs[0], value);
      }))
    return {static_cast<int32_t>(replay_.cursor++), 0};
  const ir::ValueRef v = rec_.graph.add_constant(value, dtype);
  note_divergence(v);
  return v;
}

template <class Infer>
ir::ValueRef Tracer::record_call(const OpDef& op, std::span<const ir::ValueRef> ins,
                                 const Attrs& attrs, Infer&& infer, bool grad) {
  const bool random = op.kind == OpKind::Random;
  if (replay_.entry && replay_matches([&](const ir::Node& n) {
        bool same = n.kind == ir::NodeKind::Call && n.op == &op &&
                    std::ranges::equal(n.inputs, ins) && n.attrs.size() == attrs.size() &&
                    recorded_grad_bits(n.outputs) == (grad ? floating_bits(n.outputs) : 0u);
        for (size_t k = 0; same && k < attrs.size(); ++k)
          same = (random && is_philox_attr(op, k)) || ir::same_attr(n.attrs[k], attrs[k]);
        return same;
      })) {
    if (random)
      for (int8_t k : op.philox_attrs) replay_.runtime_values.push_back(attrs.i(k));
    return {static_cast<int32_t>(replay_.cursor++), 0};
  }
  std::vector<TensorMeta> infos = infer();
  if (grad)
    for (TensorMeta& m : infos) m.requires_grad = is_floating(m.dtype);
  const ir::ValueRef v = rec_.graph.add_call(op, std::vector<ir::ValueRef>(ins.begin(), ins.end()),
                                             attrs, std::move(infos));
  note_divergence(v);
  if (random)
    for (int8_t k : op.philox_attrs) rec_.graph.runtime_attrs.push_back({v.node, k});
  return v;
}

// ---- Tracer: ops ----

namespace {

// Blocks for the pending tensors a tracer makes and drops by the hundred per call (a tensor
// and its PendingTensor each): kept on a short per-thread free list of blocks of one size
// instead of going back to malloc, whose allocation and free were ~18% of a re-captured call of
// W6's 100 ops. Under AddressSanitizer every block goes to operator new and delete, so
// use-after-free stays visible.
template <size_t Bytes, size_t Align>
class BlockRecycler {
 public:
  static void* take() {
#ifndef __SANITIZE_ADDRESS__
    if (alive_ && list_.count > 0) return list_.slots[--list_.count];
#endif
    return ::operator new (Bytes, std::align_val_t{Align});
  }
  static void give(void* block) {
#ifndef __SANITIZE_ADDRESS__
    if (alive_ && list_.count < kSlots) {
      if (!list_.slots) [[unlikely]]
        list_.slots = new void*[kSlots];
      list_.slots[list_.count++] = block;
      return;
    }
#endif
    ::operator delete (block, std::align_val_t{Align});
  }

 private:
  static constexpr int kSlots = 512;
  // The slots are on the heap: a library with initial-exec thread-locals can be dlopen'ed (the
  // Python extension loads libkiln so) only while they fit the few static TLS bytes glibc keeps
  // for late loads (about 1.6 KB in all), so no thread-local of the library holds an array.
  struct FreeList {
    void** slots = nullptr;  // kSlots entries, allocated at the first give()
    int count = 0;
    ~FreeList() {
      alive_ = false;  // blocks given back during the thread's later destructors are freed
      while (count > 0) ::operator delete (slots[--count], std::align_val_t{Align});
      delete[] slots;
    }
  };
  // initial-exec: a load from the thread pointer, not a __tls_get_addr call per access (as
  // detail::tls_pending_writes).
  [[gnu::tls_model("initial-exec")]] static thread_local FreeList list_;
  // Trivially destructible: readable after list_ is gone.
  [[gnu::tls_model("initial-exec")]] static thread_local bool alive_;
};
template <size_t Bytes, size_t Align>
[[gnu::tls_model("initial-exec")]] thread_local
    typename BlockRecycler<Bytes, Align>::FreeList BlockRecycler<Bytes, Align>::list_;
template <size_t Bytes, size_t Align>
[[gnu::tls_model("initial-exec")]] thread_local bool BlockRecycler<Bytes, Align>::alive_ = true;

// An allocator for std::allocate_shared over BlockRecycler (allocate_shared asks for one block
// of its control block with the object inside).
template <class T>
struct RecycledAllocator {
  using value_type = T;
  RecycledAllocator() = default;
  template <class U>
  RecycledAllocator(const RecycledAllocator<U>&) {}  // NOLINT: rebinding, as allocators do
  T* allocate(size_t n) {
    if (n != 1)
      return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    return static_cast<T*>(BlockRecycler<sizeof(T), alignof(T)>::take());
  }
  void deallocate(T* p, size_t n) {
    if (n != 1) return ::operator delete (p, std::align_val_t{alignof(T)});
    BlockRecycler<sizeof(T), alignof(T)>::give(p);
  }
  template <class U>
  bool operator==(const RecycledAllocator<U>&) const {
    return true;
  }
};

template <class T, class... Args>
std::shared_ptr<T> make_recycled(Args&&... args) {
  return std::allocate_shared<T>(RecycledAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace

PendingTensor* Tracer::own_pending(const TensorImpl& impl) const {
  if (!impl.is_pending()) return nullptr;
  // PendingTensor is final: an exact type check (a pointer compare) does what dynamic_cast
  // did, which walked the class hierarchy and compared type names (~7% of a re-captured call
  // of W6's 100 ops).
  PendingValue* value = impl.pending().get();
  if (typeid(*value) != typeid(PendingTensor)) return nullptr;
  auto* p = static_cast<PendingTensor*>(value);
  return p->tracer == this ? p : nullptr;
}

// Inlined into its callers (all in this file): a returned Tensor is two 8-byte stores that the
// caller's move read back as one 16-byte load, which the CPU cannot forward from them (a stall
// of ~7% of a re-captured call of W6's 100 ops).
[[gnu::always_inline]] inline Tensor Tracer::new_pending(const TensorMeta& info,
                                                         ir::ValueRef value) {
  // `info` is a graph value's: contiguous, with sizes that shape inference has checked.
  int64_t numel = 1;
  for (int64_t s : info.sizes) numel *= s;
  auto impl = make_recycled<TensorImpl>(TensorImpl::Contiguous{info.sizes, info.strides, numel},
                                        info.dtype);
  impl->set_pending(make_recycled<PendingTensor>(this, value, numel, info.dtype));
  rec_.pending.emplace_back(impl);
  return Tensor(std::move(impl));
}

Tensor Tracer::symbolic_input(const TensorMeta& meta) {
  TensorMeta info = TensorMeta::contiguous(meta.dtype, meta.sizes);
  return new_pending(info, record_placeholder(info));
}

void Tracer::adopt_graph(const ir::Graph& g) {
  KILN_CHECK(metadata_only() && rec_.graph.nodes.empty() && !replay_.entry, Error,
             "internal error: adopt_graph outside a fresh metadata-only run");
  rec_.graph = g;
  rec_.graph.outputs.clear();
  adopted_runtime_attrs_ = g.runtime_attrs.size();
}

Tensor Tracer::value_tensor(ir::ValueRef v) {
  const ir::Node& n = recorded_node(static_cast<size_t>(v.node));
  if (n.kind == ir::NodeKind::Constant) return ir::constant_value(n);
  const TensorMeta& m = n.outputs[static_cast<size_t>(v.output)];
  if (m.storage_offset == 0 && (m.strides.empty() || m.strides == contiguous_strides(m.sizes)))
    return new_pending(TensorMeta::contiguous(m.dtype, m.sizes), v);
  // A strided input or a view keeps its layout: what a formula does with it (reshape copies or
  // views) must be decided on the layout it has when the graph runs.
  int64_t extent = m.storage_offset + 1;
  for (size_t d = 0; d < m.sizes.size(); ++d)
    if (m.sizes[d] == 0) extent = 0;
  if (extent > 0)
    for (size_t d = 0; d < m.sizes.size(); ++d) extent += (m.sizes[d] - 1) * m.strides[d];
  auto impl = std::make_shared<TensorImpl>(nullptr, m.storage_offset, m.sizes, m.strides, m.dtype);
  impl->set_pending(std::make_shared<PendingTensor>(this, v, extent, m.dtype));
  rec_.pending.emplace_back(impl);
  return Tensor(std::move(impl));
}

ir::Graph Tracer::take_graph(std::span<const Tensor> results) {
  KILN_CHECK(metadata_only(), Error, "internal error: take_graph outside a metadata-only run");
  KILN_CHECK(written_.storages.empty(), NotImplementedError, metadata_only_,
             ": writes in place into a tensor it did not create; a traced function must be "
             "functional in its inputs");
  std::vector<ir::ValueRef> outputs;
  for (size_t i = 0; i < results.size(); ++i) {
    KILN_CHECK(results[i].defined(), Error, metadata_only_, ": result ", i,
               " is an undefined tensor");
    outputs.push_back(value_of(results[i]));
  }
  KILN_CHECK(rec_.inputs.empty(), NotImplementedError, metadata_only_,
             ": reads a concrete tensor (", rec_.inputs.empty() ? "" : rec_.inputs[0].shape_str(),
             "); a traced function must make every value it uses through ops");
  KILN_CHECK(rec_.graph.runtime_attrs.size() == adopted_runtime_attrs_, NotImplementedError,
             metadata_only_,
             ": calls a random op, which a re-traced function may not (its seed would be fixed at "
             "trace time)");
  ir::Graph g = std::move(rec_.graph);
  g.outputs = std::move(outputs);
  g.input_writes.clear();  // about the outputs a flush collects, not these
  reset_segment();
  return g;
}

void Tracer::rederive(const Tensor& t, PendingTensor& p) {
  // Under AOT autograd the new value carries the buffer's gradient, and the tensor's history
  // moves to it (eager autograd regenerates a view's history the same way).
  const ir::ValueRef base = p.buffer().value;
  const bool grad =
      recording_autograd() && !p.without_history && is_grad_enabled() && value_requires_grad(base);
  p.value = record_call(
      as_strided_op(), {&base, 1}, as_strided_attrs(t),
      [&] { return std::vector<TensorMeta>{view_info(t)}; }, grad);
  p.value_version = p.buffer().version;
  if (grad) {
    Tensor self = t;
    attach_grad({&self, 1});
  }
}

ir::ValueRef Tracer::value_of(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (PendingTensor* p = own_pending(*impl)) {
    if (p->value_version != p->buffer().version) rederive(t, *p);
    return p->value;
  }
  if (impl->is_pending()) (void)impl->data();  // another capture's: concrete, then an input
  if (impl->is_wrapped_number()) return record_constant(t.item_scalar(), t.dtype());
  if (!written_.storages.empty())
    if (auto it = written_.storages.find(impl->storage_if_concrete().get());
        it != written_.storages.end()) {
      Buffer& b = *it->second;
      WrittenMemory::View& cached = written_.views[impl];
      if (cached.version_plus_one != b.version + 1) {
        cached.tensor = t;
        const ir::ValueRef base = b.value;
        cached.value = record_call(as_strided_op(), {&base, 1}, as_strided_attrs(t),
                                   [&] { return std::vector<TensorMeta>{view_info(t)}; });
        cached.version_plus_one = b.version + 1;
      }
      return cached.value;
    }
  auto [it, inserted] = rec_.input_of.try_emplace(impl);
  if (inserted) {
    it->second = record_placeholder(TensorMeta::of(t));
    rec_.inputs.push_back(t);
  }
  return it->second;
}

void Tracer::write_into(const Tensor& dst, ir::ValueRef value, const TensorMeta& value_info,
                        bool grad) {
  if (value_info.dtype != dst.dtype()) {  // the write casts, as eager's does
    const ir::ValueRef from = value;
    value = record_call(
        ops::to_copy_op, {&from, 1}, Attrs{dst.dtype()},
        [&] {
          return std::vector<TensorMeta>{TensorMeta::contiguous(dst.dtype(), value_info.sizes)};
        },
        grad);
  }
  PendingTensor* p = own_pending(*dst.impl());
  Buffer& buffer = p ? p->buffer() : written_buffer(dst);
  const bool whole = covers_whole(dst, buffer);
  if (whole) {
    buffer.value = value;
  } else {
    // The result has the shape of the buffer's current value (contiguous, numel elements).
    const std::array<ir::ValueRef, 2> ins{buffer.value, value};
    buffer.value = record_call(ops::as_strided_scatter_op, ins, as_strided_attrs(dst), [&] {
      const TensorMeta& base = recorded_node(static_cast<size_t>(ins[0].node))
                                   .outputs[static_cast<size_t>(ins[0].output)];
      return std::vector<TensorMeta>{TensorMeta::contiguous(buffer.dtype, base.sizes)};
    });
  }
  ++buffer.version;
  // dst's own value: what was written, when the write covered its buffer; otherwise a pending
  // tensor re-derives it from the buffer (as_strided with an absolute offset, which later
  // as_strided views of dst rely on).
  if (!p) {
    written_.views[dst.impl()] = {dst, value, buffer.version + 1};
  } else if (whole) {
    p->value = value;
    p->value_version = buffer.version;
    p->without_history = false;  // the write's value carries what the write's inputs carry
  }
}

Buffer& Tracer::written_buffer(const Tensor& dst) {
  TensorImpl* impl = dst.impl();
  if (impl->is_pending()) (void)impl->data();  // another capture's tensor: concrete first
  const std::shared_ptr<Storage>& storage = impl->storage_if_concrete();
  // A concrete tensor this segment starts writing: what earlier graphs of the call saved over
  // its memory keeps the old value (the write runs with this graph).
  if (!written_.storages.count(storage.get())) before_write(dst);
  auto& slot = written_.storages[storage.get()];
  if (!slot) {
    if (!claim_storage(storage.get(), this)) {
      written_.storages.erase(storage.get());
      throw Error(detail::concat(
          "kiln::compile: '", state_->name, "': a tensor (shape ", dst.shape_str(),
          ") is written in place while a compiled function on another thread has a write to "
          "the same memory recorded; two threads writing one tensor at once is a data race "
          "(in eager mode too): synchronise them"));
    }
    if (!written_.writer) written_.writer = std::make_unique<StorageWriter>(this);
    detail::tls_pending_writes = this;  // reading it on this thread is now a sync point
    slot = std::make_shared<Buffer>();
    slot->numel = static_cast<int64_t>(storage->nbytes()) / dst.element_size();
    slot->dtype = dst.dtype();
    slot->concrete = storage;
    slot->concrete_flat =
        Tensor(std::make_shared<TensorImpl>(storage, 0, Shape{slot->numel}, Shape{1}, dst.dtype()));
    slot->value = record_placeholder(TensorMeta::of(slot->concrete_flat));
    slot->input_index = static_cast<int32_t>(rec_.inputs.size());
    rec_.inputs.push_back(slot->concrete_flat);
    written_.order.push_back(slot.get());
  }
  KILN_CHECK(slot->dtype == dst.dtype(), NotImplementedError,
             "kiln::compile: a tensor's memory is written in place as ", dst.dtype(),
             " and also used as ", slot->dtype,
             " in one graph; reinterpreting memory as another dtype is not supported under "
             "capture");
  // Bumped now, as eager would, so that autograd sees a tensor it saved was overwritten.
  storage->bump_version();
  return *slot;
}

bool Tracer::record_view(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                         std::span<Tensor, kMaxOpOutputs> outputs, bool grad) {
  const Tensor& base = inputs[0];
  const bool pending = base.impl()->is_pending();
  if (!pending) return false;  // a view of a concrete tensor is concrete (no data is touched)
  ir::ValueRef in = value_of(base);
  if (!base.impl()->is_pending()) return false;  // another capture's tensor, now concrete
  OpCall call{op, inputs, attrs};
  Tensor out = op.view(call);  // metadata only: pending on the base's buffer
  out.impl()->set_view_of(base.impl_ptr());
  auto* p = static_cast<PendingTensor*>(out.impl()->pending().get());
  p->value = record_call(
      op, {&in, 1}, attrs, [&] { return std::vector<TensorMeta>{view_info(out)}; }, grad);
  p->value_version = p->buffer().version;
  p->without_history = false;
  outputs[0] = std::move(out);
  return true;
}

bool Tracer::intercept(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                       std::span<Tensor, kMaxOpOutputs> outputs, int& num_outputs) {
  if (tls_break_before_op != nullptr) [[unlikely]]
    if (std::string why = (*tls_break_before_op)(op, inputs); !why.empty())
      sync_current(why, std::source_location::current(), false);
  if (op.kind == OpKind::DataDependent) {
    sync_current(detail::concat("'", op.name,
                                "' is data-dependent (its output shape depends on tensor values)"),
                 std::source_location::current(), false);
    return false;
  }
  if (is_disallowed_in_graph(op)) {
    sync_current(detail::concat("'", op.name, "' is marked disallow_in_graph"),
                 std::source_location::current(), false);
    return false;
  }
  bool grad = false;
  if (SegmentAutograd* autograd = recording_autograd()) {
    // A view whose memory was written since its value was recorded takes the new value first,
    // and with it the write's gradients: whether this op has gradients depends on them (a view
    // taken before `base.sub_(x)` with x requiring grad requires grad after it, as in eager).
    for (const Tensor& t : inputs)
      if (PendingTensor* p = own_pending(*t.impl()); p && p->value_version != p->buffer().version)
        rederive(t, *p);
    grad = is_grad_enabled() &&
           std::ranges::any_of(inputs, [](const Tensor& t) { return t.impl()->requires_grad(); });
    // After a backward traced into this graph, a new computation with gradients starts a new
    // graph: its backward must reach the traced one's node (hooks, retain_grad, a second
    // backward's error), which a backward traced through the same graph would go around.
    if (grad && autograd->traced_backward())
      sync_current("an op with gradients after a backward() traced into the graph",
                   std::source_location::current(), false);
    if (const char* why = aot_refusal(inputs, outputs[0], grad)) {
      sync_current(why, std::source_location::current(), false);
      for (const Tensor& out : outputs)  // the write runs eagerly next
        if (out.defined()) before_write(out);
      return false;
    }
  }
  if (op.kind == OpKind::View) {
    if (outputs[0].defined()) return false;  // dispatch reports the error
    if (record_view(op, inputs, attrs, outputs, grad)) {
      if (grad) attach_grad(outputs.first(1));
      num_outputs = 1;
      return true;
    }
    return false;
  }
  // Shape and dtype inference, so that errors surface at the user's line: first thing when
  // recording (a bad call records nothing); only on a difference when replaying (a replayed
  // node had the same input metadata and attributes when it was recorded).
  auto infer = [&] {
    OpCall call{op, inputs, attrs};
    std::array<TensorMeta, kMaxOpOutputs> metas;
    const int n = op.meta(call, metas);
    std::vector<TensorMeta> infos;
    // Graph values are contiguous, as meta functions state; the graph records their strides.
    for (int i = 0; i < n; ++i)
      infos.push_back(TensorMeta::contiguous(metas[i].dtype, metas[i].sizes));
    return infos;
  };
  std::optional<std::vector<TensorMeta>> inferred;
  if (!replay_.entry) inferred = infer();
  SmallVector<ir::ValueRef, 8> ins;
  for (const Tensor& t : inputs) ins.push_back(value_of(t));
  const ir::ValueRef v = record_call(
      op, ins, attrs, [&] { return inferred ? std::move(*inferred) : infer(); }, grad);
  const std::vector<TensorMeta>& infos = recorded_node(static_cast<size_t>(v.node)).outputs;
  const int n = static_cast<int>(infos.size());
  if (outputs[0].defined()) {
    // In place / out= (every output given): the same checks eager dispatch makes, then a
    // functional write per output.
    const std::vector<TensorMeta> results = infos;  // (recording below may move the node array)
    for (int i = 0; i < n; ++i) {
      const Tensor& out = outputs[static_cast<size_t>(i)];
      KILN_CHECK(out.defined(), Error, op.name, ": output ", i, " was not provided");
      check_destination(op, results[static_cast<size_t>(i)], out);
    }
    for (int i = 0; i < n; ++i)
      write_into(outputs[static_cast<size_t>(i)], {v.node, static_cast<int32_t>(i)},
                 results[static_cast<size_t>(i)], grad);
    // The written tensors' history follows their new value.
    if (SegmentAutograd* autograd = recording_autograd()) {
      if (grad)
        attach_grad(outputs.first(static_cast<size_t>(n)));
      else
        autograd->on_write_without_grad(outputs.first(static_cast<size_t>(n)));
    }
    num_outputs = n;
    return true;
  }
  for (int i = 0; i < n; ++i)
    outputs[static_cast<size_t>(i)] =
        new_pending(infos[static_cast<size_t>(i)], {v.node, static_cast<int32_t>(i)});
  if (grad) attach_grad(outputs.first(static_cast<size_t>(n)));
  num_outputs = n;
  return true;
}

// ---- Tracer: AOT autograd ----

const char* Tracer::aot_refusal(std::span<const Tensor> inputs, const Tensor& out,
                                bool grad) const {
  // A concrete view of memory written in place with gradients since it was taken gets the
  // write's history regenerated by eager autograd as an op reads it (refresh_view_history);
  // until then its requires_grad is stale, and this graph would record the op without the
  // view's gradient.
  if (is_grad_enabled())
    for (const Tensor& t : inputs)
      if (!own_pending(*t.impl()) && autograd::view_history_is_stale(*t.impl()))
        return "it reads a view whose base was changed in place with gradients since the view "
               "was taken (it runs eagerly, where autograd regenerates the view's history)";
  // Under no_grad a write into a concrete leaf (an optimizer's update of a parameter) changes
  // no history, here as in eager: it is recorded as any write into a concrete tensor.
  const bool keeps_history = out.defined() && !grad && !is_grad_enabled() &&
                             !out.impl()->is_view() && !own_pending(*out.impl()) &&
                             !(out.impl()->autograd_meta() && out.impl()->autograd_meta()->grad_fn);
  if (out.defined() && (grad || out.impl()->requires_grad()) && !keeps_history) {
    // A whole tensor the graph made, written in place, just takes the new value and its
    // history (eager's rebase); anything else runs eagerly, where autograd decides.
    const PendingTensor* p = own_pending(*out.impl());
    if (!p || out.impl()->is_view() || !covers_whole(out, p->buffer()))
      return "an in-place write into a view or an input where gradients are involved (it runs "
             "eagerly, where autograd rebases the history)";
    const AutogradMeta* m = out.impl()->autograd_meta().get();
    if (out.impl()->requires_grad() && !autograd_->has_segment_history(m))
      return "an in-place write into a tensor that requires grad without this graph's history "
             "(it runs eagerly)";
  }
  // Writes through a tensor without history (a detach()) into memory whose value carries
  // gradients change a tensor with history behind autograd's back: eager keeps that tensor's
  // history for the new data, which one graph value cannot express. They run eagerly.
  if (out.defined())
    if (const PendingTensor* p = own_pending(*out.impl());
        p && p->without_history && value_requires_grad(p->buffer().value))
      return "an in-place write through a detach()ed tensor into memory a tensor with autograd "
             "history shares (it runs eagerly, where that tensor keeps its history)";
  if (!written_.storages.empty())
    for (const Tensor& t : inputs)
      if (t.impl()->requires_grad() && !own_pending(*t.impl()) &&
          written_.storages.count(t.impl()->storage_if_concrete().get()))
        return "a tensor that requires grad is read after this graph wrote its memory through "
               "another tensor (a detach()ed alias): it runs eagerly, where it keeps its history";
  if (!grad) return nullptr;
  for (const Tensor& t : inputs) {
    if (!t.impl()->requires_grad() || !own_pending(*t.impl())) continue;
    if (!autograd_->has_segment_history(t.impl()->autograd_meta().get()))
      return "a tensor made inside the compiled function requires grad without history (a "
             "leaf made with requires_grad_()): AOT autograd takes it as a graph input";
  }
  return nullptr;
}

void Tracer::attach_grad(std::span<Tensor> outputs) {
  SmallVector<ir::ValueRef, kMaxOpOutputs> values;
  for (const Tensor& t : outputs)
    values.push_back(is_floating(t.dtype()) ? own_pending(*t.impl())->value : ir::ValueRef{});
  autograd_->on_record(outputs, values);
}

void Tracer::run_for_gradient() {
  flush("a gradient (backward(), a hook) reached a graph still being captured",
        user_call_site(std::source_location::current(), false), false);
}

bool Tracer::recording_here() const {
  return !flushing_ && current_interceptor() == static_cast<const DispatchInterceptor*>(this);
}

void Tracer::release_written_storages() {
  for (Buffer* b : written_.order) release_storage(b->concrete.get(), this);
  if (detail::tls_pending_writes == this) detail::tls_pending_writes = nullptr;
}

void Tracer::reset_segment() {
  // A fresh graph that keeps the node array's capacity: the next segment (usually the same
  // graph again) records without reallocating.
  std::vector<ir::Node> nodes = std::move(rec_.graph.nodes);
  nodes.clear();
  rec_.graph = ir::Graph();
  rec_.graph.nodes = std::move(nodes);
  rec_.inputs.clear();
  rec_.input_of.clear();
  replay_.entry.reset();
  replay_.candidates.clear();
  replay_.cursor = 0;
  replay_.runtime_values.clear();
  written_.storages.clear();
  written_.order.clear();
  written_.views.clear();
  rec_.pending.clear();
  rec_.diverging_from.reset();
  rec_.divergence_frame.reset();
  adopted_runtime_attrs_ = 0;
  if (autograd_) autograd_->end_segment();
}

void Tracer::abandon(const std::string& why) {
  if (autograd_) autograd_->abandon(why);
  for (auto& w : rec_.pending)
    if (auto impl = w.lock(); impl && impl->is_pending())
      impl->set_pending(std::make_shared<AbandonedValue>(why));
  release_written_storages();
  reset_segment();
}

}  // namespace kiln::capture
