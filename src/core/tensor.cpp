#include "kiln/core/tensor.h"

#include <limits>
#include <ostream>
#include <sstream>

#include "kiln/core/allocator.h"

namespace kiln {

std::ostream& operator<<(std::ostream& os, IntList l) {
  os << "[";
  for (size_t i = 0; i < l.size(); ++i) os << (i ? ", " : "") << l[i];
  return os << "]";
}

namespace detail {
void throw_int64_overflow(const char* op, const char* what, int64_t a, char sym, int64_t b) {
  throw ValueError(concat(op, ": ", what, " overflows int64 (", a, " ", sym, " ", b, ")"));
}
}  // namespace detail

Shape contiguous_strides(IntList sizes, const char* op) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (int64_t i = sizes.ssize() - 1; i >= 0; --i) {
    strides[i] = s;
    // Only the last product can be unused: check it too, a stride past int64 is never valid.
    KILN_CHECK(!mul_overflows(s, std::max<int64_t>(sizes[i], 1), &s), ValueError, op,
               ": the strides of a contiguous tensor of shape ", sizes, " overflow int64");
  }
  return strides;
}

int64_t checked_numel(IntList sizes, const char* op) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, ValueError, op, ": sizes must be non-negative, got ", sizes);
    overflow = overflow || mul_overflows(n, s, &n);
  }
  // A zero size makes the product 0 however large the others are (as PyTorch).
  for (int64_t s : sizes)
    if (s == 0) return 0;
  KILN_CHECK(!overflow, ValueError, op, ": the number of elements of shape ", sizes,
             " overflows int64");
  return n;
}

namespace detail {
void throw_undefined_tensor(const char* member) {
  throw Error(concat("Tensor::", member, "() called on an undefined tensor"));
}
}  // namespace detail

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  KILN_CHECK(dim >= lo && dim <= hi, IndexError, op,
             ": dimension out of range (expected to be in [", lo, ", ", hi, "], but got ", dim,
             ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes, Shape strides,
                       DType dtype)
    : storage_(std::move(storage)),
      offset_(offset),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      dtype_(dtype) {
  refresh();
}

TensorImpl::TensorImpl(const Contiguous& value, DType dtype)
    : offset_(0),
      sizes_(value.sizes),
      strides_(value.strides),
      numel_(value.numel),
      dtype_(dtype),
      contiguous_(true) {}

void TensorImpl::refresh() {
  // Ops check their output sizes with their own names first; this is the backstop for any
  // other way to build a TensorImpl, so that numel() can never be a wrapped-around value.
  numel_ = checked_numel(sizes_, "Tensor");
  contiguous_ = true;
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      contiguous_ = false;
      break;
    }
    expected *= sizes_[i];
  }
  if (numel_ == 0) contiguous_ = true;
}

void TensorImpl::set_sizes_strides(Shape sizes, Shape strides) {
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  refresh();
}

void TensorImpl::set_data(const TensorImpl& source) {
  KILN_CHECK(!pending_ && !source.pending_ && source.storage_, Error,
             "set_data: both tensors must be concrete (not pending under kiln::compile)");
  KILN_CHECK(!source.view_, Error, "set_data: the source must not be a view");
  // The version moves past the old memory's: a graph that saved this tensor before now fails
  // its in-place check at backward instead of reading the new data.
  const uint64_t old_version = version();
  storage_ = source.storage_;
  storage_->set_version(std::max(old_version, storage_->version()) + 1);
  offset_ = source.offset_;
  sizes_ = source.sizes_;
  strides_ = source.strides_;
  dtype_ = source.dtype_;
  autograd_.reset();
  view_ = false;
  view_base_.reset();
  refresh();
}

void TensorImpl::set_storage(std::shared_ptr<Storage> storage, int64_t offset) {
  storage_ = std::move(storage);
  offset_ = offset;
  pending_.reset();
}

namespace detail {
thread_local constinit PendingWrites* tls_pending_writes [[gnu::tls_model("initial-exec")]] =
    nullptr;
}  // namespace detail

void TensorImpl::materialize() {
  sync("a tensor's data was read (data_ptr, printing, or an op run eagerly)");
  KILN_CHECK(storage_ && !pending_ && !pending_writer(), Error,
             "internal error: a pending tensor was not materialised");
}

Tensor make_tensor(IntList sizes, DType dtype) {
  int64_t n = checked_numel(sizes, "empty");
  int64_t nbytes;
  KILN_CHECK(!mul_overflows(n, itemsize(dtype), &nbytes), ValueError, "empty: ", n,
             " elements of dtype ", dtype, " (shape ", sizes,
             ") need more bytes than int64 can count");
  Shape strides = contiguous_strides(sizes, "empty");
  auto storage = Storage::allocate(static_cast<size_t>(nbytes));
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), 0, sizes.shape(),
                                             std::move(strides), dtype));
}

// A 0-d tensor has no size or stride to read (wrap_dim accepts dim 0 of it, as reductions do).
int64_t Tensor::size(int64_t d) const {
  checked("size");
  KILN_CHECK(dim() > 0, IndexError, "size: dimension specified as ", d,
             " but the tensor has no dimensions");
  return sizes()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  checked("stride");
  KILN_CHECK(dim() > 0, IndexError, "stride: dimension specified as ", d,
             " but the tensor has no dimensions");
  return strides()[wrap_dim(d, dim(), "stride")];
}

std::string Tensor::shape_str() const {
  checked("shape_str");
  std::ostringstream os;
  os << IntList(sizes());
  return os.str();
}

void Tensor::check_dtype(DType expected, const char* what) const {
  KILN_CHECK(checked(what).dtype() == expected, DTypeError, what, ": expected dtype ", expected,
             " but the tensor has dtype ", dtype());
}

Tensor& Tensor::requires_grad_(bool r) const {
  checked("requires_grad_");
  KILN_CHECK(!r || is_floating(dtype()), DTypeError,
             "requires_grad_: only floating point tensors can require gradients, got dtype ",
             dtype());
  // As in PyTorch: a non-leaf's flag follows its history (clearing it would silently cut the
  // graph there); detach() is the way to get a tensor without history.
  KILN_CHECK(r || is_leaf(), Error,
             "requires_grad_(false): only a leaf's requires_grad can be changed, but this tensor "
             "(shape ",
             shape_str(), ") has a grad_fn; use detach() for a tensor without history");
  impl_->set_requires_grad(r);
  return mutable_self();
}

namespace {
// Copies t's elements, in row-major order, into out as T: one dtype dispatch for the whole
// tensor, the innermost dim walked with its stride, the outer dims as an odometer (tests compare
// every compiled result through this; a dispatch per element made it a third of their time
// under the sanitizers).
template <typename T>
void gather_elements(const Tensor& t, std::vector<T>& out) {
  out.resize(static_cast<size_t>(t.numel()));
  if (t.numel() == 0) return;
  const int64_t nd = t.dim();
  const auto& sizes = t.sizes();
  const auto& strides = t.strides();
  const int64_t inner = nd > 0 ? sizes[static_cast<size_t>(nd - 1)] : 1;
  const int64_t inner_stride = nd > 0 ? strides[static_cast<size_t>(nd - 1)] : 0;
  KILN_DTYPE_SWITCH_ALL(t.dtype(), "to_vector", [&]<typename S>() {
    const S* base = static_cast<const S*>(t.data_ptr());
    Shape idx(static_cast<size_t>(nd), 0);
    int64_t offset = 0;  // of the current run's first element, in elements
    size_t at = 0;       // (an index: out may be a std::vector<bool>)
    for (int64_t done = 0; done < t.numel(); done += inner) {
      const S* src = base + offset;
      for (int64_t j = 0; j < inner; ++j) out[at++] = static_cast<T>(src[j * inner_stride]);
      for (int64_t d = nd - 2; d >= 0; --d) {
        const auto du = static_cast<size_t>(d);
        offset += strides[du];
        if (++idx[du] < sizes[du]) break;
        offset -= sizes[du] * strides[du];
        idx[du] = 0;
      }
    }
  });
}
}  // namespace

template <typename T>
std::vector<T> Tensor::to_vector() const {
  checked("to_vector");
  impl_->sync("to_vector() reads the tensor's values");
  std::vector<T> out;
  gather_elements(*this, out);
  return out;
}

template <typename T>
T Tensor::item(std::source_location loc) const {
  checked("item");
  KILN_CHECK(numel() == 1, ValueError, "item: a tensor with ", numel(),
             " elements cannot be converted to a scalar (shape ", shape_str(), ") at ",
             loc.file_name(), ":", loc.line());
  impl_->sync("item() reads the tensor's value", &loc);
  T value{};
  KILN_DTYPE_SWITCH_ALL(dtype(), "item", [&]<typename S>() {
    value = static_cast<T>(*static_cast<const S*>(data_ptr()));
  });
  return value;
}

Scalar Tensor::item_scalar(std::source_location loc) const {
  checked("item_scalar");
  if (is_floating(dtype())) return Scalar(item<double>(loc));
  if (dtype() == DType::Bool) return Scalar(item<bool>(loc));
  return Scalar(item<int64_t>(loc));
}

Tensor::operator bool() const {
  checked("operator bool");
  KILN_CHECK(numel() == 1, ValueError, "bool(Tensor): the truth value of a tensor with ", numel(),
             " elements is ambiguous (shape ", shape_str(), "); use any() or all()");
  impl_->sync("bool(Tensor): a tensor's value decides a branch");
  return item<double>() != 0.0;
}

#define KILN_INSTANTIATE(T)                             \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>(std::source_location) const;
KILN_INSTANTIATE(bool)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
#undef KILN_INSTANTIATE

}  // namespace kiln
