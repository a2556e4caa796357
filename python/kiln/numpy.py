"""kiln.numpy: NumPy's API on Kiln tensors, traced by kiln.compile like any op.

The reference FAQ's "Does NumPy work with torch.compile?" for Kiln: write the function with
``import kiln.numpy as np``; compiled, it takes NumPy arrays (shared, not copied) and returns
NumPy arrays::

    import kiln, kiln.numpy as knp

    @kiln.compile
    def numpy_fn(X, Y):
        return knp.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))

    Z = numpy_fn(numpy.random.randn(1024, 64), numpy.random.randn(1024, 64))  # an ndarray

Semantics are NumPy 2's: NEP 50 promotion (Python scalars are weak: float32 * 2.0 stays
float32, int64 + 1.5 is float64; creation defaults to float64; int / int is float64), axis= as
an int or a tuple, keepdims=, broadcasting, None indexing. As the FAQ lists for torch.compile:
NumPy scalars are 0-d arrays, and np.flip and slicing with a negative step return copies. The
dtypes are bool, int32, int64, float32, float64; anything else — another dtype, out=, an
unsupported function — raises kiln.NotImplementedError naming the function.
"""
import builtins
import functools
import inspect

import numpy as _np

from . import _C

# Kiln's functions by name (the op and function registries' kiln.<name>).
_k = type("KilnFunctions", (), {n: staticmethod(f) for n, f in _C.functions.top.items()})

_TO_KILN = {
    _np.dtype(_np.bool_): _C.bool, _np.dtype(_np.int32): _C.int32, _np.dtype(_np.int64): _C.int64,
    _np.dtype(_np.float32): _C.float32, _np.dtype(_np.float64): _C.float64,
}
_TO_NUMPY = {v: k for k, v in _TO_KILN.items()}

bool_, int32, int64, float32, float64 = _np.bool_, _np.int32, _np.int64, _np.float32, _np.float64
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None


def _unsupported(what):
    raise _C.NotImplementedError(f"kiln.numpy.{what} is not implemented")


def _kiln_dtype(dtype, fn):
    dt = _np.dtype(dtype)
    if dt not in _TO_KILN:
        raise _C.NotImplementedError(
            f"kiln.numpy.{fn}: dtype {dt} is not supported (bool, int32, int64, float32, float64)")
    return _TO_KILN[dt]


class ndarray:
    """A NumPy-like array over a Kiln tensor (``.tensor`` is that tensor, shared)."""

    __slots__ = ("_t",)
    __array_priority__ = 100  # numpy defers to our operators

    def __init__(self, tensor):
        self._t = tensor

    @property
    def __kiln_tensor__(self):
        return self._t

    tensor = __kiln_tensor__

    # ---- metadata ----
    shape = property(lambda self: tuple(self._t.shape))
    ndim = property(lambda self: self._t.ndim)
    size = property(lambda self: self._t.numel())
    dtype = property(lambda self: _TO_NUMPY[self._t.dtype])
    itemsize = property(lambda self: self._t.element_size())
    nbytes = property(lambda self: self._t.numel() * self._t.element_size())
    T = property(lambda self: transpose(self))

    def __len__(self):
        return len(self._t)

    def __array__(self, dtype=None, copy=None):
        a = self._t.detach().numpy()
        return a if dtype is None else a.astype(dtype)

    # NumPy's own functions and ufuncs called on these arrays (the FAQ's `np.sum(...)` in a
    # compiled function written with `import numpy as np`): kiln.numpy's function of the same
    # name when it has one and takes the arguments, traced like any op; otherwise NumPy runs the
    # call on the data — under kiln.compile a graph break, as torch.compile falls back to NumPy.
    def __array_function__(self, func, types, args, kwargs):
        if not builtins.all(issubclass(t, (ndarray, _np.ndarray)) for t in types):
            return NotImplemented  # another library's arrays: let it (or NumPy) decide
        return _dispatch(func, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__":  # ufunc methods (np.add.reduce, ...) are NumPy's
            return _numpy_runs(getattr(ufunc, method), inputs, kwargs)
        return _dispatch(ufunc, inputs, kwargs)

    def __repr__(self):
        return repr(_np.asarray(self))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def tolist(self):
        return self._t.tolist()

    def item(self):
        return self._t.item()

    def __bool__(self):
        return builtins.bool(self._t)

    def __float__(self):
        return float(self._t)

    def __int__(self):
        return int(self._t)

    def __index__(self):
        return self._t.__index__()

    # ---- indexing ----
    def __getitem__(self, key):
        return _index(self._t, key)

    def __setitem__(self, key, value):
        if isinstance(key, tuple) and builtins.any(isinstance(k, slice) and k.step is not None
                                                   and k.step < 0 for k in key):
            _unsupported("ndarray.__setitem__ with a negative step")
        value = _as_tensor_or_scalar(value)
        self._t[_key(key)] = value.astype(self.dtype)._t if isinstance(value, ndarray) else value

    # ---- methods ----
    def astype(self, dtype, copy=True):
        t = self._t.to(_kiln_dtype(dtype, "astype"))
        return ndarray(t.clone() if copy and t is self._t else t)

    def copy(self):
        return ndarray(self._t.clone())

    def reshape(self, *shape, order="C"):
        return reshape(self, shape[0] if len(shape) == 1 else shape, order=order)

    def transpose(self, *axes):
        return transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def flatten(self):
        return ndarray(self._t.reshape(-1).clone())

    def ravel(self):
        return ndarray(self._t.reshape(-1))

    def squeeze(self, axis=None):
        return squeeze(self, axis)

    def sum(self, axis=None, dtype=None, keepdims=False):
        return sum(self, axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis=None, dtype=None, keepdims=False):
        return mean(self, axis, dtype=dtype, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return amax(self, axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return amin(self, axis, keepdims=keepdims)

    def argmax(self, axis=None):
        return argmax(self, axis)

    def argmin(self, axis=None):
        return argmin(self, axis)

    def prod(self, axis=None, dtype=None, keepdims=False):
        return prod(self, axis, dtype=dtype, keepdims=keepdims)

    def std(self, axis=None, ddof=0, keepdims=False):
        return std(self, axis, ddof=ddof, keepdims=keepdims)

    def var(self, axis=None, ddof=0, keepdims=False):
        return var(self, axis, ddof=ddof, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return all(self, axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        return any(self, axis, keepdims=keepdims)

    def clip(self, a_min=None, a_max=None):
        return clip(self, a_min, a_max)

    def dot(self, other):
        return dot(self, other)


def _as_tensor_or_scalar(x):
    """A Python number (weak, NEP 50) stays as it is; everything else becomes an ndarray."""
    if isinstance(x, (builtins.bool, builtins.int, builtins.float)):
        return x
    return asarray(x)


def _key(key):
    """An index for a Kiln tensor: arrays as tensors; a negative step is done by the caller."""
    if isinstance(key, tuple):
        return tuple(_key(k) for k in key)
    if isinstance(key, ndarray):
        return key._t
    if isinstance(key, _np.ndarray):
        return asarray(key)._t
    return key


def _index(t, key):
    """t[key] with NumPy's meaning; a slice with a negative step selects its elements in order
    (a copy, as the FAQ lists for torch.compile)."""
    items = list(key) if isinstance(key, tuple) else [key]
    consumed = builtins.sum(1 for k in items if k is not None and k is not Ellipsis)
    plain, reversed_dims = [], []
    dim = 0  # the dim of the result the next item lands on
    source = 0  # the dim of t the next item indexes
    for k in items:
        if k is Ellipsis:
            skip = t.ndim - consumed
            dim, source = dim + skip, source + skip
            plain.append(k)
        elif k is None:
            dim += 1
            plain.append(k)
        elif isinstance(k, slice):
            if k.step is not None and k.step < 0:
                reversed_dims.append((dim, list(range(*k.indices(t.shape[source])))))
                k = slice(None)
            plain.append(k)
            dim, source = dim + 1, source + 1
        else:
            plain.append(_key(k))
            source += 1
            if not isinstance(k, builtins.int):
                if reversed_dims:
                    _unsupported("indexing with a negative step and an index array together")
                dim += 1
    result = t[tuple(plain)]
    for d, positions in reversed_dims:
        result = _k.index_select(result, d, _C.tensor(positions, dtype=_C.int64))
    return ndarray(result)


def _result_dtype(name, *operands):
    """What NumPy 2 (NEP 50) gives for ufunc `name` on these operands: decided by NumPy itself on
    0-d samples of their dtypes (Python numbers stay weak)."""
    key = (name,) + tuple(o.dtype if isinstance(o, ndarray) else type(o) for o in operands)
    dt = _dtype_cache.get(key)
    if dt is None:
        samples = [_np.ones((), o.dtype) if isinstance(o, ndarray) else type(o)(1)
                   for o in operands]
        with _np.errstate(all="ignore"):
            dt = _np.asarray(getattr(_np, name)(*samples)).dtype
        _dtype_cache[key] = dt
    return dt


_dtype_cache = {}


def _ufunc(name, kiln_fn, compare=False):
    def fn(*args, out=None, dtype=None, where=True, **kwargs):
        if out is not None or where is not True or kwargs:
            _unsupported(f"{name} with out=, where= or {sorted(kwargs)}")
        operands = [_as_tensor_or_scalar(a) for a in args]
        result = _result_dtype(name, *operands) if dtype is None else _np.dtype(dtype)
        compute = (_np.result_type(*[o.dtype if isinstance(o, ndarray) else o for o in operands])
                   if compare else result)
        kd = _kiln_dtype(compute, name)
        ts = [o._t.to(kd) if isinstance(o, ndarray) else o for o in operands]
        if not builtins.any(isinstance(t, _C.Tensor) for t in ts):
            ts[0] = _C.tensor(ts[0], dtype=kd)
        r = kiln_fn(*ts)
        return ndarray(r.to(_kiln_dtype(result, name)))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"numpy.{name} on Kiln tensors (NumPy 2 dtype rules)."
    return fn


add = _ufunc("add", lambda a, b: a + b)
subtract = _ufunc("subtract", lambda a, b: a - b)
multiply = _ufunc("multiply", lambda a, b: a * b)
divide = true_divide = _ufunc("true_divide", lambda a, b: a / b)
floor_divide = _ufunc("floor_divide", lambda a, b: a // b)
remainder = mod = _ufunc("remainder", lambda a, b: a % b)
power = _ufunc("power", lambda a, b: a ** b)
maximum = _ufunc("maximum", lambda a, b: _k.maximum(*_tensors(a, b)))
minimum = _ufunc("minimum", lambda a, b: _k.minimum(*_tensors(a, b)))
arctan2 = _ufunc("arctan2", lambda a, b: _k.atan2(*_tensors(a, b)))
equal = _ufunc("equal", lambda a, b: a == b, compare=True)
not_equal = _ufunc("not_equal", lambda a, b: a != b, compare=True)
less = _ufunc("less", lambda a, b: a < b, compare=True)
less_equal = _ufunc("less_equal", lambda a, b: a <= b, compare=True)
greater = _ufunc("greater", lambda a, b: a > b, compare=True)
greater_equal = _ufunc("greater_equal", lambda a, b: a >= b, compare=True)
logical_and = _ufunc("logical_and", lambda a, b: _k.logical_and(*_tensors(a, b)), compare=True)
logical_or = _ufunc("logical_or", lambda a, b: _k.logical_or(*_tensors(a, b)), compare=True)
logical_xor = _ufunc("logical_xor", lambda a, b: _k.logical_xor(*_tensors(a, b)), compare=True)
negative = _ufunc("negative", lambda a: -a)
positive = _ufunc("positive", lambda a: a)
absolute = abs = _ufunc("absolute", lambda a: _k.abs(a))
sign = _ufunc("sign", lambda a: _k.sign(a))
square = _ufunc("square", lambda a: a * a)
reciprocal = _ufunc("reciprocal", lambda a: _k.reciprocal(a))
logical_not = _ufunc("logical_not", lambda a: _k.logical_not(a))
isnan = _ufunc("isnan", lambda a: _k.isnan(a))
isinf = _ufunc("isinf", lambda a: _k.isinf(a))
isfinite = _ufunc("isfinite", lambda a: _k.logical_not(_k.logical_or(_k.isnan(a), _k.isinf(a))))
for _name, _fn in [("exp", _k.exp), ("exp2", _k.exp2), ("expm1", _k.expm1), ("log", _k.log),
                   ("log2", _k.log2), ("log1p", _k.log1p), ("sqrt", _k.sqrt), ("sin", _k.sin),
                   ("cos", _k.cos), ("tan", _k.tan), ("tanh", _k.tanh), ("floor", _k.floor),
                   ("ceil", _k.ceil), ("trunc", _k.trunc), ("rint", _k.round)]:
    globals()[_name] = _ufunc(_name, _fn)
round = around = rint  # noqa: A001  (half to even, as NumPy)


def _tensors(*xs):
    """Operands as tensors (a Python number as a wrapped scalar, via a kiln op's argument)."""
    first = next(x for x in xs if isinstance(x, _C.Tensor))
    return [x if isinstance(x, _C.Tensor) else _C.full_like(first, x) for x in xs]


# operators
for _op, _fn in [("add", add), ("sub", subtract), ("mul", multiply), ("truediv", true_divide),
                 ("floordiv", floor_divide), ("mod", remainder), ("pow", power)]:
    setattr(ndarray, f"__{_op}__", lambda self, other, f=_fn: f(self, other))
    setattr(ndarray, f"__r{_op}__", lambda self, other, f=_fn: f(other, self))
for _op, _fn in [("eq", equal), ("ne", not_equal), ("lt", less), ("le", less_equal),
                 ("gt", greater), ("ge", greater_equal), ("and", logical_and),
                 ("or", logical_or), ("xor", logical_xor)]:
    setattr(ndarray, f"__{_op}__", lambda self, other, f=_fn: f(self, other))
ndarray.__matmul__ = lambda self, other: matmul(self, other)
ndarray.__rmatmul__ = lambda self, other: matmul(other, self)
ndarray.__neg__ = lambda self: negative(self)
ndarray.__pos__ = lambda self: positive(self)
ndarray.__abs__ = lambda self: absolute(self)
ndarray.__invert__ = lambda self: logical_not(self)
ndarray.__hash__ = None


# ---- creation (float64 by default, as NumPy) ----
def asarray(a, dtype=None):
    if isinstance(a, ndarray):
        return a if dtype is None else a.astype(dtype, copy=False)
    if isinstance(a, _C.Tensor):
        return ndarray(a if dtype is None else a.to(_kiln_dtype(dtype, "asarray")))
    if isinstance(a, _np.ndarray):
        if a.dtype not in _TO_KILN:
            _kiln_dtype(a.dtype, "asarray")
        if builtins.any(s < 0 for s in a.strides):
            a = a.copy()
        t = _C.from_numpy(a) if a.flags.writeable else _C.from_numpy(a.copy())
        return ndarray(t if dtype is None else t.to(_kiln_dtype(dtype, "asarray")))
    return array(a, dtype)


def array(a, dtype=None, copy=True):
    if isinstance(a, (ndarray, _C.Tensor)):
        t = asarray(a, dtype)._t
        return ndarray(t.clone() if copy else t)
    host = _np.asarray(a, dtype=dtype)  # NumPy's own inference (float64 for Python floats)
    kd = _kiln_dtype(host.dtype, "array")
    return ndarray(_C.tensor(host, dtype=kd) if host.ndim else _C.tensor(host.item(), dtype=kd))


def _shape(shape):
    return (shape,) if isinstance(shape, builtins.int) else tuple(shape)


def zeros(shape, dtype=float):
    return ndarray(_C.zeros(_shape(shape), dtype=_kiln_dtype(dtype, "zeros")))


def ones(shape, dtype=float):
    return ndarray(_C.ones(_shape(shape), dtype=_kiln_dtype(dtype, "ones")))


def empty(shape, dtype=float):
    return ndarray(_C.empty(_shape(shape), dtype=_kiln_dtype(dtype, "empty")))


def full(shape, fill_value, dtype=None):
    dtype = _np.asarray(fill_value).dtype if dtype is None else dtype
    return ndarray(_C.full(_shape(shape), fill_value, dtype=_kiln_dtype(dtype, "full")))


def zeros_like(a, dtype=None):
    return zeros(asarray(a).shape, asarray(a).dtype if dtype is None else dtype)


def ones_like(a, dtype=None):
    return ones(asarray(a).shape, asarray(a).dtype if dtype is None else dtype)


def empty_like(a, dtype=None):
    return empty(asarray(a).shape, asarray(a).dtype if dtype is None else dtype)


def full_like(a, fill_value, dtype=None):
    return full(asarray(a).shape, fill_value, asarray(a).dtype if dtype is None else dtype)


def arange(start, stop=None, step=1, dtype=None):
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = _np.arange(start, start + step, step).dtype  # NumPy's inference (int64/float64)
    return ndarray(_C.arange(start, stop, step, dtype=_kiln_dtype(dtype, "arange")))


def linspace(start, stop, num=50, dtype=None):
    return ndarray(_C.linspace(start, stop, num, dtype=_kiln_dtype(dtype or float, "linspace")))


def eye(N, M=None, dtype=float):
    return ndarray(_C.eye(N, M, dtype=_kiln_dtype(dtype, "eye")))


identity = eye


# ---- reductions (axis: an int, a tuple, or None for all) ----
def _axes(axis):
    return [] if axis is None else [axis] if isinstance(axis, builtins.int) else list(axis)


def _reduction(name, kiln_fn, sample):
    def fn(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        if out is not None or kwargs:
            _unsupported(f"{name} with out= or {sorted(kwargs)}")
        a = asarray(a)
        result = _np.dtype(dtype) if dtype is not None else sample(_np.zeros((1,), a.dtype)).dtype
        t = a._t if result.kind not in "f" or a.dtype.kind == "f" else a._t.to(_TO_KILN[result])
        return ndarray(kiln_fn(t, _axes(axis), keepdims).to(_kiln_dtype(result, name)))
    fn.__name__ = fn.__qualname__ = name
    return fn


sum = _reduction("sum", lambda t, ax, k: _k.sum(t, ax, k, dtype=_C.int64) if not
                 t.is_floating_point() else _k.sum(t, ax, k), _np.sum)  # noqa: A001
prod = _reduction("prod", lambda t, ax, k: _k.prod(t, ax, k, dtype=_C.int64) if not
                  t.is_floating_point() else _k.prod(t, ax, k), _np.prod)
mean = _reduction("mean", lambda t, ax, k: _k.mean(t.to(_C.float64) if not t.is_floating_point()
                                                   else t, ax, k), _np.mean)
amax = max = _reduction("max", lambda t, ax, k: _k.amax(t, ax, k), _np.max)  # noqa: A001
amin = min = _reduction("min", lambda t, ax, k: _k.amin(t, ax, k), _np.min)  # noqa: A001
all = _reduction("all", lambda t, ax, k: _k.all(t, ax, k), _np.all)  # noqa: A001
any = _reduction("any", lambda t, ax, k: _k.any(t, ax, k), _np.any)  # noqa: A001


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    if out is not None:
        _unsupported("var with out=")
    t = asarray(a)._t
    t = t if t.is_floating_point() else t.to(_C.float64)
    return ndarray(_k.var(t, _axes(axis), keepdims, correction=ddof))


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    return sqrt(var(a, axis, dtype, out, ddof, keepdims))


def argmax(a, axis=None, keepdims=False):
    return ndarray(_k.argmax(asarray(a)._t, axis, keepdims))


def argmin(a, axis=None, keepdims=False):
    return ndarray(_k.argmin(asarray(a)._t, axis, keepdims))


def _scan(name, kiln_fn, sample):
    def fn(a, axis=None, dtype=None):
        t = asarray(a)._t
        if axis is None:
            t, axis = t.reshape(-1), 0
        result = sample(_np.zeros((1,), _TO_NUMPY[t.dtype])).dtype if dtype is None else dtype
        return ndarray(kiln_fn(t, axis, dtype=_kiln_dtype(result, name)))
    fn.__name__ = fn.__qualname__ = name
    return fn


cumsum = _scan("cumsum", _k.cumsum, _np.cumsum)
cumprod = _scan("cumprod", _k.cumprod, _np.cumprod)


# ---- shapes, joins, selection ----
def reshape(a, shape, order="C"):
    if order != "C":
        _unsupported(f"reshape(order={order!r})")
    return ndarray(asarray(a)._t.reshape(_shape(shape)))


def transpose(a, axes=None):
    t = asarray(a)._t
    return ndarray(t.permute(tuple(reversed(range(t.ndim))) if axes is None else tuple(axes)))


def swapaxes(a, axis1, axis2):
    return ndarray(asarray(a)._t.transpose(axis1, axis2))


def expand_dims(a, axis):
    t = asarray(a)._t
    for ax in sorted(_axes(axis)):
        t = t.unsqueeze(ax)
    return ndarray(t)


def squeeze(a, axis=None):
    return ndarray(_k.squeeze(asarray(a)._t, _axes(axis)))


def concatenate(arrays, axis=0):
    arrays = [asarray(x) for x in arrays]
    dt = _np.result_type(*[x.dtype for x in arrays])
    return ndarray(_k.cat([x._t.to(_kiln_dtype(dt, "concatenate")) for x in arrays], axis))


def stack(arrays, axis=0):
    arrays = [asarray(x) for x in arrays]
    dt = _np.result_type(*[x.dtype for x in arrays])
    return ndarray(_k.stack([x._t.to(_kiln_dtype(dt, "stack")) for x in arrays], axis))


def vstack(arrays):
    return concatenate([x if asarray(x).ndim > 1 else expand_dims(x, 0) for x in arrays], 0)


def hstack(arrays):
    arrays = [asarray(x) for x in arrays]
    return concatenate(arrays, 0 if arrays[0].ndim == 1 else 1)


def flip(a, axis=None):
    t = asarray(a)._t
    return ndarray(_k.flip(t, list(range(t.ndim)) if axis is None else _axes(axis)))


def where(condition, x=None, y=None):
    if x is None and y is None:
        _unsupported("where(condition) (the indices of non-zeros)")
    x, y = _as_tensor_or_scalar(x), _as_tensor_or_scalar(y)
    dt = _np.result_type(*[v.dtype if isinstance(v, ndarray) else v for v in (x, y)])
    kd = _kiln_dtype(dt, "where")
    tx = x._t.to(kd) if isinstance(x, ndarray) else x
    ty = y._t.to(kd) if isinstance(y, ndarray) else y
    if not isinstance(tx, _C.Tensor) and not isinstance(ty, _C.Tensor):
        tx = _C.tensor(tx, dtype=kd)
    return ndarray(_k.where(asarray(condition)._t.bool(), tx, ty).to(kd))


def clip(a, a_min=None, a_max=None):
    a = asarray(a)
    return ndarray(_k.clamp(a._t, a_min, a_max))


def tril(m, k=0):
    return ndarray(_k.tril(asarray(m)._t, k))


def triu(m, k=0):
    return ndarray(_k.triu(asarray(m)._t, k))


# ---- products ----
def _promoted(*arrays):
    arrays = [asarray(x) for x in arrays]
    dt = _np.result_type(*[x.dtype for x in arrays])
    if dt.kind != "f":
        _unsupported(f"matrix products of {dt} arrays (Kiln multiplies float32 and float64)")
    return [x._t.to(_TO_KILN[dt]) for x in arrays]


def matmul(a, b):
    return ndarray(_k.matmul(*_promoted(a, b)))


def dot(a, b):
    ta, tb = _promoted(a, b)
    if ta.ndim == 0 or tb.ndim == 0:
        return ndarray(ta * tb)
    if tb.ndim > 2:
        _unsupported("dot of an array with more than 2 dims as its second argument")
    return ndarray(_k.matmul(ta, tb))


def outer(a, b):
    ta, tb = _promoted(a, b)
    return ndarray(ta.reshape(-1, 1) * tb.reshape(1, -1))


def einsum(subscripts, *operands):
    """Einstein summation by broadcast multiplication and sums (explicit or implicit output)."""
    if "..." in subscripts:
        _unsupported("einsum with '...'")
    ts = _promoted(*operands)
    inputs, _, output = subscripts.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ts):
        raise _C.ValueError(f"kiln.numpy.einsum: {len(terms)} subscripts for {len(ts)} operands")
    letters = sorted(set("".join(terms)))
    if not _:
        counts = {c: "".join(terms).count(c) for c in letters}
        output = "".join(c for c in letters if counts[c] == 1)
    # Every operand over all letters (its own letters in order, size-1 dims for the others).
    aligned = []
    for term, t in zip(terms, ts):
        if len(term) != t.ndim:
            raise _C.ValueError(f"kiln.numpy.einsum: '{term}' for an operand of {t.ndim} dims")
        for c in set(term):
            while term.count(c) > 1:  # a repeated letter: the diagonal
                i = term.index(c)
                j = term.index(c, i + 1)
                t = t.diagonal(0, i, j)
                term = term[:i] + term[i + 1:j] + term[j + 1:] + c
        order = [term.index(c) for c in letters if c in term]
        t = t.permute(order) if order else t
        shape = [t.shape[[c for c in letters if c in term].index(c)] if c in term else 1
                 for c in letters]
        aligned.append(t.reshape(shape))
    product = aligned[0]
    for t in aligned[1:]:
        product = product * t
    summed = [i for i, c in enumerate(letters) if c not in output]
    result = product.sum(summed) if summed else product
    remaining = [c for c in letters if c in output]
    return ndarray(result.permute([remaining.index(c) for c in output]) if output else result)


# ---- comparisons of whole arrays ----
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    ta, tb = _promoted_any(a, b)
    return _k.allclose(ta, tb, rtol, atol, equal_nan)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    ta, tb = _promoted_any(a, b)
    return ndarray(_k.isclose(ta, tb, rtol, atol, equal_nan))


def array_equal(a, b):
    a, b = asarray(a), asarray(b)
    return a.shape == b.shape and _k.equal(*_promoted_any(a, b))


def _promoted_any(*arrays):
    arrays = [asarray(x) for x in arrays]
    dt = _np.result_type(*[x.dtype for x in arrays])
    return [x._t.to(_kiln_dtype(dt, "comparison")) for x in arrays]


class linalg:
    """kiln.numpy.linalg: norm."""

    @staticmethod
    def norm(x, ord=None, axis=None, keepdims=False):
        t = asarray(x)._t
        t = t if t.is_floating_point() else t.to(_C.float64)
        if ord is None or ord == "fro":
            p = 2.0
        elif ord in (inf, -inf) or isinstance(ord, (builtins.int, builtins.float)):
            p = float(ord)
        else:
            _unsupported(f"linalg.norm(ord={ord!r})")
        if ord not in (None, "fro", 2, 2.0) and (axis is None and t.ndim > 1 or
                                                 isinstance(axis, tuple) and len(axis) == 2):
            _unsupported(f"linalg.norm(ord={ord!r}) of a matrix")
        return ndarray(_k.norm(t, p, _axes(axis), keepdims))


def __getattr__(name):
    raise AttributeError(f"kiln.numpy.{name} is not implemented (kiln.numpy covers creation, "
                         "ufuncs, reductions, shapes, joins, where, dot/matmul/einsum and "
                         "linalg.norm; docs/python.md)")


def _to_numpy(value):
    """kiln.numpy arrays in a value (and its tuples, lists and dicts) as NumPy arrays."""
    if isinstance(value, ndarray):
        return _np.asarray(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # (a ufunc, or a builtin without one)


def _as_ours(func, ours, args, kwargs):
    """NumPy's call `func(*args, **kwargs)` as the arguments of ours, matched by NumPy's
    parameter names (kiln.numpy's functions name them as NumPy does), or None when ours does
    not take them all: the same positional arguments may mean different things in the two."""
    theirs = _signature(func)
    if theirs is not None:
        try:
            bound = theirs.bind(*args, **kwargs)
        except TypeError:
            return None  # a call NumPy itself refuses: let NumPy say why
        args, kwargs = [], {}
        for name, value in bound.arguments.items():
            kind = theirs.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                args.extend(value)
            elif kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update(value)
            else:
                kwargs[name] = value
    mine = _signature(ours)
    try:
        if mine is not None:
            mine.bind(*args, **kwargs)
    except TypeError:
        return None
    return args, kwargs


def _numpy_runs(func, args, kwargs):
    """NumPy runs the call on the data. A kiln.numpy array given as out= receives the result
    through a (traced) assignment and is what the call returns, as NumPy returns its out."""
    out = kwargs.get("out")
    targets = out if isinstance(out, tuple) else (out,)
    if not builtins.any(isinstance(t, ndarray) for t in targets):
        return func(*_to_numpy(args), **_to_numpy(kwargs))
    result = func(*_to_numpy(args), **_to_numpy({k: v for k, v in kwargs.items() if k != "out"}))
    results = result if isinstance(result, tuple) else (result,)
    for target, value in zip(targets, results):
        if target is not None:
            target[...] = value
    return out[0] if isinstance(out, tuple) and len(out) == 1 else out


def _dispatch(func, args, kwargs):
    """A NumPy function or ufunc called on kiln.numpy arrays: ours of the same name when `func`
    is NumPy's top-level one and ours takes the arguments, else NumPy's on the data."""
    name = func.__name__
    ours = globals().get(name) if getattr(_np, name, None) is func else None
    if callable(ours) and not isinstance(ours, type):
        call = _as_ours(func, ours, args, kwargs)
        if call is not None:
            try:
                return ours(*call[0], **call[1])
            except _C.NotImplementedError:
                pass  # an argument ours does not take (out=, a dtype): NumPy's turn
    return _numpy_runs(func, args, kwargs)


def _numpy_to_tensors(value):
    """NumPy arrays in an argument (and in its tuples and lists) as Kiln tensors over the same
    memory, and where they were: (converted, marks), marks True for an array, a tuple of marks
    for a tuple or list, False otherwise."""
    if isinstance(value, _np.ndarray):
        return asarray(value)._t, True
    if isinstance(value, (tuple, list)):
        pairs = [_numpy_to_tensors(v) for v in value]
        return type(value)(v for v, _ in pairs), tuple(m for _, m in pairs)
    return value, False


def _as_arrays(value, marks):
    """The tensors `marks` points at as kiln.numpy arrays (inside a compiled NumPy function)."""
    if marks is True:
        return ndarray(value)
    if isinstance(marks, tuple):
        return type(value)(_as_arrays(v, m) for v, m in zip(value, marks))
    return value


def _arrays_to_tensors(result):
    """kiln.numpy arrays in a result (and its tuples and lists) as their tensors."""
    if isinstance(result, ndarray):
        return result._t
    if isinstance(result, (tuple, list)):
        return type(result)(_arrays_to_tensors(r) for r in result)
    return result


def _tensors_to_numpy(result):
    """Tensors in a result (and its tuples and lists) as NumPy arrays sharing their memory."""
    if isinstance(result, _C.Tensor):
        return _np.asarray(result.detach())
    if isinstance(result, (tuple, list)):
        return type(result)(_tensors_to_numpy(r) for r in result)
    return result
