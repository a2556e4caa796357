"""W8 (the dynamic-shapes sweep) in PyTorch eager and torch.compile, beside Kiln's W8 rows:

    /tmp/torch2/bin/python bench/torch_w8_sweep.py --kiln build/release/tools/kiln/kiln

W8 trains W7's char-GPT (the anchor's GPT class: 4 layers, 128 wide, vocabulary 96, batch 8)
forward and backward at 50 sequence lengths 2..51 in turn, each batch a slice of one [8, 64]
tensor, as `kiln bench`'s W8 does (bench/workloads.cpp). The rows, each a median over --runs
sweeps, measured in one sitting (Kiln's `kiln bench --only W8,W8i,W8w` first, then PyTorch's):

- eager: the sweep in PyTorch eager (Kiln: W8).
- compile, fresh: `torch._dynamo.reset()` and a new `torch.compile` per sweep, the inductor cache
  on disk warm (a sweep compiled once before), so each sweep pays Dynamo, AOTAutograd and
  Inductor's work but finds its generated code: what Kiln's W8i pays (a fresh kiln::compile per
  sweep, its modules found in memory).
- compile, warm: one torch.compile whose graphs the first sweep made (Kiln: W8w).
- compile, cold (once, not a median): the first sweep of a fresh process-level compile with an
  empty inductor cache directory, as a first run meets it (Kiln: `KILN_CACHE_DIR=$(mktemp -d)
  kiln bench --only W8i --runs 1` prints the matching figure as its first sample).

It also prints how many graphs torch.compile compiled per sweep (automatic dynamic: the first
length exact, then one dynamic graph), from torch._dynamo's counters.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_torch_compile import ANCHOR, anchor_models  # noqa: E402

V, T, C, H, L, B = 96, 64, 128, 4, 4, 8


def kiln_rows(kiln, runs):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    out = subprocess.run([kiln, "bench", "--only", "W8,W8i,W8w", "--runs", str(runs)],
                         capture_output=True, text=True, env=env, check=True).stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[1] in ("W8", "W8i", "W8w"):
            value, unit = cells[3].split()
            rows[cells[1]] = float(value) * {"s": 1e3, "ms": 1.0, "us": 1e-3}[unit]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", help="the kiln executable, for its W8 rows in the same sitting")
    parser.add_argument("--runs", type=int, default=5, help="sweeps timed per row")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--anchor", default=ANCHOR)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    kiln = kiln_rows(args.kiln, args.runs) if args.kiln else {}

    models = anchor_models(args.anchor)
    torch.manual_seed(8)
    model = models["GPT"](V, T, C, H, L)
    x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def loss_of(idx, targets):
        return F.cross_entropy(model(idx).view(-1, V), targets.reshape(-1))

    def sweep(loss_fn):
        for t in range(2, 52):
            model.zero_grad(set_to_none=True)
            loss_fn(x[:, :t], y[:, :t]).backward()

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def fresh_sweep():
        torch._dynamo.reset()
        sweep(torch.compile(loss_of))

    from torch._dynamo.utils import counters

    def graphs_of(fn):
        counters.clear()
        fn()
        return counters["stats"]["unique_graphs"]

    # Cold: an empty inductor cache for the first compile this process makes of the model.
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        cold = timed(fresh_sweep)
        graphs = graphs_of(fresh_sweep)
        fresh = statistics.median(timed(fresh_sweep) for _ in range(args.runs))
        compiled = torch.compile(loss_of)
        torch._dynamo.reset()
        sweep(compiled)
        warm = statistics.median(timed(lambda: sweep(compiled)) for _ in range(args.runs))
    sweep(loss_of)
    eager = statistics.median(timed(lambda: sweep(loss_of)) for _ in range(args.runs))

    print(f"W8: the char-GPT forward+backward at lengths 2..51, batch {B}, {args.threads} threads, "
          f"medians of {args.runs} sweeps (ms a sweep); torch.compile compiled {graphs} graphs "
          f"a sweep\n")
    print("| | Kiln | PyTorch | Kiln / PyTorch |")
    print("|---|---|---|---|")

    def row(name, ours, theirs):
        k = f"{ours:.1f}" if ours else "-"
        r = f"{ours / theirs:.2f}" if ours else "-"
        print(f"| {name} | {k} | {theirs:.1f} | {r} |")
    row("eager (W8)", kiln.get("W8"), eager)
    row("compile, fresh each sweep, code cache warm (W8i)", kiln.get("W8i"), fresh)
    row("compile, warm (W8w)", kiln.get("W8w"), warm)
    print(f"\ntorch.compile's first sweep with an empty inductor cache: {cold:.0f} ms")


if __name__ == "__main__":
    main()
