"""W11's parts timed alone, the same code for Kiln's Python package and for PyTorch, to see
where a word-language-model step's time goes (docs/performance.md, "Why W11 is behind"):

    python bench/w11_parts.py kiln     # with kiln installed (pip install .)
    python bench/w11_parts.py torch    # in a virtualenv with torch

Medians of 15 calls after two warm-up calls, 2 threads, milliseconds.
"""
import sys
import time


def median_ms(fn, runs=15):
    fn()
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[runs // 2] * 1e3


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "kiln"
    if which == "torch":
        import torch as lib
        lib.set_num_threads(2)
    else:
        import kiln as lib
    lstm = lib.nn.LSTM(200, 200, 2)
    x = lib.randn(35, 20, 200, requires_grad=True)

    def lstm_forward():
        return lstm(x)[0]

    def lstm_step():
        lstm(x)[0].sum().backward()

    decoder = lib.nn.Linear(200, 10000)
    hidden = lib.randn(700, 200, requires_grad=True)
    targets = lib.randint(0, 10000, (700,))

    def decoder_step():
        lib.nn.functional.cross_entropy(decoder(hidden), targets).backward()

    logits = lib.randn(700, 10000)
    weight = lib.randn(10000, 200)
    for name, fn in [("LSTM(200, 200, 2) forward", lstm_forward),
                     ("LSTM(200, 200, 2) forward + backward", lstm_step),
                     ("decoder + cross entropy forward + backward", decoder_step),
                     ("addmm [700, 200] x [200, 10000]",
                      lambda: lib.addmm(decoder.bias, hidden.detach(), weight.t())),
                     ("mm [700, 10000] x [10000, 200]", lambda: lib.mm(logits, weight)),
                     ("mm [10000, 700] x [700, 200]", lambda: lib.mm(logits.t(), hidden.detach())),
                     ("log_softmax [700, 10000]", lambda: lib.log_softmax(logits, 1))]:
        print(f"{which}: {name}: {median_ms(fn):.2f} ms")


if __name__ == "__main__":
    main()
