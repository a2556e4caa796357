// The Python functions of the op registry and of the function registry (kiln/ops/function.h):
// one callable per OpDef or FunctionDef, its signature read from the schema (names, defaults,
// keyword-only parameters) and its docstring from the schema and the doc line. Nothing here is
// written op by op: an op or function is in Python when it is registered.
//
// Each callable is an object of a small C type with vectorcall (no tuple or dict is built per
// call) that is also a method descriptor, so the same object serves as `kiln.sum(x, 1)` and as
// the method `x.sum(1)` (Python passes `self` as the first argument without binding).
#include <nanobind/stl/string.h>

#include <array>
#include <map>
#include <memory>
#include <string>

#include "bindings.h"
#include "kiln/ops/function.h"
#include "kiln/ops/op.h"
#include "kiln/ops/schema.h"

namespace kiln::python {

namespace {

using Type = SchemaParam::Type;

struct Signature {
  const OpDef* op = nullptr;        // an op's function, or
  const FunctionDef* fn = nullptr;  // a public function
  std::string name;
  Schema schema;
  std::string doc;
  std::vector<std::string> what;  // per parameter: "kiln.sum(): argument 'dim'"
  std::string qualified;          // "kiln.sum()"
  size_t num_positional = 0;      // parameters before `*`
  // A last positional `int[]` parameter takes the remaining positional ints: x.view(2, 3).
  int varargs = -1;
  PyObject* return_type = nullptr;  // a named tuple type for ops with several outputs
  bool method = false;              // the first parameter is `Tensor self`
  // The next form of a function registered more than once under its name (conv2d's `padding`
  // as sizes or as "same"/"valid"): tried in order until one takes the arguments.
  const Signature* overload = nullptr;
};

struct OpFunctionObject {
  PyObject_HEAD vectorcallfunc vectorcall;
  const Signature* signature;
};

constexpr size_t kMaxParams = 24;

[[noreturn]] void type_error(const std::string& message) { throw nb::type_error(message.c_str()); }

int find_param(const Signature& sig, PyObject* name) {
  Py_ssize_t length = 0;
  const char* text = PyUnicode_AsUTF8AndSize(name, &length);
  if (!text) throw nb::python_error();
  const std::string_view key(text, static_cast<size_t>(length));
  for (size_t k = 0; k < sig.schema.params.size(); ++k) {
    const std::string_view p = sig.schema.params[k].name;
    // torch spells the first tensor `input` in functions and `self` in methods.
    if (p == key || (k == 0 && p == "self" && key == "input")) return static_cast<int>(k);
  }
  return -1;
}

AttrValue default_attr(const SchemaParam& p) {
  if (p.type == Type::Scalar) {
    return std::visit(
        [](const auto& v) -> AttrValue {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double> ||
                        std::is_same_v<V, bool>)
            return Scalar(v);
          else
            return v;
        },
        p.default_value);
  }
  return p.default_value;
}

AttrValue to_attr(const SchemaParam& p, nb::handle value, const char* what) {
  if (value.is_none()) {
    if (p.optional) return std::monostate{};
    // `int[] dim=[]` (all dims) also takes None, as torch's `dim=None`.
    if (p.type == Type::Ints && p.has_default) return p.default_value;
    type_error(std::string(what) + " must not be None");
  }
  switch (p.type) {
    case Type::Int:
      return to_int(value, what);
    case Type::Float:
      return to_float(value, what);
    case Type::Bool:
      if (!PyBool_Check(value.ptr()))
        type_error(std::string(what) + " must be a bool, not " + Py_TYPE(value.ptr())->tp_name);
      return value.ptr() == Py_True;
    case Type::DType:
      return to_dtype(value, what);
    case Type::Scalar:
      return to_scalar(value, what);
    case Type::Ints:
      return to_ints(value, what);
    case Type::Str:
      if (!PyUnicode_Check(value.ptr()))
        type_error(std::string(what) + " must be a str, not " + Py_TYPE(value.ptr())->tp_name);
      return nb::cast<std::string>(value);
    case Type::Tensor:
    case Type::TensorList:
      break;
  }
  type_error(std::string(what) + ": not an attribute");
}

// The Python objects given for each parameter (null: not given), positional and keyword.
struct BoundArguments {
  std::array<PyObject*, kMaxParams> values{};
  nb::object varargs;  // the tuple a variadic int[] parameter received
};

void bind_arguments(const Signature& sig, PyObject* const* args, size_t nargsf, PyObject* kwnames,
                    BoundArguments& bound) {
  const std::vector<SchemaParam>& params = sig.schema.params;
  const size_t total = PyVectorcall_NARGS(nargsf);
  size_t nargs = total;
  if (sig.varargs >= 0 && nargs > static_cast<size_t>(sig.varargs) + 1 &&
      PyIndex_Check(args[sig.varargs]) && !as_tensor(args[sig.varargs])) {
    bound.varargs = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(nargs) - sig.varargs));
    for (size_t k = static_cast<size_t>(sig.varargs); k < nargs; ++k)
      PyTuple_SET_ITEM(bound.varargs.ptr(), static_cast<Py_ssize_t>(k) - sig.varargs,
                       Py_NewRef(args[k]));
    bound.values[sig.varargs] = bound.varargs.ptr();
    nargs = static_cast<size_t>(sig.varargs);
  }
  if (nargs > sig.num_positional)
    type_error(sig.qualified + " takes " + std::to_string(sig.num_positional) +
               " positional arguments but " + std::to_string(nargs) + " were given");
  for (size_t k = 0; k < nargs; ++k) bound.values[k] = args[k];
  if (!kwnames) return;
  const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    const int p = find_param(sig, name);
    if (p < 0)
      type_error(sig.qualified + " got an unexpected keyword argument '" + PyUnicode_AsUTF8(name) +
                 "'");
    if (bound.values[p])
      type_error(sig.qualified + " got multiple values for argument '" +
                 std::string(params[p].name) + "'");
    bound.values[p] = args[total + k];  // keyword values follow every positional one
  }
}

[[noreturn]] void missing(const Signature& sig, const SchemaParam& p) {
  type_error(sig.qualified + " missing required argument '" + std::string(p.name) + "'");
}

// Runs `fn` without the GIL when the tensors involved are large.
template <class F>
auto maybe_unlocked(int64_t numel, F&& fn) {
  if (worth_releasing_gil(numel)) {
    nb::gil_scoped_release unlocked;
    return fn();
  }
  return fn();
}

nb::object tensors_to_python(const Signature& sig, std::vector<Tensor> tensors) {
  const auto n = static_cast<Py_ssize_t>(tensors.size());
  nb::object result = nb::steal(sig.schema.returns_list ? PyList_New(n) : PyTuple_New(n));
  for (Py_ssize_t k = 0; k < n; ++k) {
    PyObject* item = tensor_to_python(std::move(tensors[k])).release().ptr();
    if (sig.schema.returns_list)
      PyList_SET_ITEM(result.ptr(), k, item);
    else
      PyTuple_SET_ITEM(result.ptr(), k, item);
  }
  if (sig.return_type && static_cast<size_t>(n) == sig.schema.returns.size())
    return nb::steal(PyObject_CallObject(sig.return_type, result.ptr()));
  return result;
}

nb::object run_op(const Signature& sig, const BoundArguments& bound) {
  const std::vector<SchemaParam>& params = sig.schema.params;
  std::vector<Tensor> inputs;
  inputs.reserve(params.size());
  Attrs attrs;
  int64_t numel = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const SchemaParam& p = params[k];
    const char* what = sig.what[k].c_str();
    const nb::handle value = bound.values[k];
    if (!value.is_valid()) {
      if (!p.has_default) missing(sig, p);
      if (!p.is_tensor()) attrs.push_back(default_attr(p));
      continue;  // (an optional tensor left out)
    }
    if (p.type == Type::Tensor) {
      if (value.is_none() && p.optional) continue;
      inputs.push_back(to_operand(value, what));
      numel += inputs.back().numel();
    } else if (p.type == Type::TensorList) {
      for (Tensor& t : to_tensors(value, what)) {
        numel += t.numel();
        inputs.push_back(std::move(t));
      }
    } else {
      attrs.push_back(to_attr(p, value, what));
    }
  }
  std::array<Tensor, kMaxOpOutputs> outputs;
  const std::span<const Tensor> in(inputs.data(), inputs.size());
  const int n = maybe_unlocked(numel, [&] { return dispatch(*sig.op, in, attrs, outputs); });
  if (sig.schema.returns.size() <= 1) return tensor_to_python(std::move(outputs[0]));
  return tensors_to_python(sig, std::vector<Tensor>(outputs.begin(), outputs.begin() + n));
}

FunctionArgs::Value from_attr(AttrValue v) {
  return std::visit([](auto&& x) -> FunctionArgs::Value { return std::move(x); }, std::move(v));
}

// The arguments as the function's call takes them; a TypeError when they do not fit its schema.
std::vector<FunctionArgs::Value> function_args(const Signature& sig, const BoundArguments& bound,
                                               int64_t& numel) {
  const std::vector<SchemaParam>& params = sig.schema.params;
  std::vector<FunctionArgs::Value> values;
  values.reserve(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const SchemaParam& p = params[k];
    const char* what = sig.what[k].c_str();
    const nb::handle value = bound.values[k];
    if (!value.is_valid()) {
      if (!p.has_default) missing(sig, p);
      values.push_back(p.is_tensor() ? FunctionArgs::Value() : from_attr(default_attr(p)));
    } else if (p.type == Type::Tensor) {
      if (value.is_none() && p.optional) {
        values.emplace_back();
        continue;
      }
      Tensor t = to_operand(value, what);
      numel += t.numel();
      values.emplace_back(std::move(t));
    } else if (p.type == Type::TensorList) {
      std::vector<Tensor> list = to_tensors(value, what);
      for (const Tensor& t : list) numel += t.numel();
      values.emplace_back(std::move(list));
    } else {
      values.push_back(from_attr(to_attr(p, value, what)));
    }
  }
  return values;
}

nb::object run_function(const Signature& sig, const BoundArguments& bound,
                        std::vector<FunctionArgs::Value> values, int64_t numel) {
  const FunctionArgs call_args(std::move(values));
  FunctionResult result = maybe_unlocked(numel, [&] { return sig.fn->call(call_args); });
  if (Tensor* t = std::get_if<Tensor>(&result)) {
    // An in-place method returns the very object it was called on (`x.add_(y) is x`).
    if (const Tensor* self = bound.values[0] ? as_tensor(bound.values[0]) : nullptr;
        self && self->is_same(*t))
      return nb::borrow(bound.values[0]);
    return tensor_to_python(std::move(*t));
  }
  if (auto* list = std::get_if<std::vector<Tensor>>(&result))
    return tensors_to_python(sig, std::move(*list));
  return scalar_to_python(std::get<Scalar>(result));
}

PyObject* call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Signature& sig = *reinterpret_cast<OpFunctionObject*>(self)->signature;
  try {
    if (sig.op) {
      BoundArguments bound;
      bind_arguments(sig, args, nargsf, kwnames, bound);
      return run_op(sig, bound).release().ptr();
    }
    std::string mismatches;  // why each form refused the arguments
    for (const Signature* form = &sig; form; form = form->overload) {
      BoundArguments bound;
      std::vector<FunctionArgs::Value> values;
      int64_t numel = 0;
      try {
        bind_arguments(*form, args, nargsf, kwnames, bound);
        values = function_args(*form, bound, numel);
      } catch (const nb::builtin_exception& e) {
        if (!sig.overload || e.type() != nb::exception_type::type_error) throw;
        mismatches += std::string("\n  ") + std::string(form->fn->schema) + ": " + e.what();
        continue;
      }
      return run_function(*form, bound, std::move(values), numel).release().ptr();
    }
    type_error(sig.qualified + " takes these arguments in none of its forms:" + mismatches);
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
}

PyObject* op_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

const Signature& signature_of(PyObject* self) {
  return *reinterpret_cast<OpFunctionObject*>(self)->signature;
}
PyObject* op_get_doc(PyObject* self, void*) {
  return PyUnicode_FromString(signature_of(self).doc.c_str());
}
PyObject* op_get_name(PyObject* self, void*) {
  return PyUnicode_FromString(signature_of(self).name.c_str());
}
PyObject* op_get_schema(PyObject* self, void*) {
  const Signature& sig = signature_of(self);
  const std::string_view schema = sig.op ? sig.op->schema : sig.fn->schema;
  return PyUnicode_FromStringAndSize(schema.data(), static_cast<Py_ssize_t>(schema.size()));
}
PyObject* op_repr(PyObject* self) {
  const Signature& sig = signature_of(self);
  return PyUnicode_FromFormat("<kiln %s %s>", sig.op ? "op" : "function", sig.name.c_str());
}

PyObject* op_get_schemas(PyObject* self, void*) {
  Py_ssize_t n = 0;
  for (const Signature* form = &signature_of(self); form; form = form->overload) ++n;
  PyObject* out = PyTuple_New(n);
  if (!out) return nullptr;
  Py_ssize_t k = 0;
  for (const Signature* form = &signature_of(self); form; form = form->overload, ++k) {
    const std::string_view schema = form->op ? form->op->schema : form->fn->schema;
    PyObject* text =
        PyUnicode_FromStringAndSize(schema.data(), static_cast<Py_ssize_t>(schema.size()));
    if (!text) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, k, text);
  }
  return out;
}

PyGetSetDef op_getset[] = {
    {"__doc__", op_get_doc, nullptr, nullptr, nullptr},
    {"__name__", op_get_name, nullptr, nullptr, nullptr},
    {"__qualname__", op_get_name, nullptr, nullptr, nullptr},
    {"schema", op_get_schema, nullptr, "The schema string the signature comes from.", nullptr},
    {"schemas", op_get_schemas, nullptr, "Every form's schema (a function with overloads).",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyTypeObject* function_type() {
  static PyTypeObject* type = [] {
    PyType_Slot slots[] = {{Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                           {Py_tp_descr_get, reinterpret_cast<void*>(op_descr_get)},
                           {Py_tp_getset, op_getset},
                           {Py_tp_repr, reinterpret_cast<void*>(op_repr)},
                           {0, nullptr}};
    PyType_Spec spec = {
        "kiln.Function", sizeof(OpFunctionObject), 0,
        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR, slots};
    auto* t = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
    if (!t) throw nb::python_error();
    t->tp_vectorcall_offset = offsetof(OpFunctionObject, vectorcall);
    return t;
  }();
  return type;
}

// The signature of an op (`op`) or a function (`fn`), from its schema; lives as long as the
// process, as the definitions do.
Signature* make_signature(const OpDef* op, const FunctionDef* fn, std::string_view module) {
  auto sig = std::make_unique<Signature>();
  sig->op = op;
  sig->fn = fn;
  const std::string_view schema_text = op ? op->schema : fn->schema;
  sig->schema = parse_schema(op ? op->name : "register_function", schema_text);
  sig->name = std::string(sig->schema.name);
  KILN_CHECK(sig->schema.params.size() <= kMaxParams, Error, "the Python binding of '", sig->name,
             "': more than ", kMaxParams, " parameters");
  sig->qualified = "kiln." + (module.empty() ? "" : std::string(module) + ".") + sig->name + "()";
  for (const SchemaParam& p : sig->schema.params) {
    sig->what.push_back(sig->qualified + ": argument '" + std::string(p.name) + "'");
    if (!p.keyword_only) ++sig->num_positional;
  }
  const auto& params = sig->schema.params;
  if (sig->num_positional > 0 && params[sig->num_positional - 1].type == Type::Ints)
    sig->varargs = static_cast<int>(sig->num_positional) - 1;
  sig->method = !params.empty() && params[0].type == Type::Tensor && !params[0].optional &&
                params[0].name == "self";
  sig->doc = std::string(schema_text);
  const std::string_view doc = op ? op->doc : fn->doc;
  if (!doc.empty()) sig->doc += "\n\n" + std::string(doc);
  if (sig->schema.returns.size() > 1) {
    nb::list fields;
    for (size_t k = 0; k < sig->schema.returns.size(); ++k) {
      const std::string_view name = sig->schema.returns[k];
      fields.append(name.empty() ? "output" + std::to_string(k) : std::string(name));
    }
    nb::object namedtuple = nb::module_::import_("collections").attr("namedtuple");
    nb::object type = namedtuple(sig->name, fields, nb::arg("module") = "kiln.return_types");
    sig->return_type = type.release().ptr();
  }
  return sig.release();
}

nb::object make_function(const Signature* sig) {
  auto* fn = PyObject_New(OpFunctionObject, function_type());
  if (!fn) throw nb::python_error();
  fn->vectorcall = call;
  fn->signature = sig;
  return nb::steal(reinterpret_cast<PyObject*>(fn));
}

}  // namespace

void bind_op_functions(nb::module_& m) {
  nb::module_ ops = m.def_submodule("ops", "Every op of the registry, internal ones included.");
  nb::module_ functions = m.def_submodule(
      "functions", "The public functions of kiln (ops and composites), by the module they are in.");
  nb::handle tensor_type = nb::type<Tensor>();
  // What Python offers as kiln.<name> and as methods: the public ops, then the functions, which
  // take the place of an op of the same name (one_hot inferring its class count, max's forms).
  nb::dict top;         // name -> callable, for kiln.<name>
  nb::dict submodules;  // "nn.functional" -> {name -> callable}
  nb::dict methods;
  for (const OpDef* op : all_ops()) {
    if (op->schema.empty() || op->kind == OpKind::Opaque) continue;
    const Signature* sig = make_signature(op, nullptr, "");
    nb::object function = make_function(sig);
    ops.attr(sig->name.c_str()) = function;
    if (op->internal) continue;
    top[sig->name.c_str()] = function;
    if (sig->method) methods[sig->name.c_str()] = function;
  }
  std::map<std::pair<std::string_view, std::string>, Signature*> forms;  // the first of each
  for (const FunctionDef* def : all_functions()) {
    Signature* sig = make_signature(nullptr, def, def->module);
    auto [first, is_first] = forms.try_emplace({def->module, sig->name}, sig);
    if (!is_first) {  // another form of a function already bound: tried after the others
      Signature* last = first->second;
      while (last->overload) last = const_cast<Signature*>(last->overload);
      last->overload = sig;
      first->second->doc += "\n\n" + sig->doc;
      continue;
    }
    nb::object function = make_function(sig);
    if (def->module.empty()) {
      top[sig->name.c_str()] = function;
      if (sig->method) methods[sig->name.c_str()] = function;
    } else {
      nb::str module(def->module.data(), def->module.size());
      if (!submodules.contains(module)) submodules[module] = nb::dict();
      nb::borrow<nb::dict>(submodules[module])[sig->name.c_str()] = function;
    }
  }
  for (auto [name, function] : methods) {
    // Methods bound by hand (tensor.cpp) keep their own form.
    if (!nb::hasattr(tensor_type, name)) nb::setattr(tensor_type, name, function);
  }
  functions.attr("top") = top;
  functions.attr("submodules") = submodules;

  // A schema's parts, for the stub generator (python/stubgen_functions.py).
  m.def("_parse_schema", [](const std::string& text) {
    const Schema schema = parse_schema("_parse_schema", text);
    static const char* names[] = {"Tensor",     "Tensor[]", "int",   "float", "bool",
                                  "ScalarType", "Scalar",   "int[]", "str"};
    nb::list params;
    for (const SchemaParam& p : schema.params)
      params.append(nb::make_tuple(std::string(p.name), names[static_cast<int>(p.type)], p.optional,
                                   p.keyword_only, p.has_default));
    nb::list returns;
    for (std::string_view r : schema.returns) returns.append(std::string(r));
    return nb::make_tuple(std::string(schema.name), params, returns, schema.returns_list,
                          schema.returns_number);
  });
}

}  // namespace kiln::python
