// The op layer: each op is one OpDef holding all its facets (schema, meta = shape/dtype
// inference, eager kernel, and slots for its derivative and decomposition), and every op call
// from the public API goes through dispatch(), which routes it to the eager kernel or to an
// interceptor (graph capture, later batching). Eager mode, autograd, capture and the backends
// all read the same OpDef.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// A non-tensor argument of an op: baked into a captured graph as a constant.
// monostate means "not given" (an optional argument left out).
using AttrValue = std::variant<std::monostate, int64_t, double, bool, DType, Scalar,
                               std::vector<int64_t>, std::string>;

// The attributes of one op call, positional (their names are in OpDef::attr_names). Built for
// every op call: only the attributes given are constructed (most ops have none or one), not a
// full array of kMax variants to clear and destroy.
class Attrs {
 public:
  static constexpr size_t kMax = 8;
  Attrs() noexcept {}  // user-provided: storage_ stays uninitialised (a const Attrs is fine)
  Attrs(std::initializer_list<AttrValue> values);
  Attrs(const Attrs& other) {
    for (size_t k = 0; k < other.size_; ++k) push_back(other[k]);
  }
  Attrs(Attrs&& other) noexcept {
    for (size_t k = 0; k < other.size_; ++k) push_back(std::move(other.slot(k)));
  }
  Attrs& operator=(const Attrs& other) {
    if (this != &other) {
      clear();
      for (size_t k = 0; k < other.size_; ++k) push_back(other[k]);
    }
    return *this;
  }
  Attrs& operator=(Attrs&& other) noexcept {
    if (this != &other) {
      clear();
      for (size_t k = 0; k < other.size_; ++k) push_back(std::move(other.slot(k)));
    }
    return *this;
  }
  ~Attrs() { clear(); }

  size_t size() const { return size_; }
  const AttrValue& operator[](size_t i) const {
    return *std::launder(reinterpret_cast<const AttrValue*>(storage_) + i);
  }
  void push_back(AttrValue v) {
    if (size_ == kMax) [[unlikely]]
      throw_too_many();
    ::new (static_cast<void*>(storage_ + size_ * sizeof(AttrValue))) AttrValue(std::move(v));
    ++size_;
  }

  int64_t i(size_t k) const { return std::get<int64_t>((*this)[k]); }
  double f(size_t k) const { return std::get<double>((*this)[k]); }
  bool b(size_t k) const { return std::get<bool>((*this)[k]); }
  DType dtype(size_t k) const { return std::get<DType>((*this)[k]); }
  const Scalar& scalar(size_t k) const { return std::get<Scalar>((*this)[k]); }
  const std::vector<int64_t>& ints(size_t k) const {
    return std::get<std::vector<int64_t>>((*this)[k]);
  }
  const std::string& str(size_t k) const { return std::get<std::string>((*this)[k]); }
  bool has(size_t k) const {
    return k < size_ && !std::holds_alternative<std::monostate>((*this)[k]);
  }

  friend bool operator==(const Attrs& a, const Attrs& b);

 private:
  AttrValue& slot(size_t k) { return *std::launder(reinterpret_cast<AttrValue*>(storage_) + k); }
  void clear() {
    while (size_ > 0) slot(--size_).~AttrValue();
  }
  [[noreturn, gnu::cold]] static void throw_too_many();

  alignas(AttrValue) std::byte storage_[kMax * sizeof(AttrValue)];
  size_t size_ = 0;
};
std::ostream& operator<<(std::ostream& os, const AttrValue& v);

// A tensor's metadata without its data: dtype, shape, layout, and whether it requires grad.
// One type for every layer that reasons about tensors it does not hold: an op's meta function
// fills one per output (contiguous, so it only states dtype and sizes), autograd keeps one per
// input and output of a node, and a graph records one per value, layout complete (what guards
// compare for an input).
struct TensorMeta {
  DType dtype = DType::Float32;
  Shape sizes;
  Shape strides;
  int64_t storage_offset = 0;
  bool requires_grad = false;

  TensorMeta() = default;
  // Dtype and sizes only, strides left empty: what a meta function states of an output (always
  // contiguous) and what autograd keeps. Eager dispatch needs no more, so it pays for no more.
  TensorMeta(DType dtype, Shape sizes) : dtype(dtype), sizes(std::move(sizes)) {}
  // A contiguous tensor of this dtype and shape, strides filled in: a graph value.
  static TensorMeta contiguous(DType dtype, Shape sizes);
  TensorMeta(DType dtype, Shape sizes, Shape strides, int64_t storage_offset, bool requires_grad)
      : dtype(dtype),
        sizes(std::move(sizes)),
        strides(std::move(strides)),
        storage_offset(storage_offset),
        requires_grad(requires_grad) {}
  // `t`'s metadata (no data is read: works on pending tensors).
  static TensorMeta of(const Tensor& t);
  friend bool operator==(const TensorMeta&, const TensorMeta&) = default;
};
inline constexpr int kMaxOpOutputs = 4;

// What kind of computation an op is: the optimizing backend fuses by kind.
enum class OpKind : uint8_t {
  Pointwise,      // each output element from the same-index input elements (after broadcasting)
  Reduction,      // reduces some dims
  View,           // output shares input storage (no kernel; `view` builds it)
  Factory,        // no tensor inputs
  Random,         // draws from the Philox generator (seed/offset in its attrs)
  Layout,         // each output element is an input element or a constant, found by index
                  // arithmetic (cat, pad, flip, roll, repeat, tril/triu, as_strided_scatter)
  Indexing,       // reads or writes at positions an index tensor holds (gather, embedding,
                  // index_select, scatter, index_add, one_hot)
  Composite,      // defined by a formula over other ops, per row (softmax, log_softmax,
                  // layer_norm, rms_norm): backends compute it whole or through that formula
  Extern,         // library-grade kernel (matmul, sort, topk, scans): only ever called
  DataDependent,  // output shape depends on input values (nonzero, masked_select): a sync point
  Opaque          // calls a user function (kiln::allow_in_graph); its kernel allocates outputs
};

struct OpDef;

// One call of an op: its definition, tensor inputs and attributes.
struct OpCall {
  const OpDef& op;
  std::span<const Tensor> inputs;
  const Attrs& attrs;
  const Tensor& in(size_t i) const { return inputs[i]; }
};

// What an op's derivative receives: the op's attributes, the inputs and outputs it asked to
// have saved, every input's metadata, and the gradient flowing into each output.
struct BackwardCall {
  const OpDef& op;
  const Attrs& attrs;
  std::span<const Tensor> inputs;          // saved inputs (undefined unless listed as saved)
  std::span<const Tensor> outputs;         // saved outputs (undefined unless listed as saved)
  std::span<const TensorMeta> input_meta;  // every input's dtype and shape
  std::span<const TensorMeta> output_meta;
  std::span<const Tensor> grads;  // gradient w.r.t. each output; undefined means zero
  uint32_t needs_input_grad;      // bit i set: the gradient of input i is wanted (inputs from
                                  // the 33rd on, as in a long cat, are always wanted)

  const Tensor& in(size_t i) const { return inputs[i]; }
  const Tensor& out(size_t i) const { return outputs[i]; }
  const Tensor& grad(size_t i = 0) const { return grads[i]; }
  bool needs_grad(size_t i) const { return i >= 32 || ((needs_input_grad >> i) & 1u); }
  // The gradient of output i, or zeros of its shape when none flowed into it.
  Tensor grad_or_zeros(size_t i) const;
};

// An op's derivative, written in Kiln ops so that autograd can differentiate it again
// (create_graph) and graph capture can trace it. `fn` fills grad_inputs[i] for each input i
// whose gradient is wanted (left undefined means zero). Autograd then casts each gradient to
// its input's dtype and sums it over broadcast dims down to the input's shape, so formulas
// may return gradients at the output's (broadcast) shape.
using DerivativeFn = void (*)(const BackwardCall& call, std::span<Tensor> grad_inputs);
struct Derivative {
  DerivativeFn fn = nullptr;   // null: no derivative (backward through it throws, naming the op)
  uint32_t saved_inputs = 0;   // bit i: the formula reads input i
  uint32_t saved_outputs = 0;  // bit i: the formula reads output i
};
// Bit masks for Derivative::saved_inputs / saved_outputs.
constexpr uint32_t save(std::initializer_list<int> indices) {
  uint32_t m = 0;
  for (int i : indices) m |= 1u << i;
  return m;
}

// Shape/dtype inference; runs on metadata only (never touches data) and validates arguments,
// throwing kiln::Error naming the op, shapes and dtypes. Returns the number of outputs.
using MetaFn = int (*)(const OpCall& call, std::span<TensorMeta, kMaxOpOutputs> out);
// Eager CPU kernel: computes into already allocated outputs, which never partially overlap
// the inputs (dispatch sees to that). For DataDependent and Opaque ops the kernel allocates
// outputs.
using KernelFn = void (*)(const OpCall& call, std::span<Tensor> outputs);
// View ops: builds the output view over the input's storage.
using ViewFn = Tensor (*)(const OpCall& call);
// The op written in more primitive Kiln ops, for the optimizing backend (applied by
// re-tracing): fills `results` with new tensors holding the op's outputs (for an in-place op,
// the values it writes). Null: the backend calls the kernel.
using DecompositionFn = void (*)(const OpCall& call, std::span<Tensor> results);
// Whether a call with these attributes has a decomposition (null: every call has).
using DecomposesFn = bool (*)(const Attrs& attrs);

// How a pointwise op's elements are computed, for code generation.
struct PointwiseBody {
  enum class Form : uint8_t {
    Vector,     // out = F<T>(x, ...) on vec::Vec<T>, every input cast to the output dtype T
    Predicate,  // bool out = F<T>(a, b, ...) on scalars of T, the inputs' promoted dtype
    Scalar,     // out = F<T>(a, b, ...) on scalars of the output dtype T
  };
  std::string_view functor;  // "kiln::ops::gelu_fn"; empty: not generated (runs as an extern call)
  Form form = Form::Vector;
};

struct OpDef {
  std::string_view name;
  // Human-readable schema, e.g. "add(Tensor self, Tensor other, Scalar alpha) -> Tensor".
  std::string_view schema;
  OpKind kind;
  // The attributes' names, for printing graphs ("dim=1"): register_op takes them from the schema
  // (an op whose schema ends in `...` may name the further ones here).
  std::vector<std::string_view> attr_names;
  MetaFn meta = nullptr;
  KernelFn kernel = nullptr;
  ViewFn view = nullptr;
  // The derivative written in Kiln ops (read by autograd; see Derivative).
  Derivative derivative{};
  DecompositionFn decomposition = nullptr;
  DecomposesFn decomposes = nullptr;
  // Whether `call` is decomposed: the op has a decomposition that covers its attributes.
  bool has_decomposition(const Attrs& attrs) const {
    return decomposition && (!decomposes || decomposes(attrs));
  }
  // Random ops: the positions in `attrs` of their Philox seed and offset. These change on every
  // call, so capture passes them to the compiled graph per run instead of guarding on them.
  // register_op checks that every Random op states them (and no other op does).
  std::array<int8_t, 2> philox_attrs = {-1, -1};
  // Pointwise ops: how generated code computes the op, with the functor template its eager
  // kernel uses (ops/kernels/pointwise_math.h), so compiled and eager results are bitwise equal.
  PointwiseBody pointwise{};
  // What the op computes, in a sentence: its Python docstring, under the schema.
  std::string_view doc;
  // Internal ops (the forms public functions are built from, derivatives' helpers, fused
  // updates) are reachable from Python only as kiln.ops.<name>; the others are also kiln.<name>
  // and, when the first parameter is `Tensor self`, a Tensor method (docs/python.md).
  bool internal = false;
};

// Registers an op under its name (done once, at static-initialisation time, by each op's
// definition file). Throws if the name is taken.
const OpDef& register_op(OpDef def);
// Looks an op up by name; nullptr if unknown.
const OpDef* find_op(std::string_view name);
// Every registered op, sorted by name.
std::vector<const OpDef*> all_ops();

// The rule for writing an op's result into a given tensor (in-place and out= forms), shared by
// eager dispatch, autograd and capture: the shapes must be equal, the result dtype castable to
// the destination's (no float → int, as PyTorch), and the destination must not have expanded
// (stride 0) dims. Throws a kiln::Error subclass naming the op.
void check_destination(const OpDef& op, const TensorMeta& result, const Tensor& dst);

// Allocates contiguous outputs from `metas` and runs the op's kernel into them: the path of an
// eager call once its metadata is known, shared with the graph interpreter (which knows the
// metadata from the graph). Marks the outputs as InferenceMode tensors when that mode is on.
void run_kernel_fresh(const OpCall& call, std::span<const TensorMeta> metas,
                      std::span<Tensor> outputs);

// Routes an op call. Fills outputs[0..n) and returns n. If outputs[0] is already defined, the
// result is written into it (in-place and out= forms): its shape must equal the result's, the
// result dtype must be castable to its dtype, and it must not be an expanded (self-overlapping)
// tensor. Inputs that overlap it are handled (a temporary is used when needed).
// When gradients are being recorded and an input requires grad, the call is recorded for
// autograd (see kiln/autograd/autograd.h).
int dispatch(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
             std::span<Tensor, kMaxOpOutputs> outputs);
// dispatch() without autograd recording: what autograd itself calls.
int dispatch_no_autograd(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                         std::span<Tensor, kMaxOpOutputs> outputs);
// Single-output convenience form.
Tensor dispatch1(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs);
// In-place / out= convenience form: writes into `out` and returns it.
Tensor& dispatch_into(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                      Tensor& out);

// A hook that later layers (graph capture, batching) install per thread to receive op calls
// instead of the eager kernels. intercept() returns false to let the call run eagerly.
class DispatchInterceptor {
 public:
  virtual ~DispatchInterceptor() = default;
  virtual bool intercept(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                         std::span<Tensor, kMaxOpOutputs> outputs, int& num_outputs) = 0;
  // Whether this interceptor sees each op before autograd and records gradients itself (AOT
  // autograd: one autograd node per captured graph); see dispatch's list of layers.
  virtual bool records_autograd() const { return false; }
};
DispatchInterceptor* current_interceptor();
// Installs `interceptor` for this thread; returns the previous one. Prefer InterceptorScope.
DispatchInterceptor* set_interceptor(DispatchInterceptor* interceptor);

// Installs an interceptor (null: none, the eager kernels) for a scope and restores the previous
// one when the scope ends, however it ends.
class InterceptorScope {
 public:
  explicit InterceptorScope(DispatchInterceptor* interceptor)
      : prev_(set_interceptor(interceptor)) {}
  ~InterceptorScope() { set_interceptor(prev_); }
  InterceptorScope(const InterceptorScope&) = delete;
  InterceptorScope& operator=(const InterceptorScope&) = delete;

 private:
  DispatchInterceptor* prev_;
};

}  // namespace kiln
