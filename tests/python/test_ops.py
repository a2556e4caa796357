"""The op functions generated from the registry: signatures, defaults and keywords from the
schemas, as functions and as methods, against NumPy."""
import numpy as np
import pytest

import kiln


def test_reductions_take_torch_keywords_and_defaults():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = kiln.tensor(a)
    np.testing.assert_allclose(kiln.sum(x).item(), a.sum())
    np.testing.assert_allclose(kiln.sum(x, 1).numpy(), a.sum(1))
    np.testing.assert_allclose(x.sum(dim=0, keepdim=True).numpy(), a.sum(0, keepdims=True))
    np.testing.assert_allclose(x.sum((0, 1)).item(), a.sum())
    np.testing.assert_allclose(kiln.mean(input=x, dim=[1]).numpy(), a.mean(1))
    np.testing.assert_allclose(x.amax(1).numpy(), a.max(1))
    np.testing.assert_allclose(x.var(1).numpy(), a.var(1, ddof=1))
    np.testing.assert_allclose(x.var(1, correction=0).numpy(), a.var(1))
    assert x.argmax().item() == 11
    assert kiln.sum(kiln.tensor([True, True])).dtype is kiln.int64
    assert x.sum(dtype=kiln.float32).dtype is kiln.float32


def test_max_and_min_have_torchs_three_forms():
    a = np.array([[3.0, -1.0, 7.0], [2.0, 9.0, -4.0]])
    x, y = kiln.tensor(a), kiln.tensor(a[::-1].copy())
    assert kiln.max(x).item() == 9.0 and x.min().item() == -4.0 and kiln.max(x).dim() == 0
    values, indices = kiln.max(x, 1)
    assert values.tolist() == [7.0, 9.0] and indices.tolist() == [2, 1]
    values, indices = x.min(dim=0, keepdim=True)
    assert values.tolist() == [[2.0, -1.0, -4.0]] and indices.tolist() == [[1, 0, 1]]
    assert kiln.max(x, y).tolist() == np.maximum(a, a[::-1]).tolist()
    assert x.min(y).tolist() == np.minimum(a, a[::-1]).tolist()


def test_pointwise_and_shape_ops():
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    x = kiln.tensor(a)
    np.testing.assert_allclose(kiln.exp(x).numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(x.tanh().numpy(), np.tanh(a), rtol=1e-6)
    np.testing.assert_allclose(kiln.add(x, x, alpha=2).numpy(), a + 2 * a, rtol=1e-6)
    np.testing.assert_allclose(x.clamp(min=-1).numpy(), np.maximum(a, -1))
    np.testing.assert_allclose(kiln.where(x > 0, x, 0.0).numpy(), np.where(a > 0, a, 0))
    assert x.view(4, 3).shape == (4, 3) and x.view((2, 6)).shape == (2, 6)
    assert x.permute(1, 0).shape == (4, 3) and x.unsqueeze(0).shape == (1, 3, 4)
    assert kiln.cat([x, x], 1).shape == (3, 8)
    assert x.expand(2, 3, 4).shape == (2, 3, 4)
    values, indices = kiln.sort(kiln.tensor([3.0, 1.0, 2.0]))
    assert values.tolist() == [1.0, 2.0, 3.0] and indices.tolist() == [1, 2, 0]
    top = kiln.tensor([3.0, 1.0, 2.0]).topk(2)
    assert top.values.tolist() == [3.0, 2.0] and top.indices.tolist() == [0, 2]


def test_signatures_are_checked_with_python_errors():
    x = kiln.ones(2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'dims'"):
        kiln.sum(x, dims=[0])
    with pytest.raises(TypeError, match="argument 'dim' must be an int"):
        x.sum("0")
    with pytest.raises(TypeError, match="missing required argument 'dim'"):
        kiln.softmax(x)
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        kiln.softmax(x, 0, dim=0)


def test_docstrings_and_the_internal_namespace():
    assert kiln.sum.__doc__.startswith("sum(Tensor self, int[] dim=[]")
    assert kiln.sum.__name__ == "sum"
    assert not hasattr(kiln, "adam_update")  # internal: only under kiln.ops
    assert callable(kiln.ops.adam_update)


def test_generated_stubs_describe_the_functions():
    import ast
    import os
    folder = os.path.dirname(kiln.__file__)
    # (The generated Tensor methods are in class Tensor: x.sum(1), x.add_(y).)
    for stub, name in [("_C.pyi", "class Tensor"), ("_C.pyi", "    def sum(self, dim"),
                       ("_C.pyi", "    def add_(self, other"), ("_functions.pyi", "def sum("),
                       ("_functions.pyi", "def max(input: Tensor | bool | int | float) -> Tensor"),
                       (os.path.join("nn", "functional.pyi"), "def conv2d(")]:
        with open(os.path.join(folder, stub)) as f:
            text = f.read()
        ast.parse(text)
        assert name in text, stub
