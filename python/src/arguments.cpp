// Python values as the C++ API's argument types.
#include <string>

#include "bindings.h"
#include "kiln/ops/pointwise.h"

namespace kiln::python {

namespace {

[[noreturn]] void wrong_type(const char* what, const char* expected, nb::handle got) {
  throw nb::type_error(
      (std::string(what) + " must be " + expected + ", not " + Py_TYPE(got.ptr())->tp_name)
          .c_str());
}

}  // namespace

Tensor* as_tensor(nb::handle h) {
  if (!nb::isinstance<Tensor>(h)) return nullptr;
  return nb::inst_ptr<Tensor>(h);
}

bool is_number(nb::handle h) {
  PyObject* o = h.ptr();
  if (PyFloat_Check(o) || PyLong_Check(o)) return true;  // bool is an int
  // NumPy's scalars (np.float32(2), np.int64(3)) and other numbers, but no tensor or array.
  return !nb::isinstance<Tensor>(h) && PyNumber_Check(o) && !PyObject_CheckBuffer(o) &&
         !PyObject_HasAttrString(o, "__array_interface__");
}

Scalar to_scalar(nb::handle h, const char* what) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) return Scalar(o == Py_True);
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) throw nb::value_error((std::string(what) + ": integer out of range").c_str());
    return Scalar(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(o)) return Scalar(PyFloat_AS_DOUBLE(o));
  if (const Tensor* t = as_tensor(h); t && t->numel() == 1) return t->item_scalar();
  if (PyIndex_Check(o)) return Scalar(static_cast<int64_t>(to_int(h, what)));
  if (PyNumber_Check(o)) {
    const double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    return Scalar(v);
  }
  wrong_type(what, "a number", h);
}

int64_t to_int(nb::handle h, const char* what) {
  PyObject* o = h.ptr();
  // A tensor is an int only when it holds one integer (torch's rule), else the argument has the
  // wrong type (so that a function's next form is tried: max(x, other) after max(x, dim)).
  if (const Tensor* t = as_tensor(h); t && !(t->numel() == 1 && is_integral(t->dtype())))
    wrong_type(what, "an int", h);
  if (PyLong_Check(o) || (PyIndex_Check(o) && !PyFloat_Check(o))) {
    const long long v = PyLong_AsLongLong(o);  // calls __index__
    if (v == -1 && PyErr_Occurred()) {
      if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        throw nb::value_error((std::string(what) + ": integer out of range").c_str());
      }
      throw nb::python_error();
    }
    return v;
  }
  wrong_type(what, "an int", h);
}

double to_float(nb::handle h, const char* what) {
  PyObject* o = h.ptr();
  if (PyFloat_Check(o)) return PyFloat_AS_DOUBLE(o);
  if (PyLong_Check(o) || PyNumber_Check(o)) {
    if (nb::isinstance<Tensor>(h)) return to_scalar(h, what).to_double();
    const double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    return v;
  }
  wrong_type(what, "a float", h);
}

std::vector<int64_t> to_ints(nb::handle h, const char* what) {
  PyObject* o = h.ptr();
  if (PyTuple_Check(o) || PyList_Check(o)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject** items = PySequence_Fast_ITEMS(o);
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (Py_ssize_t k = 0; k < n; ++k) out[k] = to_int(items[k], what);
    return out;
  }
  if (PyLong_Check(o) || (PyIndex_Check(o) && !nb::isinstance<Tensor>(h))) return {to_int(h, what)};
  wrong_type(what, "an int or a sequence of ints", h);
}

std::vector<Tensor> to_tensors(nb::handle h, const char* what) {
  if (!PyTuple_Check(h.ptr()) && !PyList_Check(h.ptr()))
    wrong_type(what, "a sequence of tensors", h);
  std::vector<Tensor> out;
  for (nb::handle item : nb::borrow<nb::sequence>(h)) out.push_back(to_operand(item, what));
  return out;
}

Tensor to_operand(nb::handle h, const char* what) {
  if (const Tensor* t = as_tensor(h)) return *t;
  if (is_number(h)) return wrap_scalar(to_scalar(h, what));
  // A kiln.numpy array is its tensor.
  if (PyObject_HasAttrString(h.ptr(), "__kiln_tensor__")) {
    nb::object t = h.attr("__kiln_tensor__");
    if (const Tensor* inner = as_tensor(t)) return *inner;
  }
  if (PyObject_HasAttrString(h.ptr(), "__array_interface__") ||
      PyObject_HasAttrString(h.ptr(), "__dlpack__"))
    return nb::cast<Tensor>(nb::module_::import_("kiln._C").attr("from_numpy")(h));
  wrong_type(what, "a Tensor or a number", h);
}

nb::object tensor_to_python(Tensor t) {
  if (!t.defined()) return nb::none();
  return nb::cast(std::move(t), nb::rv_policy::move);
}

nb::object scalar_to_python(const Scalar& s) {
  if (s.is_bool()) return nb::bool_(s.to<bool>());
  if (s.is_integral()) return nb::int_(s.to_int());
  return nb::float_(s.to_double());
}

nb::tuple shape_tuple(const Shape& sizes) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(sizes.size()));
  if (!tuple) throw nb::python_error();
  for (size_t k = 0; k < sizes.size(); ++k)
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(k), PyLong_FromLongLong(sizes[k]));
  return nb::steal<nb::tuple>(tuple);
}

}  // namespace kiln::python
