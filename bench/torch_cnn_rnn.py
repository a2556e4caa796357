"""PyTorch's side of W10 (the mnist CNN step) and W11 (the 2-layer LSTM language-model step):
eager and torch.compile (default mode), the same models, shapes and optimizers as
bench/workloads.cpp, medians of `--runs` steps after warm-up, cold compile time apart:

    /tmp/torch2/bin/python bench/torch_cnn_rnn.py --threads 2 --runs 15

Run it right before or after `kiln bench --only W10,W10i,W11,W11i` and compare ratios.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=15)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} threads, ATen CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}")
    for name, make in (("W10", w10), ("W11", w11)):
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
