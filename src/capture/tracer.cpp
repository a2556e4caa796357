// The tracer: records op calls into the current graph segment and runs segments at sync points.
#include "capture/tracer.h"

#include <sstream>

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

ir::TensorInfo info_of(const Tensor& t) {
  return {t.dtype(), t.sizes(), t.strides(), t.storage_offset(), t.requires_grad()};
}
ir::TensorInfo contiguous_info(DType dtype, const Shape& sizes) {
  return {dtype, sizes, contiguous_strides(sizes), 0, false};
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
  void share_with(const std::shared_ptr<TensorImpl>& alias) override {
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
  void share_with(const std::shared_ptr<TensorImpl>&) override {}
  const void* memory_id() const override { return this; }
  uint64_t version() const override { return 0; }
  int64_t capacity() const override { return 0; }
};
}  // namespace

// ---- PendingTensor ----
void PendingTensor::materialize(TensorImpl&, const char* why, const std::source_location* where) {
  tracer->flush(
      why,
      where ? user_call_site(*where, true) : user_call_site(std::source_location::current(), false),
      false);
}

void PendingTensor::share_with(const std::shared_ptr<TensorImpl>& alias) {
  auto p = std::make_shared<PendingTensor>(tracer, buffer, value);
  p->value_version = value_version;
  alias->set_pending(std::move(p));
  tracer->register_pending(alias);  // it becomes concrete with the rest
}

// ---- Tracer ----
Tracer::~Tracer() = default;

Tensor Tracer::new_pending(const ir::TensorInfo& info, ir::ValueRef value) {
  auto buffer = std::make_shared<Buffer>();
  buffer->value = value;
  buffer->numel = 1;  // meta already checked the sizes
  for (int64_t s : info.sizes) buffer->numel *= s;
  buffer->dtype = info.dtype;
  auto impl = std::make_shared<TensorImpl>(nullptr, 0, info.sizes, contiguous_strides(info.sizes),
                                           info.dtype);
  impl->set_pending(std::make_shared<PendingTensor>(this, std::move(buffer), value));
  pending_.push_back(impl);
  return Tensor(std::move(impl));
}

Tensor Tracer::symbolic_input(const Tensor& t) {
  ir::TensorInfo info = contiguous_info(t.dtype(), t.sizes());
  return new_pending(info, graph_.add_placeholder(info));
}

ir::ValueRef Tracer::value_of(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl->is_pending()) {
    auto* p = dynamic_cast<PendingTensor*>(impl->pending().get());
    if (p && p->tracer == this) {
      if (p->value_version != p->buffer->version) {
        // Written since this tensor's value was recorded: re-derive it from the buffer.
        p->value = graph_.add_call(as_strided_op(), {p->buffer->value},
                                   Attrs{t.sizes().vec(), t.strides().vec(), t.storage_offset()},
                                   {info_of(t)});
        graph_.nodes.back().outputs[0].requires_grad = false;
        p->value_version = p->buffer->version;
      }
      return p->value;
    }
    (void)impl->data();  // another capture's tensor: make it concrete, then read it as input
  }
  if (impl->is_wrapped_number()) return graph_.add_constant(t.item_scalar(), t.dtype());
  if (auto it = written_storages_.find(impl->storage_if_concrete().get());
      it != written_storages_.end()) {
    Buffer& b = *it->second;
    WrittenView& cached = written_views_[impl];
    if (cached.version_plus_one != b.version + 1) {
      cached.tensor = t;
      cached.value = graph_.add_call(as_strided_op(), {b.value},
                                     Attrs{t.sizes().vec(), t.strides().vec(), t.storage_offset()},
                                     {info_of(t)});
      cached.version_plus_one = b.version + 1;
    }
    return cached.value;
  }
  auto [it, inserted] = input_of_.try_emplace(impl);
  if (inserted) {
    it->second = graph_.add_placeholder(info_of(t));
    inputs_.push_back(t);
  }
  return it->second;
}

void Tracer::write_into(const Tensor& dst, ir::ValueRef value, const ir::TensorInfo& value_info) {
  if (value_info.dtype != dst.dtype())
    value = graph_.add_call(ops::to_copy_op, {value}, Attrs{dst.dtype()},
                            {contiguous_info(dst.dtype(), value_info.sizes)});
  TensorImpl* impl = dst.impl();
  std::shared_ptr<Buffer> buffer;
  PendingTensor* p =
      impl->is_pending() ? dynamic_cast<PendingTensor*>(impl->pending().get()) : nullptr;
  if (impl->is_pending() && p && p->tracer == this) {
    buffer = p->buffer;
  } else {
    if (impl->is_pending()) (void)impl->data();
    const std::shared_ptr<Storage>& storage = impl->storage_if_concrete();
    auto& slot = written_storages_[storage.get()];
    if (!slot) {
      slot = std::make_shared<Buffer>();
      slot->numel = static_cast<int64_t>(storage->nbytes()) / dst.element_size();
      slot->dtype = dst.dtype();
      slot->concrete = storage;
      slot->concrete_flat = Tensor(
          std::make_shared<TensorImpl>(storage, 0, Shape{slot->numel}, Shape{1}, dst.dtype()));
      slot->value = graph_.add_placeholder(info_of(slot->concrete_flat));
      inputs_.push_back(slot->concrete_flat);
      storage->set_pending_writer(std::make_shared<StorageWriter>(this));
      written_order_.push_back(slot.get());
    }
    KILN_CHECK(slot->dtype == dst.dtype(), NotImplementedError,
               "kiln::compile: a tensor's memory is written in place as ", dst.dtype(),
               " and also used as ", slot->dtype,
               " in one graph; reinterpreting memory as another dtype is not supported under "
               "capture");
    buffer = slot;
    // Bumped now, as eager would, so that autograd sees a tensor it saved was overwritten.
    storage->bump_version();
  }
  if (covers_whole(dst, *buffer)) {
    buffer->value = value;
  } else {
    buffer->value =
        graph_.add_call(ops::as_strided_scatter_op, {buffer->value, value},
                        Attrs{dst.sizes().vec(), dst.strides().vec(), dst.storage_offset()},
                        {contiguous_info(buffer->dtype, Shape{buffer->numel})});
  }
  ++buffer->version;
  if (p && p->tracer == this) {
    // A partial write leaves dst's value to be re-derived from the buffer (as_strided with an
    // absolute offset, which later as_strided views of dst rely on).
    if (covers_whole(dst, *buffer)) {
      p->value = value;
      p->value_version = buffer->version;
    }
  } else {
    written_views_[impl] = {dst, value, buffer->version + 1};
  }
}

bool Tracer::record_view(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                         std::span<Tensor, kMaxOpOutputs> outputs) {
  const Tensor& base = inputs[0];
  const bool pending = base.impl()->is_pending();
  if (!pending) return false;  // a view of a concrete tensor is concrete (no data is touched)
  ir::ValueRef in = value_of(base);
  if (!base.impl()->is_pending()) return false;  // another capture's tensor, now concrete
  OpCall call{op, inputs, attrs};
  Tensor out = op.view(call);  // metadata only: pending on the base's buffer
  out.impl()->set_is_view(true);
  auto* p = static_cast<PendingTensor*>(out.impl()->pending().get());
  p->value = graph_.add_call(op, {in}, attrs, {info_of(out)});
  graph_.nodes.back().outputs[0].requires_grad = false;
  p->value_version = p->buffer->version;
  outputs[0] = std::move(out);
  return true;
}

bool Tracer::intercept(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                       std::span<Tensor, kMaxOpOutputs> outputs, int& num_outputs) {
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
  if (op.kind == OpKind::View) {
    if (outputs[0].defined()) return false;  // dispatch reports the error
    if (record_view(op, inputs, attrs, outputs)) {
      num_outputs = 1;
      return true;
    }
    return false;
  }
  // Shape and dtype inference now, so that errors surface at the user's line.
  OpCall call{op, inputs, attrs};
  std::array<OutputMeta, kMaxOpOutputs> metas;
  const int n = op.meta(call, metas);
  std::vector<ir::ValueRef> ins;
  ins.reserve(inputs.size());
  for (const Tensor& t : inputs) ins.push_back(value_of(t));
  std::vector<ir::TensorInfo> infos;
  for (int i = 0; i < n; ++i) infos.push_back(contiguous_info(metas[i].dtype, metas[i].sizes));
  ir::ValueRef v = graph_.add_call(op, std::move(ins), attrs, infos);
  if (op.kind == OpKind::Random && attrs.size() >= 2) {
    const auto node = v.node;
    graph_.runtime_attrs.push_back({node, static_cast<int32_t>(attrs.size() - 2)});
    graph_.runtime_attrs.push_back({node, static_cast<int32_t>(attrs.size() - 1)});
  }
  if (outputs[0].defined()) {
    // In place / out=: the same checks eager dispatch makes, then a functional write.
    Tensor& out = outputs[0];
    KILN_CHECK(n == 1, NotImplementedError, op.name,
               ": in-place forms of multi-output ops are not supported under kiln::compile");
    KILN_CHECK(out.sizes() == metas[0].sizes, ShapeError, op.name, ": the result has shape ",
               IntList(metas[0].sizes), " but the output tensor has shape ", out.shape_str(),
               " (an in-place op cannot change its tensor's shape)");
    KILN_CHECK(can_cast(metas[0].dtype, out.dtype()), DTypeError, op.name, ": result type ",
               metas[0].dtype, " can't be cast to the desired output type ", out.dtype());
    for (int64_t d = 0; d < out.dim(); ++d)
      KILN_CHECK(!(out.stride(d) == 0 && out.size(d) > 1), ValueError, op.name,
                 ": cannot write in place into a tensor with expanded (stride 0) dims (shape ",
                 out.shape_str(), ", strides ", IntList(out.strides()),
                 "); call .clone() on it first");
    write_into(out, v, infos[0]);
    num_outputs = 1;
    return true;
  }
  for (int i = 0; i < n; ++i)
    outputs[static_cast<size_t>(i)] =
        new_pending(infos[static_cast<size_t>(i)], {v.node, static_cast<int32_t>(i)});
  num_outputs = n;
  return true;
}

void Tracer::release_written_storages() {
  for (Buffer* b : written_order_) b->concrete->set_pending_writer(nullptr);
}

void Tracer::reset_segment() {
  // A fresh graph that keeps the node array's capacity: the next segment (usually the same
  // graph again) records without reallocating.
  std::vector<ir::Node> nodes = std::move(graph_.nodes);
  nodes.clear();
  graph_ = ir::Graph();
  graph_.nodes = std::move(nodes);
  inputs_.clear();
  input_of_.clear();
  written_storages_.clear();
  written_order_.clear();
  written_views_.clear();
  pending_.clear();
}

void Tracer::abandon(const std::string& why) {
  for (auto& w : pending_)
    if (auto impl = w.lock(); impl && impl->is_pending())
      impl->set_pending(std::make_shared<AbandonedValue>(why));
  release_written_storages();
  reset_segment();
}

}  // namespace kiln::capture
