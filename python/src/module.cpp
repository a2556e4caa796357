// kiln._C: the extension module. The Python package (python/kiln) re-exports it with torch's
// names; docs/python.md is the guide.
#include <nanobind/stl/string.h>

#include <array>

#include "bindings.h"
#include "kiln/capture/compile.h"
#include "kiln/core/dtype.h"
#include "kiln/core/interrupt.h"

namespace kiln::python {

void set_kiln_error(const std::exception_ptr& p);

namespace {

// Python exception classes for kiln::Error and its kinds. Each kind is also the builtin
// exception a Python user would catch for it (a ShapeError is a ValueError), and all are
// kiln.Error, a RuntimeError, as torch's errors are.
struct ErrorTypes {
  PyObject* error = nullptr;
  PyObject* shape = nullptr;
  PyObject* dtype = nullptr;
  PyObject* index = nullptr;
  PyObject* value = nullptr;
  PyObject* not_implemented = nullptr;
  PyObject* graph_break = nullptr;
  PyObject* recompile = nullptr;
};
ErrorTypes error_types;

PyObject* new_error_type(nb::module_& m, const char* name, PyObject* base, PyObject* builtin,
                         const char* doc) {
  nb::object bases = builtin ? nb::make_tuple(nb::handle(base), nb::handle(builtin))
                             : nb::make_tuple(nb::handle(base));
  const std::string qualified = std::string("kiln.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

// A C++ dtype as a Python object: one instance per dtype, so `t.dtype is kiln.float32`.
struct PyDType {
  DType value;
};
// Borrowed: the module's attributes own them.
std::array<PyObject*, kNumDTypes> dtype_objects{};

}  // namespace

void bind_errors(nb::module_& m) {
  ErrorTypes& e = error_types;
  e.error = new_error_type(m, "Error", PyExc_RuntimeError, nullptr,
                           "Base of every error Kiln raises (a RuntimeError).");
  e.shape = new_error_type(m, "ShapeError", e.error, PyExc_ValueError,
                           "Shapes that cannot broadcast or do not fit the op.");
  e.dtype = new_error_type(m, "DTypeError", e.error, PyExc_TypeError,
                           "A dtype the op does not support, or an unsafe in-place cast.");
  e.index = new_error_type(m, "IndexError", e.error, PyExc_IndexError,
                           "An index or dimension out of range.");
  e.value =
      new_error_type(m, "ValueError", e.error, PyExc_ValueError, "An invalid argument value.");
  e.not_implemented = new_error_type(m, "NotImplementedError", e.error, PyExc_NotImplementedError,
                                     "A feature Kiln does not implement (yet).");
  e.graph_break = new_error_type(m, "GraphBreakError", e.error, nullptr,
                                 "fullgraph=True and the function reached a graph break.");
  e.recompile = new_error_type(m, "RecompileError", e.error, nullptr,
                               "The stance is fail_on_recompile and a call needed a compile.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) { set_kiln_error(p); });
}

// Most derived first: the message is kept unchanged. Rethrows what is not a kiln::Error.
void set_kiln_error(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const GraphBreakError& x) {
    PyErr_SetString(error_types.graph_break, x.what());
  } catch (const RecompileError& x) {
    PyErr_SetString(error_types.recompile, x.what());
  } catch (const ShapeError& x) {
    PyErr_SetString(error_types.shape, x.what());
  } catch (const DTypeError& x) {
    PyErr_SetString(error_types.dtype, x.what());
  } catch (const IndexError& x) {
    PyErr_SetString(error_types.index, x.what());
  } catch (const ValueError& x) {
    PyErr_SetString(error_types.value, x.what());
  } catch (const NotImplementedError& x) {
    PyErr_SetString(error_types.not_implemented, x.what());
  } catch (const Error& x) {
    PyErr_SetString(error_types.error, x.what());
  }
}

void set_error_from_current_exception() {
  try {
    throw;
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const nb::builtin_exception& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.type()) {
      case nb::exception_type::type_error:
        type = PyExc_TypeError;
        break;
      case nb::exception_type::value_error:
        type = PyExc_ValueError;
        break;
      case nb::exception_type::index_error:
        type = PyExc_IndexError;
        break;
      case nb::exception_type::key_error:
        type = PyExc_KeyError;
        break;
      case nb::exception_type::stop_iteration:
        type = PyExc_StopIteration;
        break;
      default:
        break;
    }
    PyErr_SetString(type, e.what());
  } catch (const Error&) {
    set_kiln_error(std::current_exception());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

void bind_dtypes(nb::module_& m) {
  nb::class_<PyDType>(m, "dtype", "A tensor element type: kiln.float32, kiln.int64, ...")
      .def_prop_ro("is_floating_point", [](const PyDType& d) { return is_floating(d.value); })
      .def_prop_ro("itemsize", [](const PyDType& d) { return itemsize(d.value); })
      .def("__repr__",
           [](const PyDType& d) { return "kiln." + std::string(dtype_info(d.value).name); });
  for (int k = 0; k < kNumDTypes; ++k) {
    const DType dt = static_cast<DType>(k);
    nb::object obj = nb::cast(PyDType{dt});
    dtype_objects[k] = obj.ptr();
    m.attr(std::string(dtype_info(dt).name).c_str()) = obj;
  }
}

nb::object dtype_object(DType dt) { return nb::borrow(dtype_objects[static_cast<int>(dt)]); }

DType to_dtype(nb::handle h, const char* what) {
  if (nb::isinstance<PyDType>(h)) return nb::inst_ptr<PyDType>(h)->value;
  throw nb::type_error(
      (std::string(what) + " must be a kiln.dtype, not " +
       nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(h.ptr()))))))
          .c_str());
}

namespace {
// Ctrl-C while Kiln waits for the C++ compiler: Python's signal handlers run here (they run
// only on the main thread; elsewhere PyErr_CheckSignals does nothing), and whatever they raise,
// KeyboardInterrupt by default, propagates out of the compiling call unchanged.
void run_python_signal_handlers() {
#if PY_VERSION_HEX >= 0x030D0000
  if (!Py_IsInitialized() || Py_IsFinalizing()) return;
#else
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
#endif
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}
}  // namespace

}  // namespace kiln::python

NB_MODULE(_C, m) {
  using namespace kiln::python;
  m.doc() = "Kiln's C++ core: tensors, ops, autograd and the compiler (docs/python.md).";
  bind_errors(m);
  bind_dtypes(m);
  bind_tensor(m);
  bind_op_functions(m);
  bind_factories(m);
  bind_numpy(m);
  bind_autograd(m);
  bind_compile(m);
  bind_nn(m);
  bind_optim(m);
  bind_io(m);
  bind_data(m);
  bind_bench_hooks(m);
  bind_extending(m);
  kiln::set_interrupt_check(&run_python_signal_handlers);
}
