// NumPy and DLPack without copies: kiln.from_numpy / from_dlpack share the array's memory (the
// tensor keeps the array alive), and Tensor.numpy(), np.asarray(t) and __dlpack__ share the
// tensor's (the array keeps the tensor's storage alive). Writes through either side are seen by
// the other, as with torch.from_numpy.
#include <nanobind/ndarray.h>

#include "bindings.h"

namespace kiln::python {

namespace {

DType dtype_from(nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1) {
    if (code == Code::Bool && dt.bits == 8) return DType::Bool;
    if (code == Code::Int && dt.bits == 32) return DType::Int32;
    if (code == Code::Int && dt.bits == 64) return DType::Int64;
    if (code == Code::Float && dt.bits == 32) return DType::Float32;
    if (code == Code::Float && dt.bits == 64) return DType::Float64;
  }
  throw DTypeError(
      detail::concat("kiln.from_numpy(): arrays of this element type (DLPack code ", int(dt.code),
                     ", ", int(dt.bits),
                     " bits) have no Kiln dtype; Kiln has bool, int32, int64, float32, float64 "
                     "(convert with array.astype(...) first)"));
}

nb::dlpack::dtype dlpack_dtype(DType dt) {
  switch (dt) {
    case DType::Bool:
      return nb::dtype<bool>();
    case DType::Int32:
      return nb::dtype<int32_t>();
    case DType::Int64:
      return nb::dtype<int64_t>();
    case DType::Float32:
      return nb::dtype<float>();
    case DType::Float64:
      return nb::dtype<double>();
  }
  return nb::dtype<float>();
}

using AnyArray = nb::ndarray<nb::device::cpu>;

Tensor from_array(const AnyArray& array) {
  const DType dt = dtype_from(array.dtype());
  const size_t ndim = array.ndim();
  Shape sizes, strides;
  int64_t extent = 1;  // elements from the first to one past the last
  bool empty = false;
  for (size_t k = 0; k < ndim; ++k) {
    const int64_t n = static_cast<int64_t>(array.shape(k)), s = array.stride(k);
    KILN_CHECK(s >= 0 || n <= 1, ValueError,
               "kiln.from_numpy(): the array has a negative stride in dim ", k,
               "; Kiln tensors cannot share it (copy it with array.copy() first)");
    sizes.push_back(n);
    strides.push_back(n <= 1 ? (s < 0 ? 0 : s) : s);
    if (n == 0) empty = true;
    extent += (n - 1) * std::max<int64_t>(s, 0);
  }
  if (empty) extent = 0;
  // The array (and so its memory) lives as long as the storage: its reference is dropped, with
  // the GIL held, when the last tensor view goes away.
  auto* owner = new AnyArray(array);
  auto storage =
      Storage::wrap(array.data(), static_cast<size_t>(extent) * itemsize(dt), [owner](void*) {
        if (!Py_IsInitialized()) return;  // interpreter gone: leak
        nb::gil_scoped_acquire locked;
        delete owner;
      });
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), 0, std::move(sizes),
                                             std::move(strides), dt));
}

// An array sharing `t`'s memory, keeping its storage alive.
template <class Framework>
nb::ndarray<Framework> to_array(const Tensor& t, const char* what) {
  KILN_CHECK(!t.requires_grad(), Error, what,
             ": the tensor requires grad; use tensor.detach().numpy() instead");
  Tensor shared = t;
  void* data = shared.data_ptr();  // concrete first (a pending tensor runs its graph)
  std::vector<size_t> shape(shared.sizes().begin(), shared.sizes().end());
  std::vector<int64_t> strides(shared.strides().begin(), shared.strides().end());
  nb::capsule owner(new Tensor(shared), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::ndarray<Framework>(data, shape.size(), shape.data(), owner, strides.data(),
                                dlpack_dtype(shared.dtype()));
}

}  // namespace

void bind_numpy(nb::module_& m) {
  m.def("from_numpy", &from_array, nb::arg("array"),
        "A tensor sharing the array's memory (no copy); the tensor keeps the array alive.");
  m.def("from_dlpack", &from_array, nb::arg("ext_tensor"),
        "A tensor sharing the memory of any object with __dlpack__ (a NumPy array, a torch "
        "CPU tensor, ...).");
  nb::handle tensor_type = nb::type<Tensor>();
  nb::class_<Tensor> cls = nb::borrow<nb::class_<Tensor>>(tensor_type);
  cls.def(
         "numpy",
         [](const Tensor& t, bool force) {
           return to_array<nb::numpy>(force ? t.detach() : t, "Tensor.numpy()");
         },
         nb::kw_only(), nb::arg("force") = false,
         "A NumPy array sharing the tensor's memory (no copy).")
      .def(
          "__array__",
          [](const Tensor& t, nb::handle dtype, nb::handle copy) -> nb::object {
            nb::object array = nb::cast(to_array<nb::numpy>(t, "numpy.asarray(tensor)"));
            if (!dtype.is_none()) array = array.attr("astype")(dtype);
            if (copy.ptr() == Py_True) array = array.attr("copy")();
            return array;
          },
          nb::arg("dtype").none() = nb::none(), nb::kw_only(), nb::arg("copy").none() = nb::none())
      .def(
          "__dlpack__",
          [](const Tensor& t, nb::kwargs kwargs) {
            nb::object array = nb::cast(to_array<nb::array_api>(t, "Tensor.__dlpack__()"));
            return array.attr("__dlpack__")(**kwargs);
          },
          nb::arg("kwargs"))
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); });
}

}  // namespace kiln::python
