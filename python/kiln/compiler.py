"""kiln.compile and its controls (torch.compile, torch.compiler.*, torch._dynamo.explain).

Capture is lazy tracing, as in C++ (docs/compile.md): the function runs, its tensor ops are
recorded instead of computed, and a graph ends at a sync point (``.item()``, ``print(t)``, a
disallowed op, ``graph_break()``) or at the return. The Python code between ops runs on every
call.
"""
import functools
import weakref

from numpy import ndarray as _ndarray

from . import _C
from ._C import graph_break, is_compiling, set_stance, reset, list_backends  # noqa: F401
from ._C import mark_dynamic, maybe_mark_dynamic, mark_static, mark_unbacked  # noqa: F401
from ._C import set_logs, CompileProfiler  # noqa: F401
from ._C import is_dynamo_compiling, compile_times, compile_times_str  # noqa: F401
from ._C import set_debug_dir, debug_run_dir  # noqa: F401


def __getattr__(name):
    # ``kiln.compiler.config``: the process's compile settings (torch._dynamo.config):
    # ``cache_size_limit`` (8: compiled entries per graph segment before a function runs
    # eagerly), ``compile_timeout`` (seconds one build of generated C++ may take),
    # ``strict_cache``, ``dynamic`` (the dynamic= of every function compiled without one;
    # KILN_DYNAMIC_SHAPES). Read when a function is compiled. Looked up on use, so that a bad
    # KILN_* variable is an error at that use (or the first compile), not at ``import kiln``.
    if name == "config":
        return _C.compile_config()
    raise AttributeError(f"module 'kiln.compiler' has no attribute '{name}'")


def compile(fn=None, *, backend="inductor", fullgraph=False, dynamic=None, mode=None,
            pure=False, cache_size_limit=None):
    """Compiles ``fn`` (a function or a Module); usable as ``@kiln.compile`` and
    ``@kiln.compile(backend="eager")``."""
    if fn is None:
        return functools.partial(compile, backend=backend, fullgraph=fullgraph,
                                 dynamic=dynamic, mode=mode, pure=pure,
                                 cache_size_limit=cache_size_limit)
    compiled = _C._compile(fn, backend, fullgraph, dynamic, mode, pure, cache_size_limit)
    from .nn import Module
    if isinstance(fn, Module):
        return _CompiledModule(fn, compiled)

    # NumPy arrays in (the FAQ's "Does NumPy work with torch.compile?"): a second compiled
    # function, one per placement of the arrays among the arguments, takes them as tensors over
    # the same memory (what pure mode's guards know) and gives fn kiln.numpy arrays; its tensor
    # results come back as NumPy arrays.
    numpy_compiled = {}

    def call_with_numpy(args, kwargs, frozen):
        from . import numpy as knp
        converted = [knp._numpy_to_tensors(a) for a in args]
        named = {k: knp._numpy_to_tensors(v) for k, v in kwargs.items()}
        marks = (tuple(m for _, m in converted), tuple((k, m) for k, (_, m) in named.items()))
        inner = numpy_compiled.get(marks)
        if inner is None:
            arg_marks, kwarg_marks = marks[0], dict(marks[1])

            def on_arrays(*targs, **tkwargs):
                arrays = [knp._as_arrays(a, m) for a, m in zip(targs, arg_marks)]
                named_arrays = {k: knp._as_arrays(v, kwarg_marks[k]) for k, v in tkwargs.items()}
                return knp._arrays_to_tensors(fn(*arrays, **named_arrays))
            functools.update_wrapper(on_arrays, fn)
            inner = numpy_compiled[marks] = _C._compile(on_arrays, backend, fullgraph, dynamic,
                                                        mode, pure, cache_size_limit)
        if frozen:
            inner = inner._frozen()
        result = inner(*(a for a, _ in converted), **{k: v for k, (v, _) in named.items()})
        return knp._tensors_to_numpy(result)

    def make_wrapper(tensor_fn, frozen):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if any(_holds_numpy(a) for a in args) or any(_holds_numpy(v)
                                                         for v in kwargs.values()):
                return call_with_numpy(args, kwargs, frozen)
            return tensor_fn(*args, **kwargs)
        wrapper._kiln_compiled = compiled
        # kiln.compiler.run: the same wrapper over the frozen forms (NumPy's included).
        wrapper._kiln_frozen = lambda: make_wrapper(compiled._frozen(), True)
        return wrapper
    return make_wrapper(compiled, False)


def _holds_numpy(value):
    if type(value) is _ndarray:
        return True
    return isinstance(value, (tuple, list)) and any(_holds_numpy(v) for v in value)


class _CompiledModule:
    """A compiled module (torch's OptimizedModule): calls run compiled; every other attribute is
    the original module's (``_orig_mod``)."""

    def __init__(self, module, compiled):
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_compiled", compiled)

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"

    def _kiln_frozen(self):  # (kiln.compiler.run)
        return self._compiled._frozen()


def explain(fn, *args, **kwargs):
    """``explain(fn)(*args)`` (or ``explain(fn, *args)``) runs fn once under capture and returns
    what it saw: graph_count, graph_break_count, break_reasons, ops_per_graph, guards, and what
    inductor would make of each graph (kernels_per_graph, extern_calls_per_graph); printing it
    gives the FAQ's report."""
    def run(*args, **kwargs):
        return _C._explain(fn, args, kwargs)
    return run(*args, **kwargs) if args or kwargs else run


def run(fn):
    """The frozen form of a function from kiln.compile (torch._dynamo.run): its cached graphs
    run, nothing new is compiled — a call no cached graph fits runs eagerly."""
    make_frozen = getattr(fn, "_kiln_frozen", None)  # (kiln.compile's wrappers and modules)
    if make_frozen is None:
        raise TypeError(f"kiln.compiler.run: expected what kiln.compile returned, got {fn!r}")
    return make_frozen()


def disable(fn=None, *, recursive=True):
    """Runs ``fn`` eagerly: a call under capture ends the graph (a graph break) first.
    recursive=False: fn's own ops run eagerly, but compiled functions it calls still compile."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _C._call_disabled(fn, recursive, args, kwargs)
    return wrapper


def _is_kiln_op(op):
    return isinstance(op, str) or type(op).__name__ == "Function" and hasattr(op, "schema")


def disallow_in_graph(op):
    """The op (a kiln op function or its name) always breaks the graph and runs eagerly."""
    _C.disallow_in_graph(op if isinstance(op, str) else op.__name__)
    return op


_allowed_count = 0
# The wrapper made for each Python function: allow_in_graph called again on the same function
# — inside a compiled function, on every call — records the same op, so the graph and its cache
# entry stay the same. (The op registry keeps the function alive, as it keeps every op.)
_allowed = weakref.WeakKeyDictionary()


def allow_in_graph(fn):
    """For a kiln op (or its name): undoes disallow_in_graph. For a Python function: returns a
    function recorded as ONE node of a captured graph (torch.compiler.allow_in_graph), its
    output shapes found by running it on metadata-only tensors, its kernel calling it. It must
    take tensors, numbers, or lists of tensors or numbers, return a tensor or a tuple of them,
    use no tensor it is not given, and be deterministic and free of side effects."""
    if _is_kiln_op(fn):
        _C.allow_in_graph(fn if isinstance(fn, str) else fn.__name__)
        return fn
    try:
        return _allowed[fn]
    except (KeyError, TypeError):  # (TypeError: fn cannot be weakly referenced)
        pass
    global _allowed_count
    _allowed_count += 1
    name = f"{getattr(fn, '__qualname__', 'fn')}#{_allowed_count}"
    allowed = _C._allow_python_function(fn, name)

    @functools.wraps(fn)
    def wrapper(*args):
        return allowed(*args)
    try:
        _allowed[fn] = wrapper
    except TypeError:
        pass
    return wrapper
