"""Autograd from Python: gradients against central finite differences in float64, grad mode."""
import numpy as np
import pytest

import kiln


def numeric_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (f(kiln.tensor(hi)).item() - f(kiln.tensor(lo)).item()) / (2 * eps)
    return g


def test_gradients_match_finite_differences():
    a = np.random.default_rng(0).standard_normal((3, 4))
    def f(x):
        weights = kiln.arange(3.0, dtype=kiln.float64)
        return ((kiln.tanh(x) * x.exp()).sum(1).softmax(0) * weights).sum()
    x = kiln.tensor(a, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), numeric_grad(f, a), rtol=1e-5, atol=1e-7)


def test_leaf_and_grad_mode():
    x = kiln.ones(3, requires_grad=True)
    assert x.is_leaf and x.requires_grad
    y = x * 2
    assert not y.is_leaf and y.requires_grad
    with kiln.no_grad():
        assert not (x * 2).requires_grad
        with kiln.enable_grad():
            assert (x * 2).requires_grad
    assert kiln.is_grad_enabled()

    @kiln.no_grad()
    def doubled(t):
        return t * 2
    assert not doubled(x).requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    x.grad = None
    assert x.grad is None


def test_tensor_hooks_see_and_replace_gradients_and_can_be_removed():
    w = kiln.ones(3, requires_grad=True)
    seen = []
    handle = w.register_hook(lambda g: seen.append(g.tolist()) or g * 2)
    (w * kiln.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert seen == [[1.0, 2.0, 3.0]] and w.grad.tolist() == [2.0, 4.0, 6.0]
    handle.remove()
    w.grad = None
    (w * 3).sum().backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0] and len(seen) == 1
    # A hook on an intermediate, one returning None (the gradient stays), one that raises.
    y = w * 2
    y.register_hook(lambda g: None)
    accumulated = []
    w.register_post_accumulate_grad_hook(lambda leaf: accumulated.append(leaf.grad.tolist()))
    w.grad = None
    y.sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0] and accumulated == [[2.0, 2.0, 2.0]]

    class Refused(Exception):
        pass

    def refuse(g):
        raise Refused("no gradient today")

    z = kiln.ones(2, requires_grad=True)
    z.register_hook(refuse)
    with pytest.raises(Refused, match="no gradient today"):
        (z * 2).sum().backward()
