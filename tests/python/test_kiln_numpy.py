"""kiln.numpy: NumPy 2's semantics on Kiln tensors, compiled functions taking and returning
NumPy arrays (the reference FAQ's example)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as knp


def test_the_faq_example_compiles_and_returns_a_numpy_array():
    @kiln.compile
    def numpy_fn(X, Y):
        return knp.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))

    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((64, 16)), rng.standard_normal((64, 16))
    Z = numpy_fn(X, Y)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float64 and Z.shape == (64,)
    np.testing.assert_allclose(Z, np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1)),
                               rtol=1e-12)
    explanation = kiln.explain(lambda x, y: knp.sum(knp.asarray(x)[:, :, None] *
                                                    knp.asarray(y)[:, None, :], axis=(-2, -1)))(
        X, Y)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0


def test_pure_mode_takes_numpy_arrays_without_calling_the_function_again():
    calls = []

    def numpy_fn(X, scale, Y=None):
        calls.append(1)
        return knp.sum(X * scale, axis=0), (Y * 2 if Y is not None else None)

    compiled = kiln.compile(numpy_fn, pure=True, backend="eager")
    X, Y = np.arange(6.0).reshape(2, 3), np.ones((3,), np.float32)
    for _ in range(3):
        total, doubled = compiled(X, 0.5, Y=Y)
        assert isinstance(total, np.ndarray) and total.dtype == np.float64
        np.testing.assert_array_equal(total, np.sum(X * 0.5, axis=0))
        assert doubled.dtype == np.float32 and doubled.tolist() == [2.0, 2.0, 2.0]
    # Captured once; later calls run the graph alone (without pure mode, fn would run each time).
    assert len(calls) == 1
    X[0, 0] = 100.0  # the same memory, new values: guards pass, the graph reads them
    np.testing.assert_array_equal(compiled(X, 0.5, Y=Y)[0], np.sum(X * 0.5, axis=0))
    assert len(calls) == 1


def test_nep50_promotion():
    f32 = knp.ones(3, dtype=np.float32)
    i64 = knp.arange(3)
    assert knp.zeros(2).dtype == np.float64  # creation defaults to float64
    assert knp.array([1.5, 2.0]).dtype == np.float64
    assert (f32 * 2.0).dtype == np.float32  # a Python float is weak
    assert (i64 + 1.5).dtype == np.float64
    assert (i64 / i64).dtype == np.float64  # true division of ints
    assert (i64 + 1).dtype == np.int64
    assert knp.sqrt(i64).dtype == np.float64
    assert knp.mean(i64).dtype == np.float64
    assert knp.sum(knp.array([True, False, True])).dtype == np.int64
    assert (f32 + knp.ones(3)).dtype == np.float64
    assert (f32 > 0.5).dtype == np.bool_


def test_functions_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 5))
    ka, kb = knp.asarray(a), knp.asarray(b)
    np.testing.assert_allclose(np.asarray(knp.mean(ka, axis=0, keepdims=True)),
                               a.mean(0, keepdims=True))
    np.testing.assert_allclose(np.asarray(ka.std(axis=1, ddof=1)), a.std(1, ddof=1))
    np.testing.assert_allclose(np.asarray(ka @ kb), a @ b)
    np.testing.assert_allclose(np.asarray(knp.einsum("ij,jk->ik", ka, kb)), a @ b)
    np.testing.assert_allclose(np.asarray(knp.einsum("ii", knp.asarray(a[:, :3]))),
                               np.trace(a[:, :3]))
    np.testing.assert_allclose(np.asarray(knp.einsum("ij->j", ka)), a.sum(0))
    np.testing.assert_allclose(np.asarray(knp.where(ka > 0, ka, 0.0)), np.where(a > 0, a, 0.0))
    np.testing.assert_allclose(float(knp.linalg.norm(ka)), np.linalg.norm(a))
    np.testing.assert_allclose(np.asarray(knp.linalg.norm(ka, axis=1)), np.linalg.norm(a, axis=1))
    np.testing.assert_allclose(np.asarray(knp.concatenate([ka, ka], axis=1)),
                               np.concatenate([a, a], axis=1))
    np.testing.assert_allclose(np.asarray(knp.clip(ka, -0.5, 0.5)), np.clip(a, -0.5, 0.5))
    assert knp.argmax(ka).item() == a.argmax()
    np.testing.assert_array_equal(np.asarray(knp.cumsum(knp.arange(5))), np.cumsum(np.arange(5)))


def test_views_and_copies_as_the_faq_lists():
    a = np.arange(10.0)
    ka = knp.asarray(a)  # shares memory
    view = ka[2:5]
    view[0] = 100.0
    assert a[2] == 100.0
    rev = ka[::-2]  # a negative step: a copy
    np.testing.assert_array_equal(np.asarray(rev), a[::-2])
    rev[0] = -1.0
    assert a[9] == 9.0
    np.testing.assert_array_equal(np.asarray(knp.flip(ka)), a[::-1])


def test_unsupported_features_name_the_function():
    with pytest.raises(AttributeError, match="kiln.numpy.fft is not implemented"):
        knp.fft
    with pytest.raises(kiln.NotImplementedError, match="float16"):
        knp.zeros(2, dtype=np.float16)
    with pytest.raises(kiln.NotImplementedError, match="add with out="):
        knp.add(knp.ones(2), 1, out=knp.ones(2))


def test_numpys_own_functions_on_compiled_arrays_dispatch_or_fall_back_to_numpy():
    # The FAQ's example as written, with `import numpy as np`: np.sum and the ufuncs reach
    # kiln.numpy and are traced (one graph, no break).
    def numpy_fn(X, Y):
        return np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))

    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((64, 16)), rng.standard_normal((64, 16))
    Z = kiln.compile(numpy_fn)(X, Y)
    assert isinstance(Z, np.ndarray) and Z.shape == (64,)
    np.testing.assert_allclose(Z, numpy_fn(X, Y), rtol=1e-12)
    traced = kiln.explain(lambda x: np.sum(np.exp(x) * 2, axis=0))(knp.asarray(X))
    assert traced.graph_count == 1 and traced.graph_break_count == 0

    # What kiln.numpy lacks (np.median) or a call it does not take (out=, ufunc methods) runs
    # in NumPy on the data, every call (results follow new inputs), and the rest is traced.
    def mixed(X):
        centred = X - np.median(X, axis=0)
        total = np.add.reduce(centred, axis=1)
        out = np.empty(total.shape)
        np.multiply(total, 2.0, out=out)
        return np.maximum(centred, 0), out

    f = kiln.compile(mixed)
    for seed in (2, 3):
        X = np.random.default_rng(seed).standard_normal((32, 8))
        got, want = f(X), mixed(X)
        for g, w in zip(got, want):
            assert isinstance(g, np.ndarray)
            np.testing.assert_allclose(g, w, rtol=1e-12)

    # out= a kiln.numpy array: NumPy computes, the array receives the result (a traced
    # assignment) and is returned, as NumPy returns its out.
    def into(X):
        out = knp.zeros(X.shape)
        returned = np.multiply(X, 3.0, out=out)
        assert returned is out
        return out + 1

    X = np.random.default_rng(4).standard_normal((4, 5))
    np.testing.assert_allclose(kiln.compile(into)(X), X * 3 + 1, rtol=1e-12)

    # Arguments are matched by NumPy's parameter names, so positional ones mean what they mean
    # in NumPy: np.max(x, 0) is an axis, np.argmax(x, 1) too.
    def reductions(X):
        return np.max(X, 0), np.argmax(X, 1), np.sum(X, 1, keepdims=True)

    X = np.random.default_rng(5).standard_normal((6, 7))
    for g, w in zip(kiln.compile(reductions)(X), reductions(X)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    traced = kiln.explain(reductions)(knp.asarray(X))
    assert traced.graph_break_count == 0
