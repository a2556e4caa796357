// DataLoader (torch.utils.data.DataLoader for map-style datasets): batches of a Dataset's
// examples, in order or shuffled by a seeded generator, optionally fetched ahead by worker
// threads. The guide is docs/data.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  // The last batch when size() is not a multiple of batch_size: dropped, or kept short.
  bool drop_last = false;
  // Threads fetching and stacking batches ahead of the loop (0: on the calling thread when
  // the loop asks). Batches arrive in order either way.
  int num_workers = 0;
  // Batches each worker may have fetched ahead (torch's prefetch_factor).
  int prefetch_factor = 2;
  // The shuffle's seed: epoch e's order is a function of (seed, e). Unset: each epoch draws
  // its seed from Kiln's generator (kiln::manual_seed makes the run repeatable), as torch's
  // RandomSampler draws from torch's.
  std::optional<uint64_t> seed;
};

// Iterating a DataLoader is one epoch: every index of the dataset once (shuffled or in
// order), in batches whose fields are the examples' fields stacked along a new dim 0. Each
// begin() starts a new epoch; leaving the loop early stops the workers.
//   DataLoader loader(std::make_shared<MNIST>("data/MNIST/raw"), {.batch_size = 64, .shuffle =
//   true}); for (const Example& batch : loader) { ... batch.data [64, 1, 28, 28], batch.target [64]
//   ... }
// An exception thrown by the dataset's get is rethrown, unchanged, by the iteration that
// reaches its batch.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  class Epoch;
  class Iterator {
   public:
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using reference = const Example&;
    using pointer = const Example*;
    using iterator_category = std::input_iterator_tag;
    Iterator() = default;
    const Example& operator*() const { return current_; }
    const Example* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return done() == other.done(); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Epoch> epoch);
    bool done() const { return !epoch_; }
    std::shared_ptr<Epoch> epoch_;  // null: the end
    Example current_;
  };

  Iterator begin();
  Iterator end() const { return Iterator(); }
  // Batches per epoch.
  int64_t size() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epochs_started_ = 0;
};

// The order in which epoch `epoch` (0, 1, ...) visits a dataset of `size` examples: 0 .. size-1,
// or shuffled (what DataLoader::begin uses; the Python DataLoader shares it).
std::vector<int64_t> epoch_order(int64_t size, bool shuffle, std::optional<uint64_t> seed,
                                 int64_t epoch);

// Stacks examples into a batch (torch's default_collate for (data, target) pairs): each field
// stacked along a new dim 0; ShapeError naming the first example whose shape differs.
Example collate(const std::vector<Example>& examples);

}  // namespace kiln::data
