#!/usr/bin/env python3
"""The char-GPT training step (W7: `kiln train`'s model, vocab 96, 4 layers, 128 wide, batch
32 x 64, AdamW, gradient clipping) from Python, against the same step in C++ (`kiln bench --only
W7i`), run alternately in one sitting (docs/performance.md, "From Python").

    python bench/python_train_step.py --kiln build/release/tools/kiln/kiln [--rounds 3]

Each round times the Python step (median of --steps steps after warm-up, compiled with
inductor) and then runs `kiln bench --only W7i --runs 11` for the C++ step; the ratio of the
medians of both over the rounds is printed.
"""
import argparse
import re
import statistics
import subprocess
import time

import kiln
import kiln.nn as nn


def python_step_seconds(steps):
    kiln.manual_seed(7)
    model = nn.GPT(96, 64)
    opt = kiln.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    x = kiln.randint(0, 96, (32, 64))
    y = kiln.randint(0, 96, (32, 64))

    @kiln.compile
    def step(x, y):
        opt.zero_grad()
        loss = model.loss(x, y)
        loss.backward()
        kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(3):
        step(x, y).item()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(x, y).item()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpp_step_seconds(kiln_cli):
    out = subprocess.run([kiln_cli, "bench", "--only", "W7i", "--runs", "11"], check=True,
                         capture_output=True, text=True).stdout
    # The table row: | W7i | what | median | min | ...
    row = next(line for line in out.splitlines() if line.startswith("| W7i |"))
    value, unit = re.search(r"\|\s*([0-9.]+) (ms|us|s) \|", row).groups()
    return float(value) * {"s": 1, "ms": 1e-3, "us": 1e-6}[unit]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln", required=True, help="the kiln program (for the C++ step)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=11)
    args = parser.parse_args()
    py, cpp = [], []
    for r in range(args.rounds):
        py.append(python_step_seconds(args.steps))
        cpp.append(cpp_step_seconds(args.kiln))
        print(f"round {r + 1}: Python {py[-1] * 1e3:.1f} ms, C++ {cpp[-1] * 1e3:.1f} ms")
    print(f"median: Python {statistics.median(py) * 1e3:.1f} ms, C++ "
          f"{statistics.median(cpp) * 1e3:.1f} ms, ratio "
          f"{statistics.median(py) / statistics.median(cpp):.3f}")


if __name__ == "__main__":
    main()
