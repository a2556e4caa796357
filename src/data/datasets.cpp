// TensorDataset, and the MNIST (IDX) and CIFAR-10 (binary) readers.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/data/dataset.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"

namespace kiln::data {

namespace fs = std::filesystem;

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  KILN_CHECK(data_.defined(), ValueError, "TensorDataset: the data tensor is undefined");
  KILN_CHECK(data_.dim() >= 1, ValueError,
             "TensorDataset: the data tensor is 0-d; examples are indexed along dim 0");
  if (targets_.defined()) {
    KILN_CHECK(targets_.dim() >= 1, ValueError,
               "TensorDataset: the targets tensor is 0-d; examples are indexed along dim 0");
    KILN_CHECK(targets_.size(0) == data_.size(0), ValueError, "TensorDataset: ", data_.size(0),
               " examples of data (shape ", data_.shape_str(), ") but ", targets_.size(0),
               " targets (shape ", targets_.shape_str(), ")");
  }
}

int64_t TensorDataset::size() const { return data_.size(0); }

Example TensorDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), IndexError, "TensorDataset: index ", index,
             " is out of range for a dataset of ", size(), " examples");
  return {data_.select(0, index), targets_.defined() ? targets_.select(0, index) : Tensor()};
}

namespace {

// The whole file, or a ValueError naming it (and saying to unpack a gzip-compressed one).
std::string read_whole_file(const std::string& who, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string why = std::strerror(errno);
    std::error_code ec;
    KILN_CHECK(!fs::exists(path + ".gz", ec), ValueError, who, ": '", path, "' is missing, but '",
               path, ".gz' is there: unpack it first (gunzip -k)");
    KILN_CHECK(false, ValueError, who, ": cannot open '", path, "': ", why);
  }
  std::ostringstream os;
  os << in.rdbuf();
  KILN_CHECK(!in.bad(), ValueError, who, ": reading '", path, "' failed");
  return os.str();
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Bytes as float32 in [0, 1] (pixel / 255) or int64 (labels), shaped `sizes`.
Tensor pixels_from_bytes(const unsigned char* bytes, IntList sizes) {
  Tensor t = make_tensor(sizes, DType::Float32);
  float* out = t.data_ptr<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) out[i] = static_cast<float>(bytes[i]) / 255.0f;
  return t;
}
Tensor labels_from_bytes(const unsigned char* bytes, int64_t count, int64_t stride) {
  Tensor t = make_tensor({count}, DType::Int64);
  int64_t* out = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) out[i] = bytes[i * stride];
  return t;
}

}  // namespace

Tensor read_idx(const std::string& path, int expected_dims) {
  KILN_CHECK(expected_dims == 1 || expected_dims == 3, ValueError,
             "read_idx: expected_dims must be 1 (labels) or 3 (images), got ", expected_dims);
  const std::string bytes = read_whole_file("read_idx", path);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  KILN_CHECK(bytes.size() >= 4 && p[0] == 0 && p[1] == 0, ValueError, "read_idx: '", path,
             "' is not an IDX file (it does not start with two zero bytes)");
  KILN_CHECK(p[2] == 0x08, NotImplementedError, "read_idx: '", path, "' holds elements of type 0x",
             std::hex, int{p[2]}, std::dec,
             "; only unsigned bytes (0x08, MNIST's images and labels) are read");
  KILN_CHECK(p[3] == expected_dims, ValueError, "read_idx: '", path, "' has ", int{p[3]},
             " dims, expected ", expected_dims, expected_dims == 3 ? " (images)" : " (labels)");
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  KILN_CHECK(bytes.size() >= header, ValueError, "read_idx: '", path,
             "' is truncated inside its header (", bytes.size(), " bytes)");
  std::vector<int64_t> sizes;
  uint64_t elements = 1;
  for (int d = 0; d < expected_dims; ++d) {
    sizes.push_back(big_endian_u32(p + 4 + 4 * d));
    elements *= static_cast<uint64_t>(sizes.back());
  }
  KILN_CHECK(bytes.size() - header == elements, ValueError, "read_idx: '", path, "' has ",
             bytes.size() - header, " bytes of data after its header, but its dims ",
             IntList(sizes), " need ", elements,
             bytes.size() - header < elements ? " (truncated)" : " (trailing bytes)");
  if (expected_dims == 1) return labels_from_bytes(p + header, sizes[0], 1);
  return pixels_from_bytes(p + header, IntList(sizes));
}

MNIST::MNIST(const std::string& root, bool train)
    : TensorDataset([&] {
        const std::string prefix = (fs::path(root) / (train ? "train" : "t10k")).string();
        Tensor images = read_idx(prefix + "-images-idx3-ubyte", 3);
        Tensor labels = read_idx(prefix + "-labels-idx1-ubyte", 1);
        KILN_CHECK(images.size(0) == labels.size(0), ValueError, "MNIST: ", prefix,
                   "-images-idx3-ubyte has ", images.size(0), " images but ", prefix,
                   "-labels-idx1-ubyte has ", labels.size(0), " labels");
        return TensorDataset(images.unsqueeze(1), labels);
      }()) {}

Example read_cifar10_batches(const std::vector<std::string>& paths) {
  constexpr int64_t kPixels = 3 * 32 * 32, kRecord = 1 + kPixels;
  KILN_CHECK(!paths.empty(), ValueError, "CIFAR10: no batch files given");
  std::vector<Tensor> images, labels;
  for (const std::string& path : paths) {
    const std::string bytes = read_whole_file("CIFAR10", path);
    const auto size = static_cast<int64_t>(bytes.size());
    KILN_CHECK(size > 0 && size % kRecord == 0, ValueError, "CIFAR10: '", path, "' has ", size,
               " bytes, not a whole number of ", kRecord,
               "-byte records (a label byte and 3 x 32 x 32 pixels)");
    const int64_t n = size / kRecord;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    Tensor image = make_tensor({n, 3, 32, 32}, DType::Float32);
    float* out = image.data_ptr<float>();
    for (int64_t r = 0; r < n; ++r) {
      KILN_CHECK(p[r * kRecord] < 10, ValueError, "CIFAR10: '", path, "' record ", r, " has label ",
                 int{p[r * kRecord]}, "; CIFAR-10's labels are 0 to 9");
      for (int64_t i = 0; i < kPixels; ++i)
        out[r * kPixels + i] = static_cast<float>(p[r * kRecord + 1 + i]) / 255.0f;
    }
    images.push_back(image);
    labels.push_back(labels_from_bytes(p, n, kRecord));
  }
  return {cat(images, 0), cat(labels, 0)};
}

CIFAR10::CIFAR10(const std::string& root, bool train)
    : TensorDataset([&] {
        std::vector<std::string> paths;
        if (train)
          for (int b = 1; b <= 5; ++b)
            paths.push_back(
                (fs::path(root) / ("data_batch_" + std::to_string(b) + ".bin")).string());
        else
          paths.push_back((fs::path(root) / "test_batch.bin").string());
        Example all = read_cifar10_batches(paths);
        return TensorDataset(all.data, all.target);
      }()) {}

}  // namespace kiln::data
