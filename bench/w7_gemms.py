"""PyTorch's time for W7's matrix products alone (kiln bench's W7g), for a side-by-side run:

    /tmp/torch2/bin/python bench/w7_gemms.py --threads 2

Prints the median of `--runs` repetitions of one step's products (each Linear's forward,
input gradient and weight gradient; attention's batched products), as `kiln bench --only W7g`.
"""
import argparse
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--products", choices=["all", "linear", "attention"], default="all",
                        help="time only the Linear layers' products or only attention's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokens = 32 * 64
    products = []
    linear_shapes = [(128, 384, 4), (128, 128, 4), (128, 512, 4), (512, 128, 4), (128, 96, 1)]
    for fan_in, fan_out, count in linear_shapes if args.products != "attention" else []:
        x, w, g = torch.randn(tokens, fan_in), torch.randn(fan_out, fan_in), torch.randn(tokens, fan_out)
        for _ in range(count):
            products += [lambda x=x, w=w: x @ w.t(), lambda g=g, w=w: g @ w, lambda g=g, x=x: g.t() @ x]
    q, a = torch.randn(128, 64, 32), torch.randn(128, 64, 64)
    for _ in range(4 if args.products != "linear" else 0):
        products += [lambda: q @ q.transpose(1, 2), lambda: a @ q]
        products += [lambda: a.transpose(1, 2) @ q, lambda: a @ q] * 2

    def step():
        for p in products:
            p()

    for _ in range(3):
        step()
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    what = {"all": "W7's matrix products alone", "linear": "W7's Linear products alone",
            "attention": "W7's attention products alone"}[args.products]
    print(f"| W7g | {what} (PyTorch {torch.__version__}) | {times[len(times) // 2]:.2f} ms | {times[0]:.2f} ms |")


if __name__ == "__main__":
    main()
