// The pieces of the extension kiln._C, each binding one part of the C++ API (docs/python.md).
#pragma once

#include <nanobind/nanobind.h>

#include <optional>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {
class Backend;
}

namespace kiln::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_dtypes(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_op_functions(nb::module_& m);
void bind_factories(nb::module_& m);
void bind_numpy(nb::module_& m);
void bind_autograd(nb::module_& m);
void bind_compile(nb::module_& m);
void bind_nn(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_io(nb::module_& m);
void bind_data(nb::module_& m);
void bind_bench_hooks(nb::module_& m);
void bind_extending(nb::module_& m);

// A Python callable as a kiln::compile backend (extending.cpp).
Backend backend_from_python(nb::handle fn);

// Sets the Python error for the C++ exception being handled (a kiln::Error as its kiln.Error
// kind, nanobind's errors as theirs): for code that returns to Python without nanobind.
void set_error_from_current_exception();

// ---- conversions from Python values (arguments.cpp) ----
// Each throws a Python TypeError naming `what` ("kiln.sum(): argument 'dim'") and the type it got.

// The kiln.Tensor in `h`, or null when `h` is not one.
Tensor* as_tensor(nb::handle h);
// A tensor for an operand: a kiln.Tensor, or a Python number as a wrapped scalar (which takes
// part in type promotion by category only, as PyTorch's), or a NumPy array (shared, no copy).
Tensor to_operand(nb::handle h, const char* what);
bool is_number(nb::handle h);
Scalar to_scalar(nb::handle h, const char* what);
int64_t to_int(nb::handle h, const char* what);
double to_float(nb::handle h, const char* what);
// An int or a sequence of ints (a tuple, a list, a kiln.Size).
std::vector<int64_t> to_ints(nb::handle h, const char* what);
DType to_dtype(nb::handle h, const char* what);
std::vector<Tensor> to_tensors(nb::handle h, const char* what);
nb::object tensor_to_python(Tensor t);
// A number as Python's bool, int or float, by its kind.
nb::object scalar_to_python(const Scalar& s);
// Shape as a Python tuple.
nb::tuple shape_tuple(const Shape& sizes);

// The Python object for a kiln dtype (kiln.float32, ...).
nb::object dtype_object(DType dt);

// A Python object that C++ keeps (in an op body, an autograd context, a compiled graph, a
// tensor hook), released with the GIL held, or leaked when the interpreter is gone.
class PyRef {
 public:
  explicit PyRef(nb::handle h) : obj_(h.ptr()) { Py_XINCREF(obj_); }
  ~PyRef() {
    if (!obj_ || !Py_IsInitialized()) return;
    nb::gil_scoped_acquire locked;
    Py_DECREF(obj_);
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  nb::handle get() const { return obj_; }

 private:
  PyObject* obj_;
};

// Whether an op over `numel` elements is long enough to run without holding the GIL.
inline bool worth_releasing_gil(int64_t numel) { return numel >= (1 << 15); }

}  // namespace kiln::python
