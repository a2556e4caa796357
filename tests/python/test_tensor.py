"""kiln.Tensor from Python: factories, metadata, operators and indexing, checked against NumPy."""
import numpy as np
import pytest

import kiln


def test_factories_follow_torch_dtype_inference():
    assert kiln.tensor([1.5, 2]).dtype is kiln.float32
    assert kiln.tensor([[1, 2], [3, 4]]).dtype is kiln.int64
    assert kiln.tensor([True, False]).dtype is kiln.bool
    assert kiln.tensor([1, 2], dtype=kiln.float64).dtype is kiln.float64
    assert kiln.zeros(2, 3).shape == (2, 3)
    assert kiln.ones((2, 3), dtype=kiln.float64).dtype is kiln.float64
    assert kiln.randn(4, 8).shape == (4, 8)
    assert kiln.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert kiln.arange(0, 1, 0.5).dtype is kiln.float32
    assert kiln.full((2,), 7).tolist() == [7, 7]
    assert kiln.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(kiln.ValueError, match="ragged"):
        kiln.tensor([[1, 2], [3]])


def test_metadata_and_conversions():
    t = kiln.arange(6).reshape(2, 3)
    assert t.shape == (2, 3) and t.ndim == 2 and t.dim() == 2 and t.numel() == 6
    assert t.size(1) == 3 and t.size() == (2, 3) and t.stride() == (3, 1)
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert t[1, 2].item() == 5 and isinstance(t[1, 2].item(), int)
    assert isinstance(kiln.tensor(2.5).item(), float)
    assert len(t) == 2
    assert repr(kiln.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert float(kiln.tensor(1.5)) == 1.5 and int(kiln.tensor(3)) == 3


def test_operators_match_numpy():
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((4,)).astype(np.float32)
    x, y = kiln.tensor(a), kiln.tensor(b)
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((x - 2).numpy(), a - 2, rtol=1e-6)
    np.testing.assert_allclose((2 - x).numpy(), 2 - a, rtol=1e-6)
    np.testing.assert_allclose((x * y / 3).numpy(), a * b / 3, rtol=1e-6)
    np.testing.assert_allclose((x ** 2).numpy(), a ** 2, rtol=1e-6)
    np.testing.assert_allclose((x @ x.T).numpy(), a @ a.T, rtol=1e-5)
    np.testing.assert_array_equal((x > 0).numpy(), a > 0)
    np.testing.assert_allclose((-x).numpy(), -a)
    np.testing.assert_allclose(abs(x).numpy(), np.abs(a))
    # A Python float keeps a float32 tensor float32 (wrapped scalars promote by category).
    assert (x * 2.0).dtype is kiln.float32
    assert (kiln.arange(3) * 2.5).dtype is kiln.float32
    z = kiln.zeros(3)
    z += 1
    z *= kiln.tensor([1.0, 2.0, 3.0])
    assert z.tolist() == [1.0, 2.0, 3.0]


def test_indexing_matches_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = kiln.tensor(a)
    for key in [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 0), (None, 0),
                (slice(0, 2), slice(1, None), slice(None, None, 2)), (0, Ellipsis, None)]:
        np.testing.assert_array_equal(t[key].numpy(), a[key], err_msg=str(key))
    np.testing.assert_array_equal(t[t > 10].numpy(), a[a > 10])
    idx = kiln.tensor([2, 0])
    np.testing.assert_array_equal(t[:, idx].numpy(), a[:, [2, 0]])
    np.testing.assert_array_equal(t[[1, 0]].numpy(), a[[1, 0]])
    t[0, 1] = 100.0
    t[1, :, 0] = kiln.tensor([7.0, 8.0, 9.0])
    t[t < 3] = -1.0
    a[0, 1] = 100.0
    a[1, :, 0] = [7.0, 8.0, 9.0]
    a[a < 3] = -1.0
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(IndexError):
        t[5]
    with pytest.raises(kiln.IndexError, match="too many indices"):
        t[0, 0, 0, 0]


def test_advanced_indexing_with_several_index_tensors_matches_numpy():
    a = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    x = kiln.tensor(a)
    i, j, rows, neg = np.array([0, 2]), np.array([1, 3]), np.array([[0, 1], [2, 0]]), np.array([-1, 0])
    mask2, mask1 = a[:, :, 0] > 20, a[0, :, 0] % 2 == 0
    K = kiln.tensor
    # Adjacent index tensors keep their place; separated ones (by a slice or None) go first.
    for key in [(i, j), (i, slice(None), j), (slice(None), i, j), (i, 1, j), (None, i, j),
                (i, None, j), (rows, j[:1]), (rows, slice(None), rows), (neg, j), (mask2, 1),
                (i, mask1), (Ellipsis, i, j), (slice(1, 3), i, slice(None, None, 2))]:
        kiln_key = tuple(K(k) if isinstance(k, np.ndarray) else k for k in key)
        np.testing.assert_array_equal(x[kiln_key].numpy(), a[key], err_msg=str(key))
    np.testing.assert_array_equal(x[[0, 2], [1, 3]].numpy(), a[[0, 2], [1, 3]])
    np.testing.assert_array_equal(x.permute(2, 0, 1)[K(j), K(i)].numpy(),
                                  a.transpose(2, 0, 1)[j, i])
    with pytest.raises(IndexError, match="out of range for dim 0 of size 3"):
        x[K(np.array([3])), K(j)]
    with pytest.raises(IndexError, match="cannot be broadcast together"):
        x[K(i), K(np.array([1, 2, 3]))]


def test_assigning_through_index_tensors_writes_the_tensor():
    # x[idx] = v once wrote into a copy and changed nothing: every form is checked here.
    a = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    i, j, neg, mask2 = np.array([0, 2]), np.array([1, 3]), np.array([-1, 0]), a[:, :, 0] > 20
    K = kiln.tensor
    values = np.arange(10, dtype=np.float64).reshape(2, 5)
    for np_key, kiln_key, value in [
            (i, K(i), 0.0), ((slice(None), j), (slice(None), K(j)), 7.0),
            ((i, j), (K(i), K(j)), values), (mask2, K(mask2), np.arange(mask2.sum() * 5.0).reshape(-1, 5)),
            ((neg, 0, neg), (K(neg), 0, K(neg)), -5.0), ((slice(1, None), i), (slice(1, None), K(i)), 100.0)]:
        want, got = a.copy(), kiln.tensor(a)
        want[np_key] = value
        got[kiln_key] = K(value) if isinstance(value, np.ndarray) else value
        np.testing.assert_array_equal(got.numpy(), want, err_msg=str(np_key))
    got = kiln.tensor(a)
    view = got.permute(2, 0, 1)
    view[K(j), K(i)] = 1.0  # through a view: the base sees it
    want = a.copy()
    want.transpose(2, 0, 1)[j, i] = 1.0
    np.testing.assert_array_equal(got.numpy(), want)
    got[K(i)] += 1.0  # read, add, write back
    want[i] += 1.0
    np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(IndexError, match="out of range for dim 1 of size 4"):
        got[K(i), K(np.array([0, 9]))] = 1.0


def test_advanced_indexing_is_differentiable_and_compiles():
    w = kiln.randn(4, 5, dtype=kiln.float64, requires_grad=True)
    rows, cols = kiln.tensor([0, 3, 3]), kiln.tensor([1, 2, 2])

    def f(w):
        return (w[rows, cols] ** 2).sum()

    f(w).backward()
    expected = np.zeros((4, 5))
    for r, c in [(0, 1), (3, 2), (3, 2)]:
        expected[r, c] += 2 * w.detach().numpy()[r, c]
    np.testing.assert_allclose(w.grad.numpy(), expected)

    def write(x):
        y = x.clone()
        y[rows, cols] = 0.0
        return y * 2

    x = kiln.randn(4, 5)
    np.testing.assert_array_equal(kiln.compile(write, backend="eager")(x).numpy(),
                                  write(x).numpy())


def test_iteration_stops_at_the_end():
    rows = [r.tolist() for r in kiln.arange(4).reshape(2, 2)]
    assert rows == [[0, 1], [2, 3]]


def test_set_num_threads_as_torch():
    saved = kiln.get_num_threads()
    try:
        kiln.set_num_threads(1)
        assert kiln.get_num_threads() == 1
        a = kiln.randn(300, 200)
        one = (a @ a.t()).sum(1).tolist()
        kiln.set_num_threads(2)
        assert kiln.get_num_threads() == 2
        assert (a @ a.t()).sum(1).tolist() == pytest.approx(one, rel=1e-5)
        with pytest.raises(kiln.ValueError, match="positive"):
            kiln.set_num_threads(0)
    finally:
        kiln.set_num_threads(saved)
