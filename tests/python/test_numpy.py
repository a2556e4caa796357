"""NumPy without copies, both ways: writes through one side are seen by the other."""
import numpy as np
import pytest

import kiln


def test_from_numpy_shares_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = kiln.from_numpy(a)
    assert t.dtype is kiln.float32 and t.shape == (2, 3)
    t[0, 0] = 100.0
    assert a[0, 0] == 100.0
    a[1, 2] = -1.0
    assert t[1, 2].item() == -1.0


def test_numpy_view_of_a_tensor_shares_memory():
    t = kiln.zeros(2, 3, dtype=kiln.float64)
    n = t.numpy()
    n[1, 1] = 5.0
    assert t[1, 1].item() == 5.0
    assert np.asarray(t)[1, 1] == 5.0
    del t
    n[0, 0] = 1.0  # the array keeps the storage alive
    assert n.sum() == 6.0


def test_strided_arrays_and_dtypes():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]
    t = kiln.from_numpy(a)
    assert t.stride() == (4, 2)
    assert t.tolist() == a.tolist()
    for dt in (np.bool_, np.int32, np.int64, np.float32, np.float64):
        assert kiln.from_numpy(np.zeros(2, dtype=dt)).numpy().dtype == dt
    with pytest.raises(kiln.DTypeError, match="no Kiln dtype"):
        kiln.from_numpy(np.zeros(2, dtype=np.float16))
    with pytest.raises(kiln.ValueError, match="negative stride"):
        kiln.from_numpy(np.arange(4.0)[::-1])


def test_arrays_are_operands_and_dlpack_round_trips():
    a = np.ones(3, dtype=np.float32)
    assert (kiln.ones(3) + a).tolist() == [2.0, 2.0, 2.0]
    t = kiln.arange(4.0)
    back = np.from_dlpack(t)
    back[0] = 9.0
    assert t[0].item() == 9.0
    assert kiln.from_dlpack(back).tolist() == [9.0, 1.0, 2.0, 3.0]


def test_numpy_of_a_tensor_that_requires_grad_says_detach():
    with pytest.raises(kiln.Error, match="detach"):
        kiln.ones(2, requires_grad=True).numpy()
