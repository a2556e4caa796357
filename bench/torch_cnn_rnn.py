"""PyTorch's side of W9 (a ResNet-18 step), W10 (the mnist CNN step) and W11 (the 2-layer LSTM
language-model step):
eager and torch.compile (default mode), the same models, shapes and optimizers as
bench/workloads.cpp, medians of `--runs` steps after warm-up, cold compile time apart:

    /tmp/torch2/bin/python bench/torch_cnn_rnn.py --threads 2 --runs 15

Run it right before or after `kiln bench --only W9,W9i,W10,W10i,W11,W11i` and compare ratios,
or let it alternate with Kiln round by round (`--paired`: each round a `kiln bench` process
timing the workload eager and compiled, then the same number of PyTorch eager and torch.compile
steps; per-round ratios, their medians and ranges):

    /tmp/torch2/bin/python bench/torch_cnn_rnn.py --paired build/release/tools/kiln/kiln \
        --only W9 --rounds 5 --runs 11
"""
import argparse
import os
import statistics
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.down(x) if self.down is not None else x))


def resnet18():
    """torchvision's ResNet-18 layout, as bench/workloads.cpp builds it."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width in (64, 128, 256, 512):
        layers += [BasicBlock(cin, width, 1 if width == 64 else 2), BasicBlock(width, width, 1)]
        cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


class MnistNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = torch.flatten(self.dropout1(x), 1)
        return F.log_softmax(self.fc2(self.dropout2(F.relu(self.fc1(x)))), dim=1)


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10000, 200)
        self.lstm = nn.LSTM(200, 200, num_layers=2)
        self.head = nn.Linear(200, 10000)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


def w9():
    torch.manual_seed(9)
    net = resnet18()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 1000, (16,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def w10():
    torch.manual_seed(10)
    net = MnistNet()
    opt = torch.optim.Adadelta(net.parameters(), lr=1.0)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        loss = F.nll_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def w11():
    torch.manual_seed(11)
    model = LanguageModel()
    opt = torch.optim.SGD(model.parameters(), lr=20)
    tokens, targets = torch.randint(0, 10000, (35, 20)), torch.randint(0, 10000, (35, 20))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(tokens).reshape(-1, 10000), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss
    return step


def timed(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, min(times) * 1e3


def kiln_medians(kiln, ids, runs):
    """`kiln bench --only <ids> --runs <runs>` in a fresh process: each workload's median and
    min in ms."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    env.setdefault("KILN_CACHE_DIR", "/tmp/kiln-paired-cache")
    out = subprocess.run([kiln, "bench", "--only", ",".join(ids), "--runs", str(runs)],
                         capture_output=True, text=True, env=env, check=True).stdout

    def ms(cell):
        value, unit = cell.split()
        return float(value) * {"s": 1e3, "ms": 1.0, "us": 1e-3}[unit]
    result = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[1] in ids:
            result[cells[1]] = (ms(cells[3]), ms(cells[4]))  # median, min
    return result


def paired(kiln, name, make, rounds, runs):
    """Kiln's eager and compiled step against PyTorch's, round by round."""
    eager, compiled = make(), torch.compile(make())
    for _ in range(3):
        eager()
        compiled()
    print(f"{name}: kiln {name} / {name}i against PyTorch eager / torch.compile, medians of "
          f"{runs} steps a round")
    ratios = {"eager": [], "compiled": []}
    for r in range(rounds):
        k = kiln_medians(kiln, [name, name + "i"], runs)
        # (a step of each untimed first, as kiln bench warms up: the first after the Kiln
        # process finds cold caches and freed memory)
        eager()
        torch_eager, _ = timed(eager, runs)
        compiled()
        torch_compiled, _ = timed(compiled, runs)
        ratios["eager"].append(k[name][0] / torch_eager)
        ratios["compiled"].append(k[name + "i"][0] / torch_compiled)
        print(f"round {r}: kiln {k[name][0]:.1f} / {k[name + 'i'][0]:.1f} ms, PyTorch "
              f"{torch_eager:.1f} / {torch_compiled:.1f} ms, ratios {ratios['eager'][-1]:.2f} / "
              f"{ratios['compiled'][-1]:.2f}", flush=True)
    for kind, values in ratios.items():
        print(f"{name} {kind} ratio (kiln / PyTorch): median {statistics.median(values):.2f}, "
              f"range {min(values):.2f}-{max(values):.2f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--only", default="W9,W10,W11", help="comma list of W9, W10, W11")
    p.add_argument("--paired", metavar="KILN", help="the kiln executable: alternate with it")
    p.add_argument("--rounds", type=int, default=5, help="rounds of --paired")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    print(f"torch {torch.__version__}, {a.threads} threads, ATen CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}")
    for name, make in (("W9", w9), ("W10", w10), ("W11", w11)):
        if name not in a.only.split(","):
            continue
        if a.paired:
            paired(a.paired, name, make, a.rounds, a.runs)
            continue
        step = make()
        step()
        med, lo = timed(step, a.runs)
        print(f"{name} eager: median {med:.2f} ms (min {lo:.2f})")
        compiled = torch.compile(make())
        t0 = time.perf_counter()
        compiled()
        cold = time.perf_counter() - t0
        compiled()
        med, lo = timed(compiled, a.runs)
        print(f"{name} torch.compile: median {med:.2f} ms (min {lo:.2f}), first call {cold:.1f} s")


if __name__ == "__main__":
    main()
