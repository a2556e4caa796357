"""kiln.utils.data: torch.utils.data's Dataset, TensorDataset, DataLoader and default_collate,
with MNIST and CIFAR10 read from their files by the C++ readers (no downloading).

A DataLoader batches any map-style dataset (`__len__` and `__getitem__`): in order, or shuffled
in the order the C++ DataLoader uses for the same seed (`seed=`; unset, each epoch draws one
from kiln's generator, so `kiln.manual_seed` makes a run repeatable). `num_workers` threads fetch
batches ahead, in order; an exception raised fetching a batch is raised, unchanged, by the
iteration that reaches it.
"""
import collections.abc
import numbers
import os
from concurrent.futures import ThreadPoolExecutor

from .. import _C

_ops = _C.functions.top  # kiln.<op> (kiln itself may still be importing)

__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate", "MNIST", "CIFAR10"]


class Dataset:
    """A map-style dataset: subclasses define __getitem__(index) and __len__()."""

    def __getitem__(self, index):
        raise _C.NotImplementedError(f"{type(self).__name__} does not define __getitem__")

    def __len__(self):
        raise _C.NotImplementedError(f"{type(self).__name__} does not define __len__")


class TensorDataset(Dataset):
    """Example i is (t[i] for t in tensors); every tensor has the same first dim."""

    def __init__(self, *tensors):
        if not tensors:
            raise _C.ValueError("TensorDataset needs at least one tensor")
        for t in tensors:
            if not isinstance(t, _C.Tensor) or t.dim() == 0:
                raise _C.ValueError("TensorDataset: every argument must be a tensor with a first "
                                    "dim")
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) != 1:
            raise _C.ValueError(f"TensorDataset: the tensors differ in their first dim: {sizes}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class MNIST(TensorDataset):
    """MNIST from `root` holding train-images-idx3-ubyte / train-labels-idx1-ubyte (train) or the
    t10k- pair, as torchvision keeps them in MNIST/raw: examples (float32 [1, 28, 28] in [0, 1],
    int64 label). The files must be unpacked (no .gz) and are never downloaded."""

    def __init__(self, root, train=True):
        super().__init__(*_C.data.mnist(os.fspath(root), bool(train)))
        self.data, self.targets = self.tensors


class CIFAR10(TensorDataset):
    """CIFAR-10 from its binary version's folder (cifar-10-batches-bin): examples (float32
    [3, 32, 32] in [0, 1], int64 label)."""

    def __init__(self, root, train=True):
        super().__init__(*_C.data.cifar10(os.fspath(root), bool(train)))
        self.data, self.targets = self.tensors


def default_collate(batch):
    """torch's default_collate: tensors stacked along a new dim 0, Python floats into a
    float64 tensor and ints into an int64 one, NumPy arrays as tensors stacked, and tuples,
    lists and dicts collated field by field; strings stay a list."""
    first = batch[0]
    if isinstance(first, _C.Tensor):
        shapes = {tuple(t.shape) for t in batch}
        if len(shapes) != 1:
            raise _C.ShapeError(f"default_collate: the examples' tensors differ in shape: "
                                f"{sorted(shapes)}")
        return _ops["stack"](list(batch))
    if type(first).__module__ == "numpy" and hasattr(first, "shape"):
        import numpy as np
        return _C.from_numpy(np.ascontiguousarray(np.stack(batch)))
    if isinstance(first, bool):
        return _C.tensor(list(batch))
    if isinstance(first, numbers.Integral):
        return _C.tensor(list(batch), dtype=_C.int64)
    if isinstance(first, numbers.Real):
        return _C.tensor([float(x) for x in batch], dtype=_C.float64)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, collections.abc.Mapping):
        return {key: default_collate([example[key] for example in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
        return type(first)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(first, collections.abc.Sequence):
        if len({len(example) for example in batch}) != 1:
            raise _C.ValueError("default_collate: the examples are sequences of different "
                                "lengths")
        fields = [default_collate(list(field)) for field in zip(*batch)]
        return tuple(fields) if isinstance(first, tuple) else fields
    raise TypeError(f"default_collate: cannot batch examples of type {type(first).__name__}")


class DataLoader:
    """Batches of a map-style dataset, one epoch per iteration (torch.utils.data.DataLoader).

    `seed` (kiln's, in place of torch's `generator`): epoch e's shuffled order is a function of
    (seed, e). `num_workers` threads fetch up to `prefetch_factor` batches each ahead."""

    def __init__(self, dataset, batch_size=1, shuffle=False, *, drop_last=False, num_workers=0,
                 collate_fn=None, prefetch_factor=2, seed=None):
        if batch_size is None or int(batch_size) < 1:
            raise _C.ValueError(f"DataLoader: batch_size must be at least 1, got {batch_size}")
        if int(num_workers) < 0:
            raise _C.ValueError(f"DataLoader: num_workers must be >= 0, got {num_workers}")
        if int(prefetch_factor) < 1:
            raise _C.ValueError(f"DataLoader: prefetch_factor must be >= 1, got "
                                f"{prefetch_factor}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.num_workers = int(num_workers)
        self.prefetch_factor = int(prefetch_factor)
        self.collate_fn = collate_fn if collate_fn is not None else default_collate
        self.seed = seed
        self._epochs = 0

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _fetch(self, indices):
        dataset = self.dataset
        # A TensorDataset batched by default_collate: one index_select per tensor, the same
        # values as stacking its rows.
        if type(dataset) in (TensorDataset, MNIST, CIFAR10) and self.collate_fn is default_collate:
            at = _C.tensor(indices, dtype=_C.int64)
            return tuple(_ops["index_select"](t, 0, at) for t in dataset.tensors)
        return self.collate_fn([dataset[i] for i in indices])

    def __iter__(self):
        n = len(self.dataset)
        order = _C.data.epoch_order(n, self.shuffle,
                                    None if self.seed is None else int(self.seed), self._epochs)
        self._epochs += 1
        stop = len(self) * self.batch_size if self.drop_last else n
        batches = [order[b:min(b + self.batch_size, stop)] for b in range(0, stop, self.batch_size)]
        if self.num_workers == 0:
            return (self._fetch(indices) for indices in batches)
        return self._prefetched(batches)

    def _prefetched(self, batches):
        ahead = self.num_workers * self.prefetch_factor
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="kiln-data") as pool:
            pending = collections.deque()
            try:
                for indices in batches:
                    pending.append(pool.submit(self._fetch, indices))
                    if len(pending) >= ahead:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:  # leaving the loop early: batches not started are dropped
                for future in pending:
                    future.cancel()
