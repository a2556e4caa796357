"""Kiln's compiled workload and torch.compile's, timed in alternation, round by round:

    /tmp/torch2/bin/python bench/paired_torch_compile.py build/release/tools/kiln/kiln --workload W7

This machine's speed drifts by up to 1.3x from one minute to the next, so a Kiln sitting and
a torch.compile sitting a few minutes apart compare the minutes more than the compilers. Here
torch.compile compiles the step once (its compile time is not measured: see the anchor), then
each round runs `kiln bench --only W7i --runs 15` (a fresh process; the compiled modules come
from KILN_CACHE_DIR) and right after it one untimed and 15 timed torch.compile steps in this
process, and prints
both medians and their ratio. W6 (100 small ops, microseconds a call) times each of its samples
over 200 calls, on both sides as `kiln bench` does. The models are the anchor's own classes
(../shared/anchors/torch_compile_anchor.py), read from its source, so they cannot drift apart.
"""
import argparse
import ast
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_cnn_rnn import kiln_medians

ANCHOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "anchors",
                      "torch_compile_anchor.py")
MODEL_CLASSES = {"CausalSelfAttention", "MLP", "Block", "GPT"}
FUNCTIONS = {"w6_source"}  # W6's 100-op chain, as Python source


def anchor_models(path):
    """The anchor's model classes and W6's source function, defined here from its source (the
    rest of it is not run)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    module = ast.Module(body=[n for n in tree.body
                              if (isinstance(n, ast.ClassDef) and n.name in MODEL_CLASSES)
                              or (isinstance(n, ast.FunctionDef) and n.name in FUNCTIONS)],
                        type_ignores=[])
    scope = {"torch": torch, "nn": nn, "F": F, "math": math}
    exec(compile(module, path, "exec"), scope)
    missing = (MODEL_CLASSES | FUNCTIONS) - scope.keys()
    if missing:
        sys.exit(f"{path} no longer defines {sorted(missing)}")
    return scope


def make_step(workload, models):
    """The anchor's training step for W4 (the MLP), W5 (one GPT block, MSE) or W7 (the char-GPT), its
    100-op chain W6 (the anchor's own source of it, compiled), or W1's pointwise chain."""
    if workload == "W1":  # as bench/workloads.cpp and the anchor define it
        torch.manual_seed(0)
        x = torch.randn(16 * 1024 * 1024)
        return lambda: F.gelu(x * 1.5 + 0.25) * torch.sigmoid(x) + 0.5 * x
    if workload == "W6":
        scope = {"torch": torch}
        exec(compile(models["w6_source"](), "<w6>", "exec"), scope)
        torch.manual_seed(0)
        x = torch.randn(64)
        return lambda: scope["w6"](x)
    if workload == "W4":  # the anchor's W4: an MLP step, batch 256, SGD (lr 0.01)
        torch.manual_seed(0)
        x, y = torch.randn(256, 784), torch.randint(0, 10, (256,))
        torch.manual_seed(1)
        mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                            nn.Linear(512, 10))
        sgd = torch.optim.SGD(mlp.parameters(), lr=0.01)

        def mlp_step():
            sgd.zero_grad(set_to_none=True)
            loss = F.cross_entropy(mlp(x), y)
            loss.backward()
            sgd.step()
            return loss
        return mlp_step
    if workload == "W7":
        V, T, C, H, L, B = 96, 64, 128, 4, 4, 32
        torch.manual_seed(0)
        idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        torch.manual_seed(3)
        model = models["GPT"](V, T, C, H, L)
        loss_fn = lambda: F.cross_entropy(model(idx).view(-1, V), tgt.view(-1))  # noqa: E731
    else:
        B, T, C, H = 8, 128, 256, 4
        torch.manual_seed(0)
        x, tgt = torch.randn(B, T, C), torch.randn(B, T, C)
        torch.manual_seed(2)
        model = models["Block"](C, H, T)
        loss_fn = lambda: F.mse_loss(model(x), tgt)  # noqa: E731
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss
    return step


def kiln_median(kiln, workload, runs):
    return kiln_medians(kiln, [workload + "i"], runs)[workload + "i"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kiln", help="the kiln executable (build/release/tools/kiln/kiln)")
    parser.add_argument("--workload", choices=["W1", "W4", "W5", "W6", "W7"], default="W7")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=15, help="steps timed per side and round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--anchor", default=ANCHOR)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    step = torch.compile(make_step(args.workload, anchor_models(args.anchor)))
    calls = 200 if args.workload == "W6" else 1  # per timed sample
    for _ in range(5 * calls):  # compile, then warm up
        step()
    print(f"{args.workload}: kiln {args.workload}i vs torch.compile (default mode), "
          f"{args.threads} threads, medians of {args.runs} steps")
    ratios = []
    for r in range(args.rounds):
        kiln_ms, kiln_min = kiln_median(args.kiln, args.workload, args.runs)
        for _ in range(calls):  # untimed, as kiln bench warms up (caches are cold after it)
            step()
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            for _ in range(calls):
                step()
            times.append((time.perf_counter() - t0) * 1e3 / calls)
        torch_ms = statistics.median(times)
        ratios.append(kiln_ms / torch_ms)
        print(f"round {r}: kiln {kiln_ms:.4g} ms (min {kiln_min:.4g}), torch.compile "
              f"{torch_ms:.4g} ms (min {min(times):.4g}), ratio {ratios[-1]:.2f}", flush=True)
    print(f"ratios (kiln / torch.compile): median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
