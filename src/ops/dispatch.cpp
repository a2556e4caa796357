// The op registry and dispatch: the single entry every op call goes through.
#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>
#include <utility>

#include "autograd/grad_mode.h"
#include "core/memory_overlap.h"
#include "kiln/ops/op.h"
#include "ops/op_utils.h"
#include "ops/schema.h"

namespace kiln {

// ---- Attrs ----
Attrs::Attrs(std::initializer_list<AttrValue> values) {
  for (const auto& v : values) push_back(v);
}

void Attrs::throw_too_many() {
  throw Error(detail::concat("internal error: an op has more than ", kMax, " attributes"));
}

bool operator==(const Attrs& a, const Attrs& b) {
  if (a.size_ != b.size_) return false;
  for (size_t i = 0; i < a.size_; ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

std::ostream& operator<<(std::ostream& os, const AttrValue& v) {
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          os << "None";
        } else if constexpr (std::is_same_v<X, bool>) {
          os << (x ? "True" : "False");
        } else if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
          os << IntList(x);
        } else if constexpr (std::is_same_v<X, std::string>) {
          os << '"' << x << '"';
        } else {
          os << x;
        }
      },
      v);
  return os;
}

// ---- TensorMeta ----
TensorMeta TensorMeta::contiguous(DType dtype, Shape sizes) {
  Shape strides = contiguous_strides(sizes);
  return {dtype, std::move(sizes), std::move(strides), 0, false};
}

TensorMeta TensorMeta::of(const Tensor& t) {
  return {t.dtype(), t.sizes(), t.strides(), t.storage_offset(), t.requires_grad()};
}

// ---- registry ----
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}
thread_local DispatchInterceptor* tls_interceptor = nullptr;
}  // namespace

const OpDef& register_op(OpDef def) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string name(def.name);
  KILN_CHECK(!r.ops.count(name), Error, "register_op: an op named '", name, "' already exists");
  const bool random = def.kind == OpKind::Random;
  KILN_CHECK(random == (def.philox_attrs[0] >= 0 && def.philox_attrs[1] >= 0), Error,
             "register_op: '", name, "': ",
             random ? "a Random op must state the positions of its Philox seed and offset "
                      "(philox_attrs)"
                    : "only Random ops have Philox attributes");
  KILN_CHECK(def.pointwise.functor.empty() || def.kind == OpKind::Pointwise, Error,
             "register_op: '", name, "': only Pointwise ops have a pointwise body");
  // The schema names the attributes; an op may repeat them only to name ones an open schema
  // (`...`) leaves unnamed.
  if (!def.schema.empty()) {
    std::vector<std::string_view> names = schema_attr_names(def.name, def.schema);
    KILN_CHECK(def.attr_names.size() <= names.size() || def.schema.find("...") != def.schema.npos,
               Error, "register_op: '", name, "' names more attributes than its schema has");
    for (size_t k = 0; k < names.size(); ++k)
      KILN_CHECK(k >= def.attr_names.size() || def.attr_names[k] == names[k], Error,
                 "register_op: '", name, "' names attribute ", k, " '", def.attr_names[k],
                 "' but its schema calls it '", names[k], "'");
    if (def.attr_names.size() < names.size()) def.attr_names = std::move(names);
  }
  if (random) {
    const auto named = [&](int8_t k, std::string_view want) {
      return static_cast<size_t>(k) < def.attr_names.size() && def.attr_names[k] == want;
    };
    KILN_CHECK(named(def.philox_attrs[0], "seed") && named(def.philox_attrs[1], "offset"), Error,
               "register_op: '", name,
               "': philox_attrs must point at attributes named seed and "
               "offset");
  }
  auto owned = std::make_unique<OpDef>(std::move(def));
  const OpDef& ref = *owned;
  r.ops.emplace(std::move(name), std::move(owned));
  return ref;
}

const OpDef* find_op(std::string_view name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

std::vector<const OpDef*> all_ops() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const OpDef*> out;
  for (auto& [name, def] : r.ops) out.push_back(def.get());
  return out;
}

DispatchInterceptor* current_interceptor() { return tls_interceptor; }
DispatchInterceptor* set_interceptor(DispatchInterceptor* interceptor) {
  return std::exchange(tls_interceptor, interceptor);
}

// ---- dispatch ----
void check_destination(const OpDef& op, const TensorMeta& result, const Tensor& dst) {
  KILN_CHECK(dst.sizes() == result.sizes, ShapeError, op.name, ": the result has shape ",
             IntList(result.sizes), " but the output tensor has shape ", dst.shape_str(),
             " (an in-place op cannot change its tensor's shape)");
  KILN_CHECK(can_cast(result.dtype, dst.dtype()), DTypeError, op.name, ": result type ",
             result.dtype, " can't be cast to the desired output type ", dst.dtype());
  if (dst.is_contiguous()) return;
  const Overlap overlap = internal_overlap(dst.sizes(), dst.strides());
  KILN_CHECK(overlap != Overlap::kExpanded, ValueError, op.name,
             ": cannot write in place into a tensor with expanded (stride 0) dims (shape ",
             dst.shape_str(), ", strides ", IntList(dst.strides()), "); call .clone() on it first");
  // (PyTorch lets this one through, with results that depend on the order of the writes.)
  KILN_CHECK(overlap == Overlap::kNone, ValueError, op.name,
             ": cannot write in place into a tensor whose elements overlap (shape ",
             dst.shape_str(), ", strides ", IntList(dst.strides()),
             ": two indices address one element, as in overlapping as_strided windows); call "
             ".clone() on it first");
}

void run_kernel_fresh(const OpCall& call, std::span<const TensorMeta> metas,
                      std::span<Tensor> outputs) {
  for (size_t i = 0; i < metas.size(); ++i)
    outputs[i] = make_tensor(metas[i].sizes, metas[i].dtype);
  call.op.kernel(call, outputs.first(metas.size()));
  if (autograd::inference_mode()) [[unlikely]]
    for (size_t i = 0; i < metas.size(); ++i) outputs[i].impl()->set_inference(true);
}

namespace {

// Byte range [lo, hi) that a tensor's elements span in its storage.
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t extent = (t.size(d) - 1) * t.stride(d);
    (extent < 0 ? lo : hi) += extent;
  }
  return {lo * t.element_size(), (hi + 1) * t.element_size()};
}

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// Whether `input` may be read while the kernel writes `out` directly.
bool safe_to_alias(const OpDef& op, const Tensor& input, const Tensor& out) {
  if (input.numel() == 0 || out.numel() == 0) return true;
  if (input.impl()->storage() != out.impl()->storage()) return true;
  if (op.kind == OpKind::Pointwise && same_layout(input, out)) return true;
  auto [alo, ahi] = byte_span(input);
  auto [blo, bhi] = byte_span(out);
  return ahi <= blo || bhi <= alo;
}

int run_into(const OpDef& op, const OpCall& call, std::span<TensorMeta, kMaxOpOutputs> metas, int n,
             std::span<Tensor, kMaxOpOutputs> outputs) {
  for (int i = 0; i < n; ++i) {
    Tensor& out = outputs[static_cast<size_t>(i)];
    KILN_CHECK(out.defined(), Error, op.name, ": output ", i, " was not provided");
    check_destination(op, metas[i], out);
  }
  bool direct = true;
  for (int i = 0; i < n; ++i) {
    const Tensor& out = outputs[static_cast<size_t>(i)];
    // Only pointwise kernels write through arbitrary strides; the rest write contiguously.
    direct = direct && out.dtype() == metas[i].dtype &&
             (op.kind == OpKind::Pointwise || out.is_contiguous());
    for (const Tensor& in : call.inputs) direct = direct && safe_to_alias(op, in, out);
  }
  if (direct) {
    op.kernel(call, outputs.first(static_cast<size_t>(n)));
  } else {
    std::array<Tensor, kMaxOpOutputs> tmp;
    for (int i = 0; i < n; ++i) tmp[i] = make_tensor(metas[i].sizes, metas[i].dtype);
    op.kernel(call, std::span<Tensor>(tmp.data(), static_cast<size_t>(n)));
    for (int i = 0; i < n; ++i) ops::convert_into(outputs[static_cast<size_t>(i)], tmp[i]);
  }
  for (int i = 0; i < n; ++i) outputs[static_cast<size_t>(i)].impl()->storage()->bump_version();
  return n;
}

int run_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
           std::span<Tensor, kMaxOpOutputs> outputs);

}  // namespace

// The layers an op call passes through, outermost first:
//   1. capture, when the compiled function's backend does AOT autograd: the tracer records the
//      op and gives its outputs the captured graph's one autograd node (records_autograd());
//   2. autograd: an OpNode per call (dispatch_and_record);
//   3. capture for the other backends (run_op's interceptor), below autograd so that a
//      backward() inside a compiled function is captured with the forward;
//   4. the kernel.
// An op the layer-1 tracer hands back (it reached a sync point instead) runs eagerly through
// layers 2 and 4.
int dispatch(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
             std::span<Tensor, kMaxOpOutputs> outputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].defined(), Error, op.name, ": input ", i, " is an undefined tensor");
  if (DispatchInterceptor* ic = tls_interceptor; ic && ic->records_autograd()) [[unlikely]] {
    int n = 0;
    if (ic->intercept(op, inputs, attrs, outputs, n)) return n;
    InterceptorScope eager(nullptr);
    if (autograd::needs_recording(inputs, outputs[0]))
      return autograd::dispatch_and_record(op, inputs, attrs, outputs);
    return dispatch_no_autograd(op, inputs, attrs, outputs);
  }
  if (autograd::needs_recording(inputs, outputs[0]))
    return autograd::dispatch_and_record(op, inputs, attrs, outputs);
  return dispatch_no_autograd(op, inputs, attrs, outputs);
}

int dispatch_no_autograd(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                         std::span<Tensor, kMaxOpOutputs> outputs) {
  for (size_t i = 0; i < outputs.size() && outputs[i].defined(); ++i)
    autograd::check_inplace_target(op, outputs[i]);
  const int n = run_op(op, inputs, attrs, outputs);
  if (autograd::inference_mode()) [[unlikely]]
    for (int i = 0; i < n; ++i) outputs[static_cast<size_t>(i)].impl()->set_inference(true);
  return n;
}

namespace {
int run_op(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
           std::span<Tensor, kMaxOpOutputs> outputs) {
  if (DispatchInterceptor* ic = tls_interceptor) [[unlikely]] {
    int n = 0;
    if (ic->intercept(op, inputs, attrs, outputs, n)) return n;
  }
  OpCall call{op, inputs, attrs};
  if (op.kind == OpKind::View) {
    KILN_CHECK(!outputs[0].defined(), Error, op.name, ": a view op has no in-place form");
    outputs[0] = op.view(call);
    outputs[0].impl()->set_view_of(inputs[0].impl_ptr());
    return 1;
  }
  if (op.kind == OpKind::DataDependent || op.kind == OpKind::Opaque) {
    KILN_CHECK(!outputs[0].defined(), Error, op.name, ": has no in-place or out= form");
    // DataDependent: meta validates, the kernel fills in the sizes. Opaque: meta would have to
    // trace the user's function; the kernel reports how many outputs it made.
    std::array<TensorMeta, kMaxOpOutputs> metas;
    int n = op.kind == OpKind::Opaque ? kMaxOpOutputs : op.meta(call, metas);
    op.kernel(call, outputs.first(static_cast<size_t>(n)));
    if (op.kind == OpKind::Opaque)
      while (n > 0 && !outputs[static_cast<size_t>(n - 1)].defined()) --n;
    return n;
  }
  std::array<TensorMeta, kMaxOpOutputs> metas;
  const int n = op.meta(call, metas);
  if (outputs[0].defined()) return run_into(op, call, metas, n, outputs);
  run_kernel_fresh(call, std::span(metas).first(static_cast<size_t>(n)), outputs);
  return n;
}
}  // namespace

Tensor dispatch1(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  std::array<Tensor, kMaxOpOutputs> outs;
  dispatch(op, inputs, attrs, outs);
  return std::move(outs[0]);
}

Tensor& dispatch_into(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                      Tensor& out) {
  KILN_CHECK(out.defined(), Error, op.name, ": the output tensor is undefined");
  std::array<Tensor, kMaxOpOutputs> outs;
  outs[0] = out;
  dispatch(op, inputs, attrs, outs);
  return out;
}

}  // namespace kiln
