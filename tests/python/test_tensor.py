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


def test_iteration_stops_at_the_end():
    rows = [r.tolist() for r in kiln.arange(4).reshape(2, 2)]
    assert rows == [[0, 1], [2, 3]]
