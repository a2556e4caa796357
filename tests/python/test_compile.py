"""kiln.compile on Python functions, explain() with the user's Python lines, the controls."""
import inspect

import pytest

import kiln


def toy_example(a, b):
    x = a / (kiln.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def line_of(text):
    lines, start = inspect.getsourcelines(toy_example)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_explain_reports_the_break_at_the_users_python_line():
    a, b = kiln.randn(10), kiln.randn(10)
    explanation = kiln.explain(toy_example)(a, b)
    assert explanation.graph_count == 2
    assert explanation.graph_break_count == 1
    (brk,) = explanation.break_reasons
    assert brk.filename == __file__
    assert brk.lineno == line_of("if b.sum() < 0")
    assert brk.function == "toy_example"
    assert "graph" in str(explanation).lower()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compiled_matches_eager(backend):
    a, b = kiln.randn(10), kiln.randn(10)
    compiled = kiln.compile(toy_example, backend=backend)
    for _ in range(2):
        expected = toy_example(a, b)
        assert (compiled(a, b) - expected).abs().amax().item() < 1e-6


def test_decorator_forms_and_fullgraph():
    @kiln.compile
    def f(x):
        return (x * 2).sum()

    @kiln.compile(backend="eager", fullgraph=True)
    def g(x):
        if x.sum() > 0:
            return x
        return -x

    assert f(kiln.ones(3)).item() == 6.0
    with pytest.raises(kiln.GraphBreakError) as info:
        g(kiln.ones(3))
    assert f"{__file__}:" in str(info.value)


def test_disable_graph_break_and_is_compiling():
    seen = []

    @kiln.compiler.disable
    def eager_part(x):
        seen.append(kiln.compiler.is_compiling())
        return x + 1

    def fn(x):
        seen.append(kiln.compiler.is_compiling())
        y = eager_part(x * 2)
        kiln.compiler.graph_break()
        return y * 3

    explanation = kiln.explain(fn)(kiln.ones(2))
    assert seen == [True, False]
    assert explanation.graph_break_count == 2
    assert kiln.compile(fn, backend="eager")(kiln.ones(2)).tolist() == [9.0, 9.0]


def test_training_step_lowers_the_loss_eagerly_and_compiled():
    kiln.manual_seed(0)
    x = kiln.randn(64, 3)
    y = (x * kiln.tensor([1.0, -2.0, 0.5])).sum(1)

    def step(w):
        loss = ((x * w).sum(1) - y).pow(2).mean()
        loss.backward()
        with kiln.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
        return loss

    for fn in (step, kiln.compile(step, backend="inductor")):
        w = kiln.zeros(3, requires_grad=True)
        losses = [fn(w).item() for _ in range(30)]
        assert losses[-1] < 0.05 * losses[0]


def test_pure_mode_skips_the_function_on_a_hit_and_keeps_results_exact():
    calls = []

    def chain(x, scale):
        calls.append(1)
        y = x
        for _ in range(10):
            y = (y * scale).tanh() + 0.1
        return y, [y.sum(), None]

    f = kiln.compile(chain, pure=True)
    x = kiln.randn(64)
    expected = chain(x, 0.9)
    calls.clear()
    for _ in range(3):
        y, (s, nothing) = f(x, 0.9)
        assert kiln.equal(y, expected[0]) and nothing is None
        assert abs(s.item() - expected[1][0].item()) < 1e-4
    assert len(calls) == 1  # captured once, then skipped
    f(x, 0.5)  # another number: another graph, the function runs
    assert len(calls) == 2
    f(kiln.randn(8), 0.9)  # another shape: the function runs
    assert len(calls) == 3


def branch_on_size(x):
    if x.shape[0] > 4:
        return kiln.exp(x)
    return kiln.sin(x)


def test_a_specialised_marked_dim_names_the_users_python_line():
    compiled = kiln.compile(branch_on_size, backend="eager")
    small, large = kiln.randn(3), kiln.randn(5)
    kiln.compiler.mark_dynamic(small, 0)
    kiln.compiler.mark_dynamic(large, 0)
    compiled(small)
    with pytest.raises(kiln.Error) as info:
        compiled(large)
    lines, start = inspect.getsourcelines(branch_on_size)
    exp_line = start + next(i for i, line in enumerate(lines) if "kiln.exp" in line)
    assert "is marked dynamic" in str(info.value)
    assert f"at {__file__}:{exp_line}" in str(info.value)


def test_compile_profiler_records_graphs_recompiles_and_is_a_backend():
    # The reference FAQ's form: torch.compile(fn, backend=prof), then prof.report().
    prof = kiln.compiler.CompileProfiler()

    def profiled(x):
        return x.exp() + 1

    f = kiln.compile(profiled, backend=prof)
    f(kiln.ones(2))
    f(kiln.ones(3))
    stats = prof.stats()["test_compile_profiler_records_graphs_recompiles_and_is_a_backend"
                         ".<locals>.profiled"]
    assert stats.graphs == 2 and stats.graph_breaks == 0 and stats.ops_per_graph == [2, 2]
    assert len(stats.recompile_reasons) == 1
    assert "size of dim 0 changed 2 → 3" in stats.recompile_reasons[0]
    assert "profiled: 2 graphs" in prof.report()

    # Every compiled function is observed while the profiler lives, whatever its backend.
    def broken(x):
        y = x.sin()
        kiln.compiler.graph_break()
        return y.cos()

    watching = kiln.compiler.CompileProfiler()
    kiln.compile(broken, backend="eager")(kiln.ones(2))
    (seen,) = [s for name, s in watching.stats().items() if name.endswith("broken")]
    assert seen.graphs == 2 and seen.graph_breaks == 1
    with pytest.raises(TypeError, match="CompileProfiler"):
        kiln.compile(profiled, backend=3)


def test_a_module_level_compiled_function_is_freed_at_exit():
    # fn -> its module's globals -> the compiled wrapper -> fn is a cycle the garbage collector
    # must see through, or every script using kiln.compile ends with nanobind's leak report.
    import subprocess
    import sys
    script = ("import kiln\n"
              "f = kiln.compile(lambda x: x + 1, backend='eager')\n"
              "@kiln.compile(backend='eager')\n"
              "def g(x):\n"
              "    return f(x) * 2\n"
              "print(g(kiln.ones(2)).tolist())\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "[4.0, 4.0]", run.stderr
    assert "leaked" not in run.stderr, run.stderr


def test_the_faqs_controls_from_python():
    # explain(fn, *args), the FAQ's older form, and what explain adds per graph.
    explanation = kiln.explain(toy_example, kiln.randn(10), kiln.randn(10))
    assert explanation.graph_count == 2 and explanation.graph_break_count == 1
    assert len(explanation.guards) == 2 and any("[10]" in line for line in explanation.guards[0])
    assert len(explanation.kernels_per_graph) == 2
    assert len(explanation.extern_calls_per_graph) == 2

    # `with CompileProfiler() as prof:` records inside the block only.
    def square(x):
        return x * x

    with kiln.compiler.CompileProfiler() as prof:
        kiln.compile(square, backend="eager")(kiln.ones(2))
    kiln.compile(square, backend="eager")(kiln.ones(3))  # after the block: not recorded
    (seen,) = [s for name, s in prof.stats().items() if name.endswith("square")]
    assert seen.graphs == 1

    # The frozen form runs cached graphs and compiles nothing new: a new size runs eagerly.
    f = kiln.compile(square, backend="eager", dynamic=False)
    f(kiln.ones(2))
    frozen = kiln.compiler.run(f)
    with kiln.compiler.CompileProfiler() as frozen_prof:
        assert frozen(kiln.full([2], 3.0)).tolist() == [9.0, 9.0]
        assert frozen(kiln.full([5], 2.0)).tolist() == [4.0] * 5
    assert not [s for name, s in frozen_prof.stats().items() if name.endswith("square")]
    with pytest.raises(TypeError, match="kiln.compile"):
        kiln.compiler.run(square)
    # NumPy arguments go through the frozen form too: no new graph for a new size.
    import numpy as np
    g = kiln.compile(square, backend="eager", dynamic=False)
    np.testing.assert_array_equal(g(np.full(2, 3.0)), [9.0, 9.0])
    frozen_g = kiln.compiler.run(g)
    with kiln.compiler.CompileProfiler() as numpy_prof:
        np.testing.assert_array_equal(frozen_g(np.full(2, 2.0)), [4.0, 4.0])
        np.testing.assert_array_equal(frozen_g(np.full(3, 2.0)), [4.0] * 3)
    assert not [s for name, s in numpy_prof.stats().items() if name.endswith("square")]

    # is_dynamo_compiling: true under capture only.
    seen_capture = []

    def probe(x):
        seen_capture.append(kiln.compiler.is_dynamo_compiling())
        return x + 1

    kiln.compile(probe, backend="eager")(kiln.ones(2))
    assert seen_capture == [True] and not kiln.compiler.is_dynamo_compiling()

    # compile_times, and the process-wide cache_size_limit (torch._dynamo.config).
    assert kiln.compiler.compile_times()["total"] >= 0
    assert "total" in kiln.compiler.compile_times_str()
    saved = kiln.compiler.config.cache_size_limit
    try:
        kiln.compiler.config.cache_size_limit = 2
        g = kiln.compile(lambda x: x - 1, backend="eager", dynamic=False)
        with kiln.compiler.CompileProfiler() as limited:
            for n in (1, 2, 3, 4):
                assert g(kiln.ones(n)).tolist() == [0.0] * n
        assert sum(s.graphs for s in limited.stats().values()) == 2  # then eager, warned once
    finally:
        kiln.compiler.config.cache_size_limit = saved


def test_set_debug_dir_writes_a_run_folder(tmp_path):
    kiln.compiler.set_debug_dir(str(tmp_path))
    try:
        kiln.compile(lambda x: x.exp() * 2, backend="eager")(kiln.ones(3))
        run_dir = kiln.compiler.debug_run_dir()
        assert run_dir.startswith(str(tmp_path))
        import os
        assert os.path.exists(os.path.join(run_dir, "index.jsonl"))
    finally:
        kiln.compiler.set_debug_dir("")
    assert kiln.compiler.debug_run_dir() == ""


def test_kiln_debug_dir_1_dumps_into_the_working_directory(tmp_path):
    # KILN_DEBUG_DIR=1, as TORCH_COMPILE_DEBUG=1: ./kiln_debug/run-<time>-<pid>/.
    import os
    import subprocess
    import sys
    script = ("import kiln\n"
              "kiln.compile(lambda x: x.exp() + 1, backend='eager')(kiln.ones(2))\n"
              "print(kiln.compiler.debug_run_dir())\n")
    env = dict(os.environ, KILN_DEBUG_DIR="1")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    runs = os.listdir(tmp_path / "kiln_debug")
    assert len(runs) == 1 and runs[0].startswith("run-")
    assert (tmp_path / "kiln_debug" / runs[0] / "index.jsonl").exists()


def test_kiln_dynamic_shapes_sets_every_functions_default():
    # KILN_DYNAMIC_SHAPES (torch's TORCHDYNAMO_DYNAMIC_SHAPES): 0 static sizes, 1 dynamic from
    # the first call; anything else is an error naming the variable.
    import os
    import subprocess
    import sys
    script = ("import kiln\n"
              "print(kiln.compiler.config.dynamic)\n"
              "prof = kiln.compiler.CompileProfiler()\n"
              "f = kiln.compile(lambda x: x + 1, backend='eager')\n"
              "for n in (2, 3, 4):\n"
              "    f(kiln.ones(n))\n"
              "print(sum(s.graphs for s in prof.stats().values()))\n")
    for value, setting, graphs in (("0", "False", "3"), ("1", "True", "1")):
        env = dict(os.environ, KILN_DYNAMIC_SHAPES=value)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == [setting, graphs]
    # A bad value is an error at the first compile, not at `import kiln`.
    env = dict(os.environ, KILN_DYNAMIC_SHAPES="yes")
    bad = ("import kiln\n"
           "print('imported')\n"
           "kiln.compile(lambda x: x + 1, backend='eager')(kiln.ones(2))\n")
    run = subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.stdout.split() == ["imported"]
    assert run.returncode != 0 and "KILN_DYNAMIC_SHAPES = 'yes' is invalid" in run.stderr


def test_run_freezes_a_compiled_module_and_refuses_a_plain_one():
    model = kiln.nn.Linear(3, 2)
    compiled = kiln.compile(model, backend="eager", dynamic=False)
    x = kiln.randn(4, 3)
    compiled(x)
    frozen = kiln.compiler.run(compiled)
    with kiln.compiler.CompileProfiler() as prof:
        for rows in (4, 5):  # 5 rows: no cached graph fits, so it runs eagerly
            y = kiln.randn(rows, 3)
            assert (frozen(y) - model(y)).abs().amax().item() < 1e-6
    assert sum(s.graphs for s in prof.stats().values()) == 0
    with pytest.raises(TypeError, match="kiln.compile"):
        kiln.compiler.run(model)
