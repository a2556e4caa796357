// Tensor: a strided view (sizes, strides, offset, dtype) over shared Storage. Its metadata is
// always available; its data is reached only through data(), so that a tensor can later be
// *pending* (a node in a captured graph, with no storage yet) without any caller noticing.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/core/checked_math.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/scalar.h"
#include "kiln/core/small_vector.h"
#include "kiln/core/storage.h"

namespace kiln {

class Tensor;
struct AutogradMeta;  // owned by the autograd layer
// A value that will exist once a captured graph runs; the capture layer implements it.
struct PendingValue {
  virtual ~PendingValue() = default;
  // Runs what is needed so that `self` has storage (a sync point): `why` names the reason and
  // `where` the user's line when known (null: found from the call stack).
  virtual void materialize(class TensorImpl& self, const char* why,
                           const std::source_location* where) = 0;
  // Makes `alias`, a new tensor over the memory of `self` (a view, detach()), pending on it too.
  virtual void share_with(const class TensorImpl& self,
                          const std::shared_ptr<class TensorImpl>& alias) = 0;
  // Identifies the memory the tensor will live in: equal for tensors that alias.
  virtual const void* memory_id() const = 0;
  // The memory's version counter (bumped by each in-place write), as Storage::version().
  virtual uint64_t version() const = 0;
  // How many elements the memory will hold (bounds for views made before it exists).
  virtual int64_t capacity() const = 0;
  // True when no tensor but the holders of this PendingValue can see its memory (every view
  // or detach() holds the value whose memory it shares).
  virtual bool memory_is_private() const { return false; }
};

// Concrete memory with writes recorded but not run yet (graph capture's in-place writes into
// concrete tensors). The layer that records them installs one per thread while it has any;
// data() asks it about a tensor's storage only then. Other threads never see it: they read the
// memory as it is, as if just before those writes.
struct PendingWrites {
  virtual ~PendingWrites() = default;
  // What to run before `storage` may be read on this thread, or null if nothing is pending.
  virtual PendingValue* writer_of(const Storage& storage) = 0;
};
namespace detail {
// This thread's PendingWrites (null: none; the common case costs data() one load).
extern thread_local constinit PendingWrites* tls_pending_writes [[gnu::tls_model("initial-exec")]];
}  // namespace detail

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes, Shape strides,
             DType dtype);
  // A contiguous tensor without storage yet, of sizes already checked and counted (a captured
  // graph's value: its op's shape inference checked them): sizes and strides are copied once
  // and not checked again, which was a tenth of a re-captured call of W6's 100 small ops.
  struct Contiguous {
    const Shape& sizes;
    const Shape& strides;
    int64_t numel;
  };
  TensorImpl(const Contiguous& value, DType dtype);

  DType dtype() const { return dtype_; }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return sizes_.ssize(); }
  int64_t numel() const { return numel_; }
  int64_t storage_offset() const { return offset_; }
  bool is_contiguous() const { return contiguous_; }

  // The only way to reach the elements: materialises a pending tensor first.
  void* data() {
    if (pending_ || detail::tls_pending_writes) [[unlikely]]
      materialize();
    return static_cast<char*>(storage_->data()) + offset_ * itemsize(dtype_);
  }
  // Storage (null while pending).
  const std::shared_ptr<Storage>& storage() {
    if (pending_ || detail::tls_pending_writes) [[unlikely]]
      materialize();
    return storage_;
  }
  bool has_storage() const { return storage_ != nullptr; }
  // Storage without materialising (null while pending).
  const std::shared_ptr<Storage>& storage_if_concrete() const { return storage_; }
  // Equal for tensors over the same memory, pending or not.
  const void* memory_id() const {
    return pending_ ? pending_->memory_id() : static_cast<const void*>(storage_.get());
  }

  bool is_pending() const { return pending_ != nullptr; }
  // Makes a pending tensor concrete, naming why (a sync point under capture).
  void sync(const char* why, const std::source_location* where = nullptr) {
    if (pending_) [[unlikely]] {
      auto p = pending_;  // keep alive while it runs
      p->materialize(*this, why, where);
    } else if (PendingValue* w = pending_writer()) [[unlikely]] {
      w->materialize(*this, why, where);
    }
  }
  const std::shared_ptr<PendingValue>& pending() const { return pending_; }
  // What must run before this tensor's storage may be read on this thread (PendingWrites).
  PendingValue* pending_writer() const {
    PendingWrites* w = detail::tls_pending_writes;
    return w && storage_ ? w->writer_of(*storage_) : nullptr;
  }
  void set_pending(std::shared_ptr<PendingValue> p) { pending_ = std::move(p); }
  // Gives a pending tensor its storage (called by the capture layer once the graph has run).
  void set_storage(std::shared_ptr<Storage> storage, int64_t offset);

  bool requires_grad() const { return requires_grad_; }
  void set_requires_grad(bool r) { requires_grad_ = r; }
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> m) { autograd_ = std::move(m); }

  // A tensor made from a C++ number (`x * 2`): it takes part in type promotion only by
  // category, as in PyTorch (int32 tensor * 2 stays int32; float32 tensor * 2.5 stays float32).
  bool is_wrapped_number() const { return wrapped_number_; }
  void set_wrapped_number(bool w) { wrapped_number_ = w; }

  // Made by a view op: shares storage with the tensor it was viewed from.
  bool is_view() const { return view_; }
  // A view's base: the first tensor of the chain of views it came from, which is not a view
  // itself (autograd rebases its history when the view is written in place). Null otherwise.
  const std::shared_ptr<TensorImpl>& view_base() const { return view_base_; }
  // Marks this tensor a view of `of` (its base becomes of's base, or `of`).
  void set_view_of(const std::shared_ptr<TensorImpl>& of) {
    view_ = true;
    view_base_ = of->view_base_ ? of->view_base_ : of;
    view_history_version_ = of->version();
  }
  // A view's memory version when its autograd history was last set: autograd makes the view's
  // history anew from its base's when the memory has been written since (PyTorch's view
  // regeneration after an in-place change of the base or of another view).
  uint64_t view_history_version() const { return view_history_version_; }
  void set_view_history_version(uint64_t v) { view_history_version_ = v; }
  // Made under InferenceMode: may never be saved for backward.
  bool is_inference() const { return inference_; }
  void set_inference(bool v) { inference_ = v; }
  // Version of the memory's contents (bumped by every in-place write), pending or not.
  uint64_t version() const {
    return pending_ ? pending_->version() : storage_ ? storage_->version() : 0;
  }

  // Replaces sizes/strides (views made in place, e.g. squeeze_); recomputes cached facts.
  void set_sizes_strides(Shape sizes, Shape strides);
  // Makes this (concrete) tensor hold `source`'s memory, layout and dtype, in place, so every
  // handle to it sees the change (PyTorch's `param.data = source`, what Module::to uses). Its
  // gradient and hooks, made for the old data, are dropped; requires_grad stays; its version
  // moves on (a graph that saved it fails at backward as after an in-place write). Views taken
  // of it before keep the old memory. kiln::Error when either tensor is pending or `source` is
  // a view.
  void set_data(const TensorImpl& source);

 private:
  void materialize();
  void refresh();

  std::shared_ptr<Storage> storage_;
  std::shared_ptr<PendingValue> pending_;
  std::shared_ptr<AutogradMeta> autograd_;
  std::shared_ptr<TensorImpl> view_base_;
  uint64_t view_history_version_ = 0;
  int64_t offset_;
  Shape sizes_;
  Shape strides_;
  int64_t numel_ = 1;
  DType dtype_;
  bool contiguous_ = true;
  bool requires_grad_ = false;
  bool wrapped_number_ = false;
  bool view_ = false;
  bool inference_ = false;
};

using TensorHook = std::function<Tensor(const Tensor& grad)>;
class Node;

// Contiguous (row-major) strides for `sizes`; ValueError naming `op` when one overflows int64
// (possible only with a zero-size dim, since numel bounds them otherwise).
Shape contiguous_strides(IntList sizes, const char* op = "contiguous_strides");
// Product of sizes; throws ValueError naming `op` on a negative size or overflow.
int64_t checked_numel(IntList sizes, const char* op);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

namespace detail {
// Throws Error("Tensor::<member>() called on an undefined tensor"); out of line and cold so that
// the check in each member costs one predictable branch.
[[noreturn, gnu::cold, gnu::noinline]] void throw_undefined_tensor(const char* member);
}  // namespace detail

// A handle to a TensorImpl. Copying a Tensor shares it (as in PyTorch): use clone() for a copy.
// A default-constructed Tensor is *undefined*: defined() answers false, and every other member
// (metadata, data, views, ops, autograd) throws kiln::Error naming the member. Only the handle
// accessors impl()/impl_ptr()/is_same() answer (null / handle identity) for low-level code.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // True when both handles name the same TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata (never touches data) ----
  DType dtype() const { return checked("dtype").dtype(); }
  const Shape& sizes() const { return checked("sizes").sizes(); }
  const Shape& shape() const { return checked("shape").sizes(); }
  const Shape& strides() const { return checked("strides").strides(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return checked("dim").dim(); }
  int64_t ndim() const { return checked("ndim").dim(); }
  int64_t numel() const { return checked("numel").numel(); }
  int64_t storage_offset() const { return checked("storage_offset").storage_offset(); }
  int64_t element_size() const { return itemsize(checked("element_size").dtype()); }
  bool is_contiguous() const { return checked("is_contiguous").is_contiguous(); }
  bool is_floating_point() const { return is_floating(checked("is_floating_point").dtype()); }
  bool requires_grad() const { return checked("requires_grad").requires_grad(); }
  // Marks a leaf tensor as requiring grad (floating dtypes only). Returns *this.
  // In-place methods are const, as LibTorch's: a Tensor is a handle, and they change the tensor
  // it names, not the handle. They return a reference to this handle (as LibTorch 1.x's
  // `Tensor& add_(...) const`), so both `Tensor& r = x.add_(y)` and calls through a
  // `const Tensor&` compile.
  Tensor& requires_grad_(bool requires_grad = true) const;

  // ---- autograd (src/autograd; the guide is docs/autograd.md) ----
  // The accumulated gradient of a leaf (undefined until a backward pass reaches it).
  const Tensor& grad() const;
  // Replaces the accumulated gradient (undefined clears it).
  void set_grad(const Tensor& grad);
  // The node that made this tensor (null for leaves and tensors that don't require grad).
  const std::shared_ptr<Node>& grad_fn() const;
  // A leaf: made by the user rather than by an op recorded for autograd.
  bool is_leaf() const;
  // Which output of grad_fn this tensor is.
  uint32_t output_nr() const;
  // Computes the gradients of this tensor w.r.t. the leaves of its graph and accumulates them
  // into their grad(). `gradient` may be omitted only for one-element tensors.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = {},
                bool create_graph = false) const;
  // Calls `hook` with this tensor's gradient whenever one is computed; a defined return value
  // replaces the gradient. Returns a handle for remove_hook.
  size_t register_hook(TensorHook hook) const;
  void remove_hook(size_t handle) const;
  // Calls `hook` with this leaf once a backward pass has accumulated a gradient into its grad()
  // (torch's register_post_accumulate_grad_hook: data-parallel training starts a gradient's
  // allreduce here). Returns a handle for remove_hook.
  size_t register_post_accumulate_grad_hook(std::function<void(const Tensor& leaf)> hook) const;
  // Makes a non-leaf keep its grad() after backward, as leaves do.
  void retain_grad() const;
  bool retains_grad() const;
  // Version counter of the underlying storage: bumped by every in-place change.
  uint64_t version() const { return checked("version").version(); }
  std::string shape_str() const;  // "[2, 3]"

  // ---- data ----
  void* data_ptr() const { return checked("data_ptr").data(); }
  // Typed pointer to the first element; throws DTypeError if T does not match dtype().
  template <typename T>
  T* data_ptr() const {
    check_dtype(dtype_v<T>, "data_ptr");
    return static_cast<T*>(checked("data_ptr").data());
  }
  // The value of a one-element tensor, converted to T.
  template <typename T>
  T item(std::source_location loc = std::source_location::current()) const;
  Scalar item_scalar(std::source_location loc = std::source_location::current()) const;
  // The elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  // bool(t): the truth of a one-element tensor (PyTorch's `if t:`); a sync point under capture.
  explicit operator bool() const;

  // ---- views (never copy) ----
  Tensor view(IntList sizes) const;
  Tensor reshape(IntList sizes) const;  // a view when possible, else a copy
  Tensor permute(IntList dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;   // transpose of a matrix (<= 2-d)
  Tensor mT() const;  // transpose of the last two dims
  Tensor expand(IntList sizes) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntList sizes) const;
  Tensor as_strided(IntList sizes, IntList strides, std::optional<int64_t> offset = {}) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor contiguous() const;  // *this if already contiguous, else a contiguous copy

  // ---- copies and conversion ----
  Tensor clone() const;
  Tensor to(DType dtype) const;  // *this when dtype already matches
  Tensor detach() const;         // shares storage, no autograd history
  Tensor& copy_(const Tensor& src) const;
  Tensor& fill_(const Scalar& value) const;
  Tensor& zero_() const;

  // ---- common ops as methods (the functional forms in kiln/ops/ are the full set) ----
  Tensor add(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor sub(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  Tensor pow(const Scalar& exponent) const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor sum() const;
  Tensor sum(IntList dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntList dims, bool keepdim = false) const;
  Tensor amax(IntList dims = {}, bool keepdim = false) const;
  Tensor amin(IntList dims = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = {}, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  Tensor& add_(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor& add_(const Scalar& other) const;
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor& mul_(const Tensor& other) const;
  Tensor& mul_(const Scalar& other) const;
  Tensor& div_(const Tensor& other) const;
  Tensor& div_(const Scalar& other) const;
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max) const;

  void check_dtype(DType expected, const char* what) const;

 private:
  // This handle, for the const in-place methods (which change the tensor, not the handle).
  Tensor& mutable_self() const { return const_cast<Tensor&>(*this); }
  // The impl, or a throw naming `member` when the tensor is undefined.
  TensorImpl& checked(const char* member) const {
    if (!impl_) [[unlikely]]
      detail::throw_undefined_tensor(member);
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

// Printing options, as torch.set_printoptions.
struct PrintOptions {
  int precision = 4;
  int64_t threshold = 1000;  // more elements than this are summarised with "..."
  int64_t edgeitems = 3;     // items shown at each end of a summarised dim
  int linewidth = 80;
};
void set_printoptions(const PrintOptions& options);
PrintOptions get_printoptions();

// A new tensor of the given metadata with freshly allocated, uninitialised contiguous storage.
Tensor make_tensor(IntList sizes, DType dtype);

}  // namespace kiln
