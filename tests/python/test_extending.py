"""Python code Kiln calls back into: allow_in_graph of a Python function, autograd.Function
subclasses, a Python callable as backend."""
import numpy as np
import pytest

import kiln


def test_allow_in_graph_records_a_python_function_as_one_node():
    runs = []

    @kiln.compiler.allow_in_graph
    def scaled_gelu(x, scale):
        runs.append(1)
        return kiln.nn.functional.gelu(x) * scale

    def fn(x):
        return scaled_gelu(x + 1, 2.0).sum()

    x = kiln.randn(8)
    explanation = kiln.explain(fn)(x)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0
    assert explanation.ops_per_graph == [3]  # add, the allowed function, sum
    expected = (kiln.nn.functional.gelu(x + 1) * 2.0).sum().item()
    assert abs(kiln.compile(fn, backend="eager")(x).item() - expected) < 1e-5
    assert abs(scaled_gelu(x + 1, 2.0).sum().item() - expected) < 1e-5  # eagerly: a plain call


def test_allow_in_graph_propagates_a_python_exception_unchanged():
    class Refused(Exception):
        pass

    @kiln.compiler.allow_in_graph
    def refuse(x):
        raise Refused("not today")

    with pytest.raises(Refused, match="not today"):
        kiln.compile(lambda x: refuse(x) + 1, backend="eager")(kiln.ones(2))


class Square(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        assert ctx.needs_input_grad == (True, False)
        return 2 * x * ctx.scale * grad, None


def test_autograd_function_subclass_runs_its_own_backward():
    x = kiln.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = Square.apply(x, 3.0)
    assert y.tolist() == [3.0, 12.0, 27.0] and y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, -12.0, 18.0])
    with kiln.no_grad():
        assert not Square.apply(x, 3.0).requires_grad


def test_a_python_backend_receives_the_graph_and_example_inputs():
    seen = {}

    def my_backend(graph, example_inputs):
        seen["ops"] = [name for name, _, _ in graph.nodes]
        seen["text"] = str(graph)
        seen["shapes"] = [t.shape for t in example_inputs]
        return graph  # a graph is callable: it runs with the eager kernels

    f = kiln.compile(lambda a, b: (a * b).tanh().sum(), backend=my_backend)
    a, b = kiln.randn(3), kiln.randn(3)
    assert abs(f(a, b).item() - (a * b).tanh().sum().item()) < 1e-6
    assert seen["ops"] == ["mul", "tanh", "sum"]
    assert "tanh" in seen["text"] and seen["shapes"] == [(3,), (3,)]


def _halved_tanh(x):
    return kiln.tanh(x) * 0.5


def test_allow_in_graph_inside_a_compiled_function_records_one_op_for_one_function():
    # The FAQ's pattern, allow_in_graph called inside the compiled function: every call gets the
    # same op for the same Python function, so the cached graph keeps matching.
    def fn(x):
        return kiln.compiler.allow_in_graph(_halved_tanh)(x) + 1

    assert kiln.compiler.allow_in_graph(_halved_tanh) is kiln.compiler.allow_in_graph(
        _halved_tanh)
    f = kiln.compile(fn, backend="eager")
    with kiln.compiler.CompileProfiler() as prof:
        for _ in range(3):
            x = kiln.randn(6)
            assert (f(x) - (kiln.tanh(x) * 0.5 + 1)).abs().amax().item() < 1e-6
    (stats,) = [s for name, s in prof.stats().items() if name.endswith(".fn")]
    assert stats.graphs == 1 and not stats.recompile_reasons
