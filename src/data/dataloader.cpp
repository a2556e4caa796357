// DataLoader: an epoch's order, batching, and the worker threads that fetch ahead.
#include "kiln/data/dataloader.h"

#include <omp.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kiln/autograd/autograd.h"
#include "kiln/core/random.h"
#include "kiln/ops/indexing.h"

namespace kiln::data {

Example collate(const std::vector<Example>& examples) {
  KILN_CHECK(!examples.empty(), ValueError, "collate: no examples to stack");
  const Example& first = examples.front();
  KILN_CHECK(first.data.defined(), ValueError, "collate: example 0's data is undefined");
  std::vector<Tensor> data, targets;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    KILN_CHECK(e.data.defined() && e.data.sizes() == first.data.sizes(), ShapeError,
               "collate: example ", i, "'s data has shape ",
               e.data.defined() ? e.data.shape_str() : "(undefined)", " but example 0's has ",
               first.data.shape_str(), "; a batch stacks examples of one shape");
    KILN_CHECK(e.target.defined() == first.target.defined(), ValueError, "collate: example ", i,
               (e.target.defined() ? " has a target but example 0 has none"
                                   : " has no target but example 0 has one"));
    if (e.target.defined())
      KILN_CHECK(e.target.sizes() == first.target.sizes(), ShapeError, "collate: example ", i,
                 "'s target has shape ", e.target.shape_str(), " but example 0's has ",
                 first.target.shape_str());
    data.push_back(e.data);
    if (e.target.defined()) targets.push_back(e.target);
  }
  return {stack(data, 0), targets.empty() ? Tensor() : stack(targets, 0)};
}

// One pass over the dataset: its order, and (with workers) the batches fetched so far.
class DataLoader::Epoch {
 public:
  Epoch(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> order,
        const DataLoaderOptions& o)
      : dataset_(std::move(dataset)),
        order_(std::move(order)),
        batch_size_(o.batch_size),
        num_batches_(o.drop_last
                         ? static_cast<int64_t>(order_.size()) / o.batch_size
                         : (static_cast<int64_t>(order_.size()) + o.batch_size - 1) / o.batch_size),
        ahead_(static_cast<int64_t>(o.num_workers) * o.prefetch_factor) {
    for (int w = 0; w < o.num_workers && num_batches_ > 0; ++w)
      workers_.emplace_back([this] { work(); });
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  // The next batch in order; false at the end of the epoch. Rethrows what fetching it threw.
  bool next(Example& out) {
    if (next_yield_ >= num_batches_) return false;
    if (workers_.empty()) {
      out = fetch(next_yield_++);
      return true;
    }
    Fetched fetched;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [&] { return ready_.count(next_yield_) > 0; });
      auto it = ready_.find(next_yield_);
      fetched = std::move(it->second);
      ready_.erase(it);
      ++next_yield_;
    }
    work_cv_.notify_all();  // room for one more batch ahead
    if (fetched.error) std::rethrow_exception(fetched.error);
    out = std::move(fetched.batch);
    return true;
  }

 private:
  struct Fetched {
    Example batch;
    std::exception_ptr error;
  };

  // Batch b: the examples at positions [b * batch_size, ...) of the order, stacked.
  Example fetch(int64_t b) const {
    NoGradGuard no_grad;
    const int64_t begin = b * batch_size_;
    const int64_t end = std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(order_.size()));
    std::vector<Example> examples;
    examples.reserve(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i)
      examples.push_back(dataset_->get(order_[static_cast<size_t>(i)]));
    return collate(examples);
  }

  void work() {
    // One thread per worker: the stacking runs single-threaded, so workers and the training
    // loop's own threads do not oversubscribe the cores.
    omp_set_num_threads(1);
    for (;;) {
      int64_t b = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] {
          return stop_ || next_fetch_ >= num_batches_ || next_fetch_ < next_yield_ + ahead_;
        });
        if (stop_ || next_fetch_ >= num_batches_) return;
        b = next_fetch_++;
      }
      Fetched fetched;
      try {
        fetched.batch = fetch(b);
      } catch (...) {
        fetched.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace(b, std::move(fetched));
      }
      ready_cv_.notify_all();
    }
  }

  const std::shared_ptr<const Dataset> dataset_;
  const std::vector<int64_t> order_;
  const int64_t batch_size_, num_batches_, ahead_;
  int64_t next_yield_ = 0;  // (read by workers under mu_; written under mu_ with workers)
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  int64_t next_fetch_ = 0;
  std::map<int64_t, Fetched> ready_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  KILN_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  KILN_CHECK(options_.batch_size >= 1, ValueError,
             "DataLoader: batch_size should be a positive integer, got ", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, ValueError,
             "DataLoader: num_workers should be 0 or more, got ", options_.num_workers);
  KILN_CHECK(options_.prefetch_factor >= 1, ValueError,
             "DataLoader: prefetch_factor should be 1 or more, got ", options_.prefetch_factor);
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size();
  return options_.drop_last ? n / options_.batch_size
                            : (n + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> epoch_order(int64_t size, bool shuffle, std::optional<uint64_t> seed,
                                 int64_t epoch) {
  KILN_CHECK(size >= 0, ValueError, "DataLoader: the dataset's size is negative (", size, ")");
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    // Epoch e of a seeded loader: the seed's stream, e epochs in; unseeded: a seed drawn from
    // Kiln's generator. Fisher-Yates, each swap partner drawn as a 64-bit fraction of i + 1.
    const uint64_t s =
        seed ? *seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(epoch)
             : static_cast<uint64_t>(randint(0, int64_t{1} << 62, {}).item<int64_t>());
    std::mt19937_64 rng(s);
    for (int64_t i = size - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(
          (static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1)) >> 64);
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  return order;
}

DataLoader::Iterator DataLoader::begin() {
  std::vector<int64_t> order =
      epoch_order(dataset_->size(), options_.shuffle, options_.seed, epochs_started_++);
  return Iterator(std::make_shared<Epoch>(dataset_, std::move(order), options_));
}

DataLoader::Iterator::Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (epoch_ && !epoch_->next(current_)) {
    epoch_.reset();  // the end: the workers stop with the epoch
    current_ = {};
  }
  return *this;
}

}  // namespace kiln::data
