// kiln.compile on Python callables, explain, and the fine-grained controls. Capture works as
// in C++ (lazy tracing: the Python function runs and its ops are recorded), so the Python code
// between ops runs on every call; graph breaks name the user's Python file and line, read from
// the running frame (set_user_location_provider).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <sstream>

#include "bindings.h"
#include "kiln/capture/compile.h"
#include "kiln/capture/debug.h"

namespace kiln::python {

namespace {

// The folder of the kiln package's Python files: frames there are the package's, not the user's.
std::string& package_dir() {
  static auto* dir = new std::string();
  return *dir;
}

// The innermost Python frame outside the kiln package, on the calling thread.
ir::SourceLoc python_location() {
  if (!Py_IsInitialized() || !PyGILState_GetThisThreadState()) return {};
  const PyGILState_STATE gil = PyGILState_Ensure();
  ir::SourceLoc loc;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const bool ours =
        file && !package_dir().empty() && std::string_view(file).starts_with(package_dir());
    if (file && !ours) {
      loc.file = file;
      loc.line = PyFrame_GetLineNumber(frame);
      if (const char* name = PyUnicode_AsUTF8(code->co_name)) loc.function = name;
    }
    Py_DECREF(code);
    if (file && !ours) break;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (PyErr_Occurred()) PyErr_Clear();
  PyGILState_Release(gil);
  return loc;
}

// The tensors among a call's arguments (and in its lists and tuples), which recompile reasons
// and guards name by position.
detail::ArgumentTensors argument_tensors(const nb::tuple& args) {
  detail::ArgumentTensors out;
  int16_t position = 0;
  for (nb::handle a : args) {
    if (const Tensor* t = as_tensor(a)) {
      out.add(*t, position);
    } else if (PyList_Check(a.ptr()) || PyTuple_Check(a.ptr())) {
      int16_t element = 0;
      for (nb::handle item : nb::borrow<nb::sequence>(a)) {
        if (const Tensor* t = as_tensor(item))
          out.list.push_back(
              {t->impl(), detail::ArgumentTensors::memory_of(*t), position, element});
        ++element;
      }
    }
    ++position;
  }
  return out;
}

// ---- pure mode (CompileOptions::pure, docs/compile.md "Pure mode") ----

// The arguments as pure mode guards them: every tensor (in lists and tuples too), and the bytes
// of every other value with a tag for its type (None, bool, int, float, str), keyword names
// included. Any other object makes the call one pure mode cannot skip.
void add_pure_value(detail::PureArgs& out, nb::handle h, int position) {
  PyObject* o = h.ptr();
  const auto tag = [&](char t) { out.key.push_back(t); };
  if (const Tensor* t = as_tensor(h)) {
    tag('T');
    out.tensors.push_back(t);
  } else if (o == Py_None) {
    tag('n');
  } else if (PyBool_Check(o)) {
    tag(o == Py_True ? '1' : '0');
  } else if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) {
      if (out.unsupported < 0) out.unsupported = position;
      return;
    }
    tag('i');
    out.key.append(reinterpret_cast<const char*>(&v), sizeof v);
  } else if (PyFloat_Check(o)) {
    const double v = PyFloat_AS_DOUBLE(o);
    tag('f');
    out.key.append(reinterpret_cast<const char*>(&v), sizeof v);
  } else if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* text = PyUnicode_AsUTF8AndSize(o, &n);
    if (!text) throw nb::python_error();
    tag('s');
    out.key.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.key.append(text, static_cast<size_t>(n));
  } else if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    tag(PyTuple_CheckExact(o) ? '(' : '[');
    out.key.append(reinterpret_cast<const char*>(&n), sizeof n);
    for (Py_ssize_t k = 0; k < n; ++k)
      add_pure_value(out, PySequence_Fast_GET_ITEM(o, k), position);
  } else if (out.unsupported < 0) {
    out.unsupported = position;
  }
}

detail::PureArgs pure_args(const nb::tuple& args, const nb::dict& kwargs) {
  detail::PureArgs out;
  int position = 0;
  for (nb::handle a : args) add_pure_value(out, a, position++);
  for (auto [name, value] : kwargs) {
    add_pure_value(out, name, position);
    add_pure_value(out, value, position++);
  }
  return out;
}

// How a Python result is rebuilt from the graph's result tensors: a tensor (the next one), None,
// or a tuple or list of such. Stored with the pure plan that produced it.
struct ResultLayout {
  enum class Kind : uint8_t { Tensor, None, Tuple, List } kind = Kind::None;
  std::vector<ResultLayout> items;
};

// False when `result` holds something else (a number, a dict, a named tuple).
bool flatten_result(nb::handle result, ResultLayout& layout, std::vector<const Tensor*>& tensors) {
  PyObject* o = result.ptr();
  if (const Tensor* t = as_tensor(result)) {
    layout.kind = ResultLayout::Kind::Tensor;
    tensors.push_back(t);
    return true;
  }
  if (o == Py_None) {
    layout.kind = ResultLayout::Kind::None;
    return true;
  }
  if (!PyTuple_CheckExact(o) && !PyList_CheckExact(o)) return false;
  layout.kind = PyTuple_CheckExact(o) ? ResultLayout::Kind::Tuple : ResultLayout::Kind::List;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  layout.items.resize(static_cast<size_t>(n));
  for (Py_ssize_t k = 0; k < n; ++k)
    if (!flatten_result(PySequence_Fast_GET_ITEM(o, k), layout.items[k], tensors)) return false;
  return true;
}

nb::object rebuild_result(const ResultLayout& layout, std::vector<Tensor>& tensors, size_t& next) {
  switch (layout.kind) {
    case ResultLayout::Kind::Tensor:
      return tensor_to_python(std::move(tensors[next++]));
    case ResultLayout::Kind::None:
      return nb::none();
    case ResultLayout::Kind::Tuple:
    case ResultLayout::Kind::List: {
      const auto n = static_cast<Py_ssize_t>(layout.items.size());
      const bool tuple = layout.kind == ResultLayout::Kind::Tuple;
      nb::object out = nb::steal(tuple ? PyTuple_New(n) : PyList_New(n));
      for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* item = rebuild_result(layout.items[k], tensors, next).release().ptr();
        if (tuple)
          PyTuple_SET_ITEM(out.ptr(), k, item);
        else
          PyList_SET_ITEM(out.ptr(), k, item);
      }
      return out;
    }
  }
  return nb::none();
}

struct CompiledPyFunction {
  nb::object fn;
  std::shared_ptr<detail::CompiledState> state;
  // A Python backend (backend=callable), owned by `state`'s backend: shown to the garbage
  // collector with fn, as it is one more way back to the module that defined it.
  nb::handle python_backend;
  // The reference FAQ's frozen mode (kiln.compiler.run): cached graphs run, nothing new is
  // compiled. A frozen function is a copy that shares `state`; it holds the compiled function
  // it came from (`origin`) rather than a second borrowed python_backend, so the garbage
  // collector sees the backend once.
  bool frozen = false;
  nb::object origin;

  nb::object call(nb::tuple args, nb::dict kwargs) const {
    if (!detail::is_pure(*state)) return capture(args, kwargs, nullptr, nullptr);
    const detail::PureArgs guarded = pure_args(args, kwargs);
    std::shared_ptr<const detail::PurePlan> verify;
    if (guarded.unsupported < 0) {
      std::vector<Tensor> results;
      std::shared_ptr<const void> layout;
      detail::PureStep step;
      {
        nb::gil_scoped_release unlocked;  // a hit runs the graph: no Python
        step = detail::pure_try_run(*state, guarded, results, verify, &layout);
      }
      if (step == detail::PureStep::Run) {
        size_t next = 0;
        return rebuild_result(*static_cast<const ResultLayout*>(layout.get()), results, next);
      }
    }
    return capture(args, kwargs, &guarded, verify);
  }

  // Runs fn under capture; in pure mode (`guarded`), learns how to skip it next time.
  nb::object capture(const nb::tuple& args, const nb::dict& kwargs, const detail::PureArgs* guarded,
                     const std::shared_ptr<const detail::PurePlan>& verify) const {
    detail::CallScope scope(state, frozen, argument_tensors(args));
    nb::object result = fn(*args, **kwargs);
    {
      // Compiling and running the last graph need no Python.
      nb::gil_scoped_release unlocked;
      scope.finish();
    }
    if (guarded) {
      auto layout = std::make_shared<ResultLayout>();
      std::vector<const Tensor*> tensors;
      const bool rebuildable = flatten_result(result, *layout, tensors);
      scope.learn_pure(*guarded, rebuildable ? &tensors : nullptr, verify, std::move(layout));
    }
    return result;
  }
};

Stance stance_from(const std::string& name) {
  if (name == "default") return Stance::Default;
  if (name == "force_eager") return Stance::ForceEager;
  if (name == "eager_on_recompile") return Stance::EagerOnRecompile;
  if (name == "fail_on_recompile") return Stance::FailOnRecompile;
  throw ValueError("kiln.compiler.set_stance(): unknown stance '" + name +
                   "' (default, force_eager, eager_on_recompile, fail_on_recompile)");
}

// The name logs and reports give a compiled function: its qualified name, or its class's (a
// module), never its repr (which may span lines).
std::string qualname(nb::handle fn) {
  nb::handle named = nb::hasattr(fn, "__qualname__") ? fn : nb::handle(Py_TYPE(fn.ptr()));
  return nb::cast<std::string>(nb::str(named.attr("__qualname__")));
}

// The garbage collector sees the function a compiled function holds: the usual cycle (a
// module's function compiled at module level: fn -> its globals -> the compiled wrapper -> fn)
// is collected, rather than left alive at exit (nanobind's leak report).
int compiled_function_traverse(PyObject* self, visitproc visit, void* arg) {
  const CompiledPyFunction* f = nb::inst_ptr<CompiledPyFunction>(self);
  Py_VISIT(f->fn.ptr());
  if (f->state) Py_VISIT(f->python_backend.ptr());
  Py_VISIT(f->origin.ptr());
  Py_VISIT(Py_TYPE(self));
  return 0;
}
int compiled_function_clear(PyObject* self) {
  CompiledPyFunction* f = nb::inst_ptr<CompiledPyFunction>(self);
  f->fn.reset();
  f->state.reset();  // (with it the backend and the graphs it compiled)
  f->python_backend = nb::handle();
  f->origin.reset();
  return 0;
}
PyType_Slot compiled_function_slots[] = {
    {Py_tp_traverse, reinterpret_cast<void*>(compiled_function_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(compiled_function_clear)},
    {0, nullptr}};

}  // namespace

void bind_compile(nb::module_& m) {
  set_user_location_provider(&python_location);
  m.def("_set_package_dir", [](std::string dir) { package_dir() = std::move(dir); });

  nb::class_<CompiledPyFunction>(m, "_CompiledFunction", nb::type_slots(compiled_function_slots))
      .def("__call__",
           [](const CompiledPyFunction& f, nb::args args, nb::kwargs kwargs) {
             KILN_CHECK(
                 f.fn.is_valid(), Error,
                 "a compiled function was called after Python's garbage collector cleared it");
             return f.call(args, kwargs);
           })
      .def("_frozen", [](nb::handle self) {
        CompiledPyFunction run = nb::cast<const CompiledPyFunction&>(self);
        run.frozen = true;
        run.python_backend = nb::handle();
        run.origin = nb::borrow(self);
        return run;
      });
  m.def(
      "_compile",
      [](nb::object fn, nb::handle backend, bool fullgraph, std::optional<bool> dynamic,
         std::optional<std::string> mode, bool pure, std::optional<int> cache_size_limit) {
        CompileOptions options;
        nb::handle python_backend;
        if (PyUnicode_Check(backend.ptr())) {
          options.backend = nb::cast<std::string>(backend);
        } else if (nb::isinstance<CompileProfiler>(backend)) {
          options.backend = nb::cast<const CompileProfiler&>(backend).backend();
        } else if (PyCallable_Check(backend.ptr())) {
          options.backend = backend_from_python(backend);
          python_backend = backend;
        } else if (!backend.is_none()) {
          throw nb::type_error(
              "kiln.compile(): backend must be a name, a callable or a CompileProfiler");
        }
        options.pure = pure;
        options.fullgraph = fullgraph;
        options.dynamic = dynamic;
        options.mode = mode.value_or("");
        options.name = qualname(fn);
        options.cache_size_limit = cache_size_limit;
        auto state =
            detail::make_compiled_state(std::move(options), std::source_location::current());
        return CompiledPyFunction{std::move(fn), std::move(state), python_backend};
      },
      nb::arg("fn"), nb::arg("backend").none() = nb::none(), nb::arg("fullgraph") = false,
      nb::arg("dynamic").none() = nb::none(), nb::arg("mode").none() = nb::none(),
      nb::arg("pure") = false, nb::arg("cache_size_limit").none() = nb::none());

  using Stats = CompileProfiler::FunctionStats;
  nb::class_<Stats>(m, "CompileStats", "What a CompileProfiler saw of one compiled function.")
      .def_ro("graphs", &Stats::graphs)
      .def_ro("graph_breaks", &Stats::graph_breaks)
      .def_ro("recompile_reasons", &Stats::recompile_reasons)
      .def_ro("ops_per_graph", &Stats::ops_per_graph)
      .def_ro("kernels_per_graph", &Stats::kernels_per_graph)
      .def_ro("extern_calls_per_graph", &Stats::extern_calls_per_graph)
      .def("__repr__", [](const Stats& s) {
        return "CompileStats(graphs=" + std::to_string(s.graphs) +
               ", graph_breaks=" + std::to_string(s.graph_breaks) +
               ", recompiles=" + std::to_string(s.recompile_reasons.size()) + ")";
      });
  nb::class_<CompileProfiler>(
      m, "CompileProfiler",
      "Records, while alive, every compiled function's graphs, breaks and recompiles "
      "(torch._dynamo.utils.CompileProfiler); kiln.compile(fn, backend=prof) also works.")
      .def(nb::init<>())
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__",
           [](CompileProfiler& p, nb::args) {  // (exception type, value, traceback)
             p.stop();
             return false;
           })
      .def("stop", &CompileProfiler::stop,
           "Stops recording; report() and stats() keep what was recorded.")
      .def("report", &CompileProfiler::report)
      .def("stats", &CompileProfiler::stats, "Per compiled function's name: its CompileStats.");

  nb::class_<GraphBreak>(m, "GraphBreak", "One graph break: why, and where in the user's code.")
      .def_ro("reason", &GraphBreak::reason)
      .def_prop_ro("filename", [](const GraphBreak& b) { return b.loc.file; })
      .def_prop_ro("lineno", [](const GraphBreak& b) { return b.loc.line; })
      .def_prop_ro("function", [](const GraphBreak& b) { return b.loc.function; })
      .def("__repr__", [](const GraphBreak& b) {
        return "GraphBreak(reason=" + nb::cast<std::string>(nb::repr(nb::str(b.reason.c_str()))) +
               ", " + b.loc.str() + ")";
      });
  nb::class_<ExplainOutput>(m, "ExplainOutput", "What kiln.explain saw (torch._dynamo.explain).")
      .def_ro("graph_count", &ExplainOutput::graph_count)
      .def_ro("graph_break_count", &ExplainOutput::graph_break_count)
      .def_ro("op_count", &ExplainOutput::op_count)
      .def_ro("break_reasons", &ExplainOutput::break_reasons)
      .def_ro("ops_per_graph", &ExplainOutput::ops_per_graph)
      .def_ro("compile_seconds", &ExplainOutput::compile_seconds)
      .def_ro("kernels_per_graph", &ExplainOutput::kernels_per_graph)
      .def_ro("extern_calls_per_graph", &ExplainOutput::extern_calls_per_graph)
      .def_ro("guards", &ExplainOutput::guards)
      .def_prop_ro("graphs",
                   [](const ExplainOutput& e) {
                     std::vector<std::string> out;
                     for (const ir::Graph& g : e.graphs) {
                       std::ostringstream os;
                       os << g;
                       out.push_back(os.str());
                     }
                     return out;
                   })
      .def("__str__", &ExplainOutput::str)
      .def("__repr__", &ExplainOutput::str);
  m.def(
      "_explain",
      [](nb::object fn, nb::tuple args, nb::dict kwargs) {
        ExplainOutput out;
        detail::ExplainSession session(out);
        CompileOptions options;
        options.backend = std::string("eager");
        options.name = "explain";
        CompiledPyFunction compiled{
            fn, detail::make_compiled_state(std::move(options), std::source_location::current())};
        session.watch(compiled.state);
        {
          StanceGuard stance(Stance::Default);
          compiled.call(args, kwargs);
        }
        session.finish();
        return out;
      },
      nb::arg("fn"), nb::arg("args"), nb::arg("kwargs"));

  m.def(
      "graph_break", [] { graph_break(); },
      "A graph break here: the ops captured so far run as one graph; capture resumes after.");
  m.def("is_compiling", &is_compiling,
        "True under kiln.compile's capture and while a backend compiles or runs a graph.");
  m.def("is_dynamo_compiling", &is_dynamo_compiling,
        "True only under kiln.compile's capture (torch.compiler.is_dynamo_compiling).");
  m.def("compile_times", &compile_times,
        "Seconds spent compiling, per phase, since start-up or kiln.compiler.reset().");
  m.def("compile_times_str", &compile_times_str, "compile_times() as a table.");
  m.def("set_debug_dir", &set_debug_dir, nb::arg("path"),
        "Dumps what every compiled function does into path/run-<time>-<pid>/ (KILN_DEBUG_DIR); "
        "an empty path turns dumping off.");
  m.def("debug_run_dir", &debug_run_dir, "The folder this run is dumped to; '' when off.");
  nb::class_<CompileConfig>(m, "CompileConfig",
                            "The process's compile settings (torch._dynamo.config).")
      .def_rw("cache_size_limit", &CompileConfig::cache_size_limit,
              "Compiled entries kept per graph segment; past it the function runs eagerly.")
      .def_rw("compile_timeout", &CompileConfig::compile_timeout,
              "Seconds one build of generated C++ may take; 0: no limit.")
      .def_rw("strict_cache", &CompileConfig::strict_cache,
              "True: an unusable cache folder raises instead of warning.")
      .def_rw("dynamic", &CompileConfig::dynamic,
              "The dynamic= of every function compiled without one (KILN_DYNAMIC_SHAPES): "
              "False static sizes, True dynamic from the first call, None automatic.");
  m.def("compile_config", &compile_config, nb::rv_policy::reference);
  m.def(
      "_call_disabled",
      [](nb::object fn, bool recursive, nb::tuple args, nb::dict kwargs) {
        detail::DisableScope scope("a function wrapped by kiln.compiler.disable", recursive,
                                   std::source_location::current());
        return fn(*args, **kwargs);
      },
      nb::arg("fn"), nb::arg("recursive"), nb::arg("args"), nb::arg("kwargs"));
  m.def(
      "set_stance", [](const std::string& name) { set_stance(stance_from(name)); },
      nb::arg("stance"));
  m.def("reset", &reset, "Drops every compiled function's cached graphs (torch._dynamo.reset).");
  m.def("list_backends", &list_backends);
  m.def(
      "disallow_in_graph", [](const std::string& op) { disallow_in_graph(op); },
      nb::arg("op_name"));
  m.def(
      "allow_in_graph", [](const std::string& op) { allow_in_graph(op); }, nb::arg("op_name"));
  m.def(
      "set_logs", [](const std::string& spec) { set_logs(spec); }, nb::arg("spec"));
  m.def("mark_dynamic", &mark_dynamic, nb::arg("t"), nb::arg("dim"));
  m.def("maybe_mark_dynamic", &maybe_mark_dynamic, nb::arg("t"), nb::arg("dim"));
  m.def("mark_static", &mark_static, nb::arg("t"), nb::arg("dim"));
  m.def("mark_unbacked", &mark_unbacked, nb::arg("t"), nb::arg("dim"));
}

}  // namespace kiln::python
