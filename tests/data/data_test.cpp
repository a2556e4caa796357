// Datasets and the DataLoader: batching, short and dropped last batches, seeded shuffling
// (repeatable, a permutation per epoch), workers giving the same batches in order, errors from
// a dataset arriving unchanged, leaving a loop early; the MNIST (IDX) and CIFAR-10 readers on
// small files the tests write, and their errors.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::data;

template <typename Fn>
void expect_error_containing(Fn&& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// 10 examples: data row i is [i, 10 * i], target i.
std::shared_ptr<TensorDataset> counting_dataset(int64_t n = 10) {
  std::vector<double> data;
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < n; ++i) {
    data.push_back(static_cast<double>(i));
    data.push_back(static_cast<double>(10 * i));
    targets.push_back(i);
  }
  return std::make_shared<TensorDataset>(tensor(data, {n, 2}), tensor(targets));
}

// The targets of each batch of one epoch.
std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Example& batch : loader) {
    out.push_back(batch.target.to_vector<int64_t>());
    // The data travels with its target: row i is [i, 10 i].
    const std::vector<double> d = batch.data.to_vector<double>();
    for (size_t k = 0; k < out.back().size(); ++k) {
      EXPECT_EQ(d[2 * k], static_cast<double>(out.back()[k]));
      EXPECT_EQ(d[2 * k + 1], 10.0 * static_cast<double>(out.back()[k]));
    }
  }
  return out;
}

TEST(TensorDataset, IndexesAlongDimZero) {
  auto ds = counting_dataset(4);
  EXPECT_EQ(ds->size(), 4);
  Example e = ds->get(2);
  EXPECT_EQ(e.data.to_vector<double>(), (std::vector<double>{2, 20}));
  EXPECT_EQ(e.target.item<int64_t>(), 2);
  expect_error_containing([&] { ds->get(4); }, "index 4 is out of range for a dataset of 4");
  expect_error_containing(
      [] {
        TensorDataset(randn({3, 2}), tensor({1, 2}));
      },
      "3 examples of data (shape [3, 2]) but 2 targets");
  expect_error_containing([] { TensorDataset(tensor({1.0}).sum()); }, "0-d");
  TensorDataset unlabeled(randn({5, 3}));
  EXPECT_FALSE(unlabeled.get(0).target.defined());
}

TEST(DataLoader, BatchesInOrderWithAShortOrDroppedLastBatch) {
  DataLoader loader(counting_dataset(), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  EXPECT_EQ(epoch_targets(loader),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  DataLoader dropping(counting_dataset(), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.size(), 2);
  EXPECT_EQ(epoch_targets(dropping).size(), 2u);
  // Batches stack examples along a new dim 0.
  for (const Example& b : dropping) {
    EXPECT_EQ(b.data.sizes(), (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(b.target.sizes(), (std::vector<int64_t>{4}));
  }
  // An empty dataset has no batches.
  DataLoader empty(std::make_shared<TensorDataset>(randn({0, 2})), {.batch_size = 3});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.begin() == empty.end());
}

TEST(DataLoader, ASeededShuffleIsRepeatableAndAPermutationEachEpoch) {
  DataLoaderOptions o{.batch_size = 3, .shuffle = true, .seed = 1234};
  DataLoader a(counting_dataset(), o), b(counting_dataset(), o);
  const auto a1 = epoch_targets(a), a2 = epoch_targets(a);
  EXPECT_EQ(a1, epoch_targets(b));  // the same seed, the same epochs
  EXPECT_EQ(a2, epoch_targets(b));
  EXPECT_NE(a1, a2);  // each epoch its own order
  for (const auto& epoch : {a1, a2}) {
    std::vector<int64_t> all;
    for (const auto& batch : epoch) all.insert(all.end(), batch.begin(), batch.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
  DataLoader other(counting_dataset(), {.batch_size = 3, .shuffle = true, .seed = 99});
  EXPECT_NE(epoch_targets(other), a1);
  // Unseeded: drawn from Kiln's generator, so manual_seed repeats it.
  DataLoader c(counting_dataset(), {.batch_size = 3, .shuffle = true});
  manual_seed(5);
  const auto c1 = epoch_targets(c);
  manual_seed(5);
  EXPECT_EQ(epoch_targets(c), c1);
}

TEST(DataLoader, WorkersGiveTheSameBatchesInOrder) {
  auto ds = counting_dataset(103);
  DataLoaderOptions serial{.batch_size = 8, .shuffle = true, .seed = 7};
  DataLoader one(ds, serial);
  const auto want = epoch_targets(one);
  for (int workers : {1, 2, 3}) {
    for (int prefetch : {1, 4}) {
      DataLoaderOptions o = serial;
      o.num_workers = workers;
      o.prefetch_factor = prefetch;
      DataLoader loader(ds, o);
      EXPECT_EQ(epoch_targets(loader), want) << workers << " workers, prefetch " << prefetch;
    }
  }
}

TEST(DataLoader, LeavingALoopEarlyStopsTheWorkers) {
  DataLoader loader(counting_dataset(1000), {.batch_size = 2, .num_workers = 2});
  int seen = 0;
  for (const Example& b : loader) {
    (void)b;
    if (++seen == 3) break;  // the epoch (and its workers) end with the iterator
  }
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(epoch_targets(loader).size(), 500u);  // a new epoch from the start
}

// A dataset whose example 5 cannot be read.
class FailingDataset : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Example get(int64_t index) const override {
    KILN_CHECK(index != 5, ValueError, "example 5 is damaged");
    return {full({2}, static_cast<double>(index)), Tensor()};
  }
};

TEST(DataLoader, AnErrorFromTheDatasetArrivesUnchangedAtItsBatch) {
  for (int workers : {0, 2}) {
    DataLoader loader(std::make_shared<FailingDataset>(),
                      {.batch_size = 2, .num_workers = workers});
    int batches = 0;
    try {
      for (const Example& b : loader) {
        EXPECT_FALSE(b.target.defined());
        ++batches;
      }
      ADD_FAILURE() << "expected the dataset's error";
    } catch (const ValueError& e) {
      EXPECT_STREQ(e.what(), "example 5 is damaged");
    }
    EXPECT_EQ(batches, 2) << workers << " workers";  // batches 0 and 1; batch 2 holds 4 and 5
  }
}

TEST(DataLoader, BadOptionsAndUnstackableExamples) {
  expect_error_containing([] { DataLoader(counting_dataset(), {.batch_size = 0}); },
                          "batch_size should be a positive integer, got 0");
  expect_error_containing([] { DataLoader(counting_dataset(), {.num_workers = -1}); },
                          "num_workers should be 0 or more");
  expect_error_containing([] { DataLoader(nullptr); }, "the dataset is null");
  expect_error_containing(
      [] {
        collate({{randn({2}), Tensor()}, {randn({3}), Tensor()}});
      },
      "example 1's data has shape [3] but example 0's has [2]");
}

// pytorch/examples' mnist loop in small: conv, relu, pool, linear, log_softmax and nll_loss,
// batches from a shuffled DataLoader with a worker, Adadelta and StepLR; the step compiled
// with inductor trains exactly as eagerly, one graph for every step of both epochs.
TEST(DataLoader, AnMnistStyleLoopTrainsTheSameEagerlyAndCompiled) {
  manual_seed(21);
  auto ds = std::make_shared<TensorDataset>(randn({24, 1, 10, 10}), randint(0, 10, {24}));
  auto make = [] {
    manual_seed(22);
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Conv2d>(1, 4, std::vector<int64_t>{3}))
        .push_back(std::make_shared<nn::ReLU>())
        .push_back(std::make_shared<nn::MaxPool2d>(std::vector<int64_t>{2}))
        .push_back(std::make_shared<nn::Flatten>())
        .push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 10));
    return net;
  };
  auto train = [&](bool compiled) {
    auto net = make();
    optim::Adadelta opt(net->parameters(), {.lr = 1.0});
    optim::StepLR scheduler(opt, 1, 0.7);
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = nll_loss(log_softmax(net->forward(x), 1), y);
      loss.backward();
      opt.step();
      return loss;
    };
    CompileProfiler prof;
    auto compiled_step = compile(step, {.backend = std::string("inductor"), .name = "mnist_step"});
    DataLoader loader(
        ds, {.batch_size = 8, .shuffle = true, .drop_last = true, .num_workers = 1, .seed = 3});
    std::vector<double> losses;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const Example& batch : loader)
        losses.push_back(
            (compiled ? compiled_step(batch.data, batch.target) : step(batch.data, batch.target))
                .item<double>());
      scheduler.step();
    }
    if (compiled) EXPECT_EQ(prof.stats()["mnist_step"].graphs, 1);
    return losses;
  };
  const std::vector<double> eager = train(false), compiled = train(true);
  ASSERT_EQ(eager.size(), 6u);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(compiled[i], eager[i], 1e-5) << i;
  EXPECT_LT(eager.back(), eager.front());
}

// ---- readers ----

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "kiln_data_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write(const std::string& p, const std::vector<unsigned char>& bytes) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  // An IDX file of unsigned bytes with `dims`, element i = fill(i).
  static std::vector<unsigned char> idx(std::vector<uint32_t> dims, int (*fill)(size_t)) {
    std::vector<unsigned char> b = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
      n *= d;
    }
    for (size_t i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(fill(i)));
    return b;
  }
  fs::path dir_;
};

TEST_F(DataFiles, MNISTReadsItsIdxFiles) {
  write(path("train-images-idx3-ubyte"), idx({3, 28, 28}, [](size_t i) { return int(i % 256); }));
  write(path("train-labels-idx1-ubyte"), idx({3}, [](size_t i) { return int(7 - i); }));
  MNIST mnist(dir_.string());
  ASSERT_EQ(mnist.size(), 3);
  Example e = mnist.get(1);
  EXPECT_EQ(e.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(e.data.dtype(), DType::Float32);
  EXPECT_EQ(e.target.item<int64_t>(), 6);
  // Pixel (1, 0, 0, 5) is byte 784 + 5 of the data: (789 % 256) / 255.
  EXPECT_FLOAT_EQ(e.data.to_vector<float>()[5], static_cast<float>(789 % 256) / 255.0f);
  DataLoader loader(std::make_shared<MNIST>(dir_.string()), {.batch_size = 2});
  EXPECT_EQ(loader.begin()->data.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  // The test split is missing; the files it names are in the message.
  expect_error_containing([&] { MNIST(dir_.string(), false); }, "t10k-images-idx3-ubyte");
}

TEST_F(DataFiles, IdxErrorsNameTheFileAndTheProblem) {
  write(path("short"), {0, 0, 0x08, 1, 0, 0, 0, 5, 1, 2});
  expect_error_containing(
      [&] { read_idx(path("short"), 1); },
      "has 2 bytes of data after its header, but its dims [5] need 5 (truncated)");
  write(path("long"), {0, 0, 0x08, 1, 0, 0, 0, 1, 1, 2});
  expect_error_containing([&] { read_idx(path("long"), 1); }, "(trailing bytes)");
  write(path("magic"), {1, 2, 3, 4});
  expect_error_containing([&] { read_idx(path("magic"), 1); }, "is not an IDX file");
  write(path("floats"), {0, 0, 0x0D, 1, 0, 0, 0, 0});
  expect_error_containing([&] { read_idx(path("floats"), 1); }, "elements of type 0xd");
  expect_error_containing([&] { read_idx(path("short"), 3); }, "has 1 dims, expected 3");
  write(path("train-images-idx3-ubyte.gz"), {0x1f, 0x8b});
  expect_error_containing([&] { MNIST m(dir_.string()); }, "unpack it first");
  write(path("train-images-idx3-ubyte"), idx({2, 28, 28}, [](size_t) { return 0; }));
  write(path("train-labels-idx1-ubyte"), idx({3}, [](size_t) { return 0; }));
  expect_error_containing([&] { MNIST m(dir_.string()); }, "has 2 images but");
}

TEST_F(DataFiles, CIFAR10ReadsItsBinaryBatches) {
  auto batch = [](int records, int first_label) {
    std::vector<unsigned char> b;
    for (int r = 0; r < records; ++r) {
      b.push_back(static_cast<unsigned char>(first_label + r));
      for (int i = 0; i < 3072; ++i) b.push_back(static_cast<unsigned char>((r + i) % 256));
    }
    return b;
  };
  for (int k = 1; k <= 5; ++k) write(path("data_batch_" + std::to_string(k) + ".bin"), batch(2, k));
  write(path("test_batch.bin"), batch(1, 0));
  CIFAR10 train(dir_.string());
  ASSERT_EQ(train.size(), 10);
  EXPECT_EQ(train.targets().to_vector<int64_t>(),
            (std::vector<int64_t>{1, 2, 2, 3, 3, 4, 4, 5, 5, 6}));
  Example e = train.get(1);
  EXPECT_EQ(e.data.sizes(), (std::vector<int64_t>{3, 32, 32}));
  // Record 1 of its file: pixel i is (1 + i) % 256, channel-major as stored.
  EXPECT_FLOAT_EQ(e.data.to_vector<float>()[1024], static_cast<float>((1 + 1024) % 256) / 255.0f);
  EXPECT_EQ(CIFAR10(dir_.string(), false).size(), 1);
  std::vector<unsigned char> bad = batch(1, 0);
  bad[0] = 12;
  write(path("test_batch.bin"), bad);
  expect_error_containing([&] { CIFAR10(dir_.string(), false); }, "record 0 has label 12");
  bad.pop_back();
  write(path("test_batch.bin"), bad);
  expect_error_containing([&] { CIFAR10(dir_.string(), false); }, "not a whole number of 3073");
}

}  // namespace
