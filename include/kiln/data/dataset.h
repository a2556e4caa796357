// Datasets (torch.utils.data.Dataset / TensorDataset, torchvision's MNIST and CIFAR10 from
// their files): indexable collections of examples that a DataLoader (kiln/data/dataloader.h)
// batches. The guide is docs/data.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::data {

// One example, or a batch of them (each field stacked along a new dim 0). `target` is
// undefined for a dataset without labels.
struct Example {
  Tensor data;
  Tensor target;
};

// A map-style dataset: size() examples, get(i) for 0 <= i < size(). A DataLoader with workers
// calls get from several threads at once, so get must not change the dataset (it is const);
// the datasets below all qualify.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Example i is row i of `data` and of `targets` (torch.utils.data.TensorDataset with two
// tensors; `targets` may be undefined). Throws ValueError when they are 0-d or differ in their
// first dim.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(Tensor data, Tensor targets = {});
  int64_t size() const override;
  Example get(int64_t index) const override;  // IndexError outside [0, size())
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

// ---- the files of the classic image datasets (no downloading: point at the files) ----

// An IDX file (MNIST's format: big-endian magic 0x00000803 for images, 0x00000801 for
// labels, then the dims) as a tensor: images float32 [N, rows, cols] scaled to [0, 1] (as
// torchvision's ToTensor), labels int64 [N]. Throws ValueError naming the file and what is
// wrong (missing, wrong magic, truncated, trailing bytes); `expected_dims` 3 or 1.
Tensor read_idx(const std::string& path, int expected_dims);

// MNIST from `root`: train-images-idx3-ubyte and train-labels-idx1-ubyte (train) or
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, as torchvision stores them in
// MNIST/raw (a name with ".gz" is not read: unpack it first). Examples: a float32 [1, 28, 28]
// image in [0, 1] and an int64 label.
class MNIST : public TensorDataset {
 public:
  MNIST(const std::string& root, bool train = true);
};

// CIFAR-10 from its binary version's folder (cifar-10-batches-bin): data_batch_1.bin ..
// data_batch_5.bin (train) or test_batch.bin; each record a label byte and 3 x 32 x 32 pixel
// bytes. Examples: a float32 [3, 32, 32] image in [0, 1] and an int64 label.
class CIFAR10 : public TensorDataset {
 public:
  CIFAR10(const std::string& root, bool train = true);
};

// Reads CIFAR-10 binary batch files (one or more) into (images [N, 3, 32, 32], labels [N]).
Example read_cifar10_batches(const std::vector<std::string>& paths);

}  // namespace kiln::data
