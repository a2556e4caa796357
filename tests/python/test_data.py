"""kiln.utils.data: batching, shuffling under a seed, workers, collate, and the MNIST reader on
files the test writes."""
import struct

import numpy as np
import pytest

import kiln
from kiln.utils.data import DataLoader, Dataset, TensorDataset, MNIST, default_collate


def test_tensor_dataset_batches_in_order_and_drop_last():
    x = kiln.arange(10, dtype=kiln.float32).reshape(10, 1)
    y = kiln.arange(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and [b[1].tolist() for b in batches] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 1) and batches[0][0].dtype == kiln.float32
    dropped = DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True)
    assert len(dropped) == 2 and [b[1].tolist() for b in dropped] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_seeded_shuffle_repeats_and_each_epoch_differs():
    data = TensorDataset(kiln.arange(50))

    def epochs(loader):
        return [sum((b[0].tolist() for b in loader), []) for _ in range(2)]

    a, b = epochs(DataLoader(data, 8, shuffle=True, seed=3)), \
        epochs(DataLoader(data, 8, shuffle=True, seed=3))
    assert a == b and a[0] != a[1]
    assert sorted(a[0]) == list(range(50)) and sorted(a[1]) == list(range(50))
    assert epochs(DataLoader(data, 8, shuffle=True, seed=4)) != a
    # Unseeded: drawn from kiln's generator, so manual_seed repeats the run.
    kiln.manual_seed(9)
    c = epochs(DataLoader(data, 8, shuffle=True))
    kiln.manual_seed(9)
    assert epochs(DataLoader(data, 8, shuffle=True)) == c


class Squares(Dataset):
    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"example {i} is missing")
        return {"x": kiln.full((2,), float(i)), "label": i, "weight": 0.5 * i, "name": str(i)}


def test_a_python_dataset_collates_dicts_numbers_and_strings():
    batch = next(iter(DataLoader(Squares(5), batch_size=3)))
    assert batch["x"].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert batch["label"].dtype == kiln.int64 and batch["label"].tolist() == [0, 1, 2]
    assert batch["weight"].dtype == kiln.float64 and batch["weight"].tolist() == [0.0, 0.5, 1.0]
    assert batch["name"] == ["0", "1", "2"]
    pairs = default_collate([(np.ones(2, np.float32), 1), (np.zeros(2, np.float32), 2)])
    assert pairs[0].tolist() == [[1.0, 1.0], [0.0, 0.0]] and pairs[1].tolist() == [1, 2]
    with pytest.raises(ValueError, match="differ in shape"):
        default_collate([kiln.zeros(2), kiln.zeros(3)])


def test_workers_give_the_same_batches_and_raise_the_datasets_error_at_its_batch():
    serial = [b["x"].tolist() for b in DataLoader(Squares(23), batch_size=4)]
    threaded = [b["x"].tolist() for b in DataLoader(Squares(23), batch_size=4, num_workers=2)]
    assert threaded == serial
    seen = []
    with pytest.raises(KeyError, match="example 9 is missing"):
        for b in DataLoader(Squares(23, fail_at=9), batch_size=4, num_workers=2):
            seen.append(b["label"].tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for i, _ in enumerate(DataLoader(Squares(100), batch_size=1, num_workers=2)):
        if i == 3:
            break  # leaving early ends the epoch's workers


def write_idx(path, magic, dims, payload):
    path.write_bytes(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims)
                     + bytes(payload))


def test_mnist_reads_idx_files_and_trains_through_a_loader(tmp_path):
    n = 6
    pixels = [(i * 37) % 256 for i in range(n * 28 * 28)]
    write_idx(tmp_path / "train-images-idx3-ubyte", 0x803, (n, 28, 28), pixels)
    write_idx(tmp_path / "train-labels-idx1-ubyte", 0x801, (n,), [3, 1, 4, 1, 5, 9])
    mnist = MNIST(tmp_path)
    image, label = mnist[2]
    assert len(mnist) == n and image.shape == (1, 28, 28) and label.item() == 4
    expected = np.array(pixels, dtype=np.float32).reshape(n, 1, 28, 28)[2] / 255
    assert np.allclose(image.numpy(), expected)
    images, labels = next(iter(DataLoader(mnist, batch_size=4, shuffle=True, seed=1)))
    assert images.shape == (4, 1, 28, 28) and labels.dtype == kiln.int64
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte"):
        MNIST(tmp_path, train=False)
