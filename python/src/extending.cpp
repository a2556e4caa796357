// Python code the compiler and autograd call back into: kiln.compiler.allow_in_graph of a Python
// function (one opaque graph node), kiln.autograd.Function subclasses (forward and backward
// staticmethods), and a Python callable as kiln.compile's backend. Every call back into Python
// takes the GIL (the C++ side may run without it), and a Python exception raised there
// propagates through C++ unchanged (nb::python_error carries it).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <bit>
#include <sstream>

#include "bindings.h"
#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ops/factory.h"

namespace kiln::python {

namespace {

// A Python result as tensors: a tensor, or a tuple or list of them (None: an undefined tensor
// where `none_ok`, as a backward's "no gradient").
std::vector<Tensor> result_tensors(nb::handle result, const std::string& what, bool none_ok) {
  std::vector<Tensor> out;
  const auto one = [&](nb::handle h) {
    if (h.is_none() && none_ok) {
      out.emplace_back();
    } else if (const Tensor* t = as_tensor(h)) {
      out.push_back(*t);
    } else {
      throw nb::type_error((what + " must return tensors" + (none_ok ? " or None" : "") + ", not " +
                            Py_TYPE(h.ptr())->tp_name)
                               .c_str());
    }
  };
  if (PyTuple_Check(result.ptr()) || PyList_Check(result.ptr())) {
    for (nb::handle h : nb::borrow<nb::sequence>(result)) one(h);
  } else {
    one(result);
  }
  return out;
}

// ---- allow_in_graph of a Python function ----
// Arguments flatten as kiln::allow_in_graph's C++ ones do: tensors in order, numbers and lists
// of numbers as attributes, with a layout (-1 a number, -2 a tensor, -3 a list of ints, -4 a list
// of floats as their bit patterns, n >= 0 a list of n tensors).
struct AllowedPythonFunction {
  const OpDef* op = nullptr;
  std::shared_ptr<PyRef> fn;
  mutable std::atomic<int> returns_one{-1};  // learned from the first run: 1 a tensor, 0 a sequence
  std::string name;
};

std::vector<Tensor> run_allowed(const AllowedPythonFunction& f, std::span<const Tensor> tensors,
                                const Attrs& attrs) {
  nb::gil_scoped_acquire locked;
  const std::vector<int64_t>& layout = attrs.ints(0);
  nb::list args;
  size_t ti = 0, ai = 1;
  for (int64_t kind : layout) {
    if (kind == -2) {
      args.append(tensor_to_python(tensors[ti++]));
    } else if (kind == -1) {
      args.append(scalar_to_python(attrs.scalar(ai++)));
    } else if (kind == -3 || kind == -4) {
      nb::list values;
      for (int64_t v : attrs.ints(ai++))
        values.append(kind == -3 ? nb::object(nb::int_(v))
                                 : nb::object(nb::float_(std::bit_cast<double>(v))));
      args.append(values);
    } else {
      nb::list list;
      for (int64_t k = 0; k < kind; ++k) list.append(tensor_to_python(tensors[ti++]));
      args.append(list);
    }
  }
  nb::object result = f.fn->get()(*nb::tuple(args));
  const bool one = as_tensor(result) != nullptr;
  f.returns_one.store(one ? 1 : 0);
  return result_tensors(result, "allow_in_graph('" + f.name + "')", false);
}

nb::object call_allowed(const AllowedPythonFunction& f, nb::args args) {
  std::vector<Tensor> tensors;
  std::vector<int64_t> layout;
  Attrs attrs;
  attrs.push_back(std::vector<int64_t>{});  // the layout, filled below
  const auto fail = [&](nb::handle a) {
    throw nb::type_error(("allow_in_graph('" + f.name +
                          "'): arguments must be tensors, numbers, or lists of tensors or of "
                          "numbers, not " +
                          Py_TYPE(a.ptr())->tp_name)
                             .c_str());
  };
  for (nb::handle a : args) {
    if (const Tensor* t = as_tensor(a)) {
      tensors.push_back(*t);
      layout.push_back(-2);
    } else if (is_number(a)) {
      attrs.push_back(to_scalar(a, "argument"));
      layout.push_back(-1);
    } else if (PyList_Check(a.ptr()) || PyTuple_Check(a.ptr())) {
      nb::sequence seq = nb::borrow<nb::sequence>(a);
      const size_t n = nb::len(seq);
      bool all_tensors = true, any_float = false;
      for (nb::handle item : seq) {
        all_tensors = all_tensors && as_tensor(item);
        any_float = any_float || PyFloat_Check(item.ptr());
      }
      if (all_tensors && n > 0) {
        for (nb::handle item : seq) tensors.push_back(*as_tensor(item));
        layout.push_back(static_cast<int64_t>(n));
      } else {
        std::vector<int64_t> values;
        for (nb::handle item : seq) {
          if (!is_number(item)) fail(item);
          values.push_back(any_float ? std::bit_cast<int64_t>(to_float(item, "element"))
                                     : to_int(item, "element"));
        }
        attrs.push_back(std::move(values));
        layout.push_back(any_float ? -4 : -3);
      }
    } else {
      fail(a);
    }
  }
  KILN_CHECK(attrs.size() <= Attrs::kMax, NotImplementedError, "allow_in_graph('", f.name,
             "'): at most ", Attrs::kMax - 1, " number arguments are supported");
  Attrs with_layout;
  with_layout.push_back(std::move(layout));
  for (size_t i = 1; i < attrs.size(); ++i) with_layout.push_back(attrs[i]);
  std::vector<Tensor> outs = detail::call_allowed_function(*f.op, std::move(tensors), with_layout);
  if (f.returns_one.load() == 1) return tensor_to_python(std::move(outs.at(0)));
  nb::list out;
  for (Tensor& t : outs) out.append(tensor_to_python(std::move(t)));
  return nb::tuple(out);
}

// ---- kiln.autograd.Function ----
// The Python side of one call: the Function subclass and the ctx object its forward filled.
struct PythonFunctionState {
  std::shared_ptr<PyRef> cls, ctx;
};

struct FunctionCtx {
  autograd::FunctionContext* ctx = nullptr;
};

std::vector<Tensor> python_backward(autograd::FunctionContext* ctx, std::vector<Tensor> grads) {
  const auto state =
      std::any_cast<std::shared_ptr<PythonFunctionState>>(ctx->saved_data.at("python"));
  nb::gil_scoped_acquire locked;
  nb::list args;
  args.append(state->ctx->get());
  for (Tensor& g : grads) args.append(tensor_to_python(std::move(g)));
  nb::object result = state->cls->get().attr("backward")(*nb::tuple(args));
  return result_tensors(
      result, nb::cast<std::string>(state->cls->get().attr("__qualname__")) + ".backward", true);
}

nb::object apply_function(nb::handle cls, nb::args args) {
  std::vector<Tensor> tensors;
  std::vector<int> positions;
  for (size_t i = 0; i < args.size(); ++i)
    if (const Tensor* t = as_tensor(args[i])) {
      tensors.push_back(*t);
      positions.push_back(static_cast<int>(i));
    }
  bool any_requires = false;
  for (const Tensor& t : tensors) any_requires = any_requires || t.requires_grad();
  const std::string name = nb::cast<std::string>(cls.attr("__qualname__"));
  auto node = is_grad_enabled() && any_requires
                  ? std::make_shared<autograd::detail::CustomFunctionNode>(name, &python_backward,
                                                                           positions, args.size())
                  : nullptr;
  autograd::FunctionContext local;
  autograd::FunctionContext* ctx = node ? &node->ctx : &local;
  ctx->needs_input_grad_.assign(args.size(), false);
  for (size_t k = 0; k < tensors.size(); ++k)
    ctx->needs_input_grad_[static_cast<size_t>(positions[k])] = tensors[k].requires_grad();
  nb::object py_ctx = nb::module_::import_("kiln.autograd").attr("FunctionCtx")();
  nb::inst_ptr<FunctionCtx>(py_ctx)->ctx = ctx;
  nb::object result;
  {
    NoGradGuard no_grad;
    nb::list call_args;
    call_args.append(py_ctx);
    for (nb::handle a : args) call_args.append(a);
    result = cls.attr("forward")(*nb::tuple(call_args));
  }
  if (!node) {
    nb::inst_ptr<FunctionCtx>(py_ctx)->ctx = nullptr;  // `local` ends here
    return result;
  }
  const bool one = as_tensor(result) != nullptr;
  std::vector<Tensor> outs = result_tensors(result, name + ".forward", false);
  auto state = std::make_shared<PythonFunctionState>();
  state->cls = std::make_shared<PyRef>(cls);
  state->ctx = std::make_shared<PyRef>(py_ctx);
  node->ctx.saved_data["python"] = state;
  autograd::detail::connect_custom_function(node, tensors, outs);
  if (one) return tensor_to_python(std::move(outs[0]));
  nb::list out;
  for (Tensor& t : outs) out.append(tensor_to_python(std::move(t)));
  return nb::tuple(out);
}

// ---- a Python callable as backend ----
struct GraphView {
  std::shared_ptr<const ir::Graph> graph;
};

Backend python_backend(nb::handle fn) {
  auto ref = std::make_shared<PyRef>(fn);
  return Backend([ref](const ir::Graph& graph,
                       std::span<const TensorMeta> inputs) -> CompiledGraph {
    nb::gil_scoped_acquire locked;
    auto shared = std::make_shared<const ir::Graph>(graph);
    nb::list examples;  // zeros of the inputs' dtypes and shapes (values are not known here)
    for (const TensorMeta& m : inputs) examples.append(tensor_to_python(zeros(m.sizes, m.dtype)));
    nb::object compiled = ref->get()(GraphView{shared}, examples);
    if (!PyCallable_Check(compiled.ptr()))
      throw nb::type_error("a Python backend must return a callable taking the graph's inputs");
    auto run = std::make_shared<PyRef>(compiled);
    const size_t outputs = shared->outputs.size();
    return [run, outputs](std::span<const Tensor> ins, std::span<const int64_t>) {
      nb::gil_scoped_acquire locked;
      nb::list args;
      for (const Tensor& t : ins) args.append(tensor_to_python(t));
      nb::object result = run->get()(*nb::tuple(args));
      std::vector<Tensor> outs = result_tensors(result, "a Python backend's compiled graph", false);
      KILN_CHECK(outs.size() == outputs, Error, "a Python backend's compiled graph returned ",
                 outs.size(), " tensors; the graph has ", outputs, " outputs");
      for (Tensor& t : outs) t = t.contiguous().clone();  // fresh memory, as a backend owes
      return outs;
    };
  });
}

}  // namespace

Backend backend_from_python(nb::handle fn) { return python_backend(fn); }

void bind_extending(nb::module_& m) {
  nb::class_<AllowedPythonFunction>(m, "_AllowedFunction")
      .def("__call__",
           [](const AllowedPythonFunction& f, nb::args args) { return call_allowed(f, args); });
  m.def(
      "_allow_python_function",
      [](nb::object fn, std::string name) {
        auto f = std::make_unique<AllowedPythonFunction>();
        f->fn = std::make_shared<PyRef>(fn);
        f->name = name;
        AllowedPythonFunction* raw = f.get();
        f->op = &detail::register_allowed_function(
            name, [raw](std::span<const Tensor> tensors, const Attrs& attrs) {
              return run_allowed(*raw, tensors, attrs);
            });
        return f.release();  // lives as long as its op, which the registry never drops
      },
      nb::rv_policy::reference);

  nb::class_<FunctionCtx>(m, "_FunctionCtx", nb::dynamic_attr())
      .def(nb::init<>())
      .def("save_for_backward",
           [](FunctionCtx& c, nb::args tensors) {
             KILN_CHECK(c.ctx, Error, "save_for_backward outside the forward of a Function");
             std::vector<Tensor> saved;
             for (nb::handle t : tensors)
               saved.push_back(t.is_none() ? Tensor() : to_operand(t, "save_for_backward"));
             c.ctx->save_for_backward(saved);
           })
      .def_prop_ro("saved_tensors",
                   [](const FunctionCtx& c) {
                     KILN_CHECK(c.ctx, Error, "saved_tensors outside a Function's backward");
                     nb::list out;
                     for (Tensor& t : c.ctx->get_saved_variables())
                       out.append(tensor_to_python(std::move(t)));
                     return nb::tuple(out);
                   })
      .def_prop_ro("needs_input_grad", [](const FunctionCtx& c) {
        nb::list out;
        for (bool b : c.ctx ? c.ctx->needs_input_grad_ : std::vector<bool>{}) out.append(b);
        return nb::tuple(out);
      });
  m.def("_apply_function", &apply_function, nb::arg("cls"), nb::arg("args"));

  nb::class_<GraphView>(m, "Graph", "A captured graph, as a backend receives it.")
      .def("__str__",
           [](const GraphView& g) {
             std::ostringstream os;
             os << *g.graph;
             return os.str();
           })
      .def("__repr__",
           [](const GraphView& g) {
             return "<kiln.Graph: " + std::to_string(g.graph->num_calls()) + " ops>";
           })
      .def_prop_ro("nodes",
                   [](const GraphView& g) {
                     // One (op name, [input node indices], attributes text) per op call.
                     nb::list out;
                     for (const ir::Node& n : g.graph->nodes) {
                       if (n.kind != ir::NodeKind::Call) continue;
                       nb::list inputs;
                       for (const ir::ValueRef& v : n.inputs) inputs.append(v.node);
                       std::ostringstream attrs;
                       for (size_t k = 0; k < n.attrs.size(); ++k)
                         attrs << (k ? ", " : "") << n.attrs[k];
                       out.append(nb::make_tuple(std::string(n.op->name), inputs, attrs.str()));
                     }
                     return out;
                   })
      .def("__call__", [](const GraphView& g, nb::args args) {
        // Runs the graph with the eager kernels (the "eager" backend's interpreter).
        std::vector<Tensor> ins;
        for (nb::handle a : args) ins.push_back(to_operand(a, "graph input"));
        const ir::Interpreter interpreter(g.graph);
        std::vector<Tensor> outs;
        {
          nb::gil_scoped_release unlocked;
          outs = interpreter.run(ins);
        }
        nb::list out;
        for (Tensor& t : outs) out.append(tensor_to_python(std::move(t)));
        return nb::tuple(out);
      });
}

}  // namespace kiln::python
