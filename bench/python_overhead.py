#!/usr/bin/env python3
"""What Python costs on top of Kiln's C++ core: one op's overhead, and W6 (the 100-op chain on a
[64] tensor, the reference FAQ's overhead-bound case) eager, compiled and in pure mode; with
torch in the same interpreter, torch eager and torch.compile of the same Python function, timed
side by side in one process (docs/performance.md, "From Python").

    python bench/python_overhead.py [--calls N] [--rounds R]

Run it in a virtualenv where `pip install .` put kiln (and `pip install torch` for the torch
columns). Each figure is the median over R rounds of N calls.
"""
import argparse
import statistics
import time

import kiln


def per_call(fn, calls, rounds):
    for _ in range(min(calls, 50)):
        fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def w6_source(module):
    lines = ["def w6(x):"]
    for i in range(100):
        lines.append(["    x = x + 0.1", "    x = x * 0.9", f"    x = {module}.tanh(x)"][i % 3])
    lines.append("    return x")
    return "\n".join(lines) + "\n"


def make_w6(module_name, module):
    ns = {module_name: module}
    exec(compile(w6_source(module_name), "<w6>", "exec"), ns)
    return ns["w6"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rows = []

    a, b = kiln.randn(64), kiln.randn(64)
    cpp = statistics.median(kiln._C._bench.cpp_add_seconds(a, b, args.calls * 10)
                            for _ in range(args.rounds))
    py = per_call(lambda: kiln.add(a, b), args.calls * 10, args.rounds)
    op = per_call(lambda: a + b, args.calls * 10, args.rounds)
    rows.append(("add [64] from C++", cpp, ""))
    rows.append(("kiln.add(a, b) from Python", py, f"overhead {1e6 * (py - cpp):.2f} us"))
    rows.append(("a + b from Python", op, f"overhead {1e6 * (op - cpp):.2f} us"))

    w6 = make_w6("kiln", kiln)
    x = kiln.randn(64)
    eager = per_call(lambda: w6(x), args.calls // 10, args.rounds)
    rows.append(("W6 kiln eager", eager, ""))
    for label, options in (("W6 kiln.compile", {}), ("W6 kiln.compile(pure=True)", {"pure": True})):
        f = kiln.compile(w6, **options)
        ref = w6(x)
        assert (f(x) - ref).abs().amax().item() < 1e-5
        t = per_call(lambda: f(x), args.calls // 10, args.rounds)
        rows.append((label, t, f"{eager / t:.1f}x kiln eager"))

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        tw6 = make_w6("torch", torch)
        tx = torch.randn(64)
        t_eager = per_call(lambda: tw6(tx), args.calls // 10, args.rounds)
        rows.append(("W6 torch eager", t_eager, ""))
        tf = torch.compile(tw6)
        tf(tx)
        t_comp = per_call(lambda: tf(tx), args.calls // 10, args.rounds)
        rows.append(("W6 torch.compile", t_comp, f"{t_eager / t_comp:.1f}x torch eager"))
        pure = dict((r[0], r[1]) for r in rows)["W6 kiln.compile(pure=True)"]
        rows.append(("kiln pure / torch.compile", pure / t_comp, "ratio"))

    width = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        shown = f"{value:.3f}" if note == "ratio" else f"{value * 1e6:9.2f} us"
        print(f"{label:<{width}}  {shown}  {note if note != 'ratio' else ''}")


if __name__ == "__main__":
    main()
