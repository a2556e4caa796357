// The standard layers (torch.nn), each initialised as PyTorch initialises it by default.
#pragma once

#include <optional>
#include <string>

#include "kiln/core/random.h"
#include "kiln/nn/module.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/nn.h"

namespace kiln::nn {

// y = x W^T + b; W [out, in] and b [out] drawn from U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's
// kaiming_uniform_(a=sqrt(5)) and its bias rule).
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;  // bias undefined when built without one
};

// A lookup table [num, dim] initialised from N(0, 1).
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
};

// Normalises over the last dims `normalized_shape`; weight ones, bias zeros.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  std::vector<int64_t> normalized_shape;
  double eps;
};

class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps = {},
                   bool elementwise_affine = true, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& x) override;
  Tensor weight;
  std::vector<int64_t> normalized_shape;
  std::optional<double> eps;
};

// Batch normalisation over the channels (dim 1) of [N, C] or [N, C, L] (BatchNorm1d), [N, C, H,
// W] (2d) or [N, C, D, H, W] (3d): weight ones, bias zeros; buffers running_mean (zeros),
// running_var (ones) and num_batches_tracked, updated in training mode (see batch_norm). A
// momentum of std::nullopt (PyTorch's None) keeps a cumulative average instead: the factor is
// 1 / num_batches_tracked, a graph input under kiln::compile. With track_running_stats false,
// batch statistics in both modes and no buffers.
class BatchNorm : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool track_running_stats;

 protected:
  BatchNorm(const char* name, std::vector<int64_t> ranks, int64_t num_features, double eps,
            std::optional<double> momentum, bool affine, bool track_running_stats, DType dtype);

 private:
  std::vector<int64_t> ranks_;  // the input ranks this variant takes
};
class BatchNorm1d final : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, DType dtype = kDefaultFloat)
      : BatchNorm("BatchNorm1d", {2, 3}, num_features, eps, momentum, affine, track_running_stats,
                  dtype) {}
};
class BatchNorm2d final : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, DType dtype = kDefaultFloat)
      : BatchNorm("BatchNorm2d", {4}, num_features, eps, momentum, affine, track_running_stats,
                  dtype) {}
};
class BatchNorm3d final : public BatchNorm {
 public:
  explicit BatchNorm3d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, DType dtype = kDefaultFloat)
      : BatchNorm("BatchNorm3d", {5}, num_features, eps, momentum, affine, track_running_stats,
                  dtype) {}
};

// Group normalisation (see group_norm): weight ones, bias zeros.
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t num_groups;
  double eps;
};

// torch.nn.InstanceNorm1d/2d/3d (same arguments and defaults): instance_norm over x [N, C, *]
// of rank `rank` (3, 4 or 5; unbatched inputs one less). affine (default false): weight ones,
// bias zeros. track_running_stats (default false): buffers running_mean (zeros), running_var
// (ones) and num_batches_tracked (kept at 0, as PyTorch's); in training mode each call moves
// them by `momentum` towards the batch's average of the instances' means and unbiased
// variances, and eval mode normalises by them instead of each instance's statistics.
class InstanceNorm : public UnaryModule {
 public:
  InstanceNorm(std::string type, int64_t rank, int64_t num_features, double eps, double momentum,
               bool affine, bool track_running_stats, DType dtype);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t rank, num_features;
  double eps, momentum;
  bool track_running_stats;
};
class InstanceNorm1d final : public InstanceNorm {
 public:
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                          bool affine = false, bool track_running_stats = false,
                          DType dtype = kDefaultFloat)
      : InstanceNorm("InstanceNorm1d", 3, num_features, eps, momentum, affine, track_running_stats,
                     dtype) {}
};
class InstanceNorm2d final : public InstanceNorm {
 public:
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                          bool affine = false, bool track_running_stats = false,
                          DType dtype = kDefaultFloat)
      : InstanceNorm("InstanceNorm2d", 4, num_features, eps, momentum, affine, track_running_stats,
                     dtype) {}
};
class InstanceNorm3d final : public InstanceNorm {
 public:
  explicit InstanceNorm3d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                          bool affine = false, bool track_running_stats = false,
                          DType dtype = kDefaultFloat)
      : InstanceNorm("InstanceNorm3d", 5, num_features, eps, momentum, affine, track_running_stats,
                     dtype) {}
};

// x.flatten(start_dim, end_dim) (default: every dim but the batch's).
class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : UnaryModule("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// x.unflatten(dim, sizes).
class Unflatten : public UnaryModule {
 public:
  Unflatten(int64_t dim, std::vector<int64_t> sizes)
      : UnaryModule("Unflatten"), dim(dim), sizes(std::move(sizes)) {}
  Tensor forward(const Tensor& x) override { return x.unflatten(dim, sizes); }
  int64_t dim;
  std::vector<int64_t> sizes;
};

// Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p)).
// Convolution over 1, 2 or 3 spatial dims (torch.nn.Conv1d/2d/3d): weight [out, in / groups,
// kernel...] and bias [out] drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups
// * prod(kernel), as PyTorch. kernel_size, stride, padding, dilation: one value or one per dim.
struct ConvOptions {
  std::vector<int64_t> stride = {1}, padding = {0}, dilation = {1};
  // ConvPadding::Same or Valid instead of `padding` (torch's padding="same" / "valid").
  std::optional<ConvPadding> named_padding;
  int64_t groups = 1;
  bool bias = true;
  DType dtype = kDefaultFloat;
  // torch's padding_mode: Constant is "zeros"; Reflect, Replicate, Circular pad the input by
  // the padding with that mode (kiln::pad) before a convolution that pads nothing.
  PadMode padding_mode = PadMode::Constant;
};
using Conv2dOptions = ConvOptions;
class ConvNd : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;  // bias undefined when built without one
  ConvOptions options;

 protected:
  ConvNd(const char* name, int64_t dims, int64_t in_channels, int64_t out_channels,
         std::vector<int64_t> kernel_size, ConvOptions options);

 private:
  int64_t dims_;
};
class Conv1d final : public ConvNd {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         ConvOptions options = {})
      : ConvNd("Conv1d", 1, in_channels, out_channels, std::move(kernel_size), std::move(options)) {
  }
};
class Conv2d final : public ConvNd {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         ConvOptions options = {})
      : ConvNd("Conv2d", 2, in_channels, out_channels, std::move(kernel_size), std::move(options)) {
  }
};
class Conv3d final : public ConvNd {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         ConvOptions options = {})
      : ConvNd("Conv3d", 3, in_channels, out_channels, std::move(kernel_size), std::move(options)) {
  }
};

// Transposed convolution (torch.nn.ConvTranspose1d/2d/3d): weight [in, out / groups,
// kernel...] and bias [out] from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = out / groups *
// prod(kernel) (PyTorch computes it from the weight's dim 1).
struct ConvTransposeOptions {
  std::vector<int64_t> stride = {1}, padding = {0}, output_padding = {0}, dilation = {1};
  int64_t groups = 1;
  bool bias = true;
  DType dtype = kDefaultFloat;
};
class ConvTransposeNd : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvTransposeOptions options;

 protected:
  ConvTransposeNd(const char* name, int64_t dims, int64_t in_channels, int64_t out_channels,
                  std::vector<int64_t> kernel_size, ConvTransposeOptions options);

 private:
  int64_t dims_;
};
#define KILN_CONV_TRANSPOSE_MODULE(D)                                                        \
  class ConvTranspose##D##d final : public ConvTransposeNd {                                 \
   public:                                                                                   \
    ConvTranspose##D##d(int64_t in_channels, int64_t out_channels,                           \
                        std::vector<int64_t> kernel_size, ConvTransposeOptions options = {}) \
        : ConvTransposeNd("ConvTranspose" #D "d", D, in_channels, out_channels,              \
                          std::move(kernel_size), std::move(options)) {}                     \
  };
KILN_CONV_TRANSPOSE_MODULE(1)
KILN_CONV_TRANSPOSE_MODULE(2)
KILN_CONV_TRANSPOSE_MODULE(3)
#undef KILN_CONV_TRANSPOSE_MODULE

// torch.nn.MaxPool1d/2d/3d, AvgPool1d/2d/3d: max_poolNd / avg_poolNd with fixed arguments.
class MaxPoolNd : public UnaryModule {
 public:
  MaxPoolNd(const char* name, int64_t dims, std::vector<int64_t> kernel_size,
            std::vector<int64_t> stride, std::vector<int64_t> padding,
            std::vector<int64_t> dilation, bool ceil_mode);
  Tensor forward(const Tensor& x) override;
  // The values and where each maximum is (torch's return_indices=True; LibTorch's name).
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x);
  std::vector<int64_t> kernel_size, stride, padding, dilation;
  bool ceil_mode;

 private:
  int64_t dims_;
};
class AvgPoolNd : public UnaryModule {
 public:
  AvgPoolNd(const char* name, int64_t dims, std::vector<int64_t> kernel_size,
            std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
            bool count_include_pad);
  Tensor forward(const Tensor& x) override;
  std::vector<int64_t> kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;  // (torch's; set it after construction)

 private:
  int64_t dims_;
};
#define KILN_POOL_MODULES(D)                                                                     \
  class MaxPool##D##d final : public MaxPoolNd {                                                 \
   public:                                                                                       \
    explicit MaxPool##D##d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},   \
                           std::vector<int64_t> padding = {0},                                   \
                           std::vector<int64_t> dilation = {1}, bool ceil_mode = false)          \
        : MaxPoolNd("MaxPool" #D "d", D, std::move(kernel_size), std::move(stride),              \
                    std::move(padding), std::move(dilation), ceil_mode) {}                       \
  };                                                                                             \
  class AvgPool##D##d final : public AvgPoolNd {                                                 \
   public:                                                                                       \
    explicit AvgPool##D##d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},   \
                           std::vector<int64_t> padding = {0}, bool ceil_mode = false,           \
                           bool count_include_pad = true)                                        \
        : AvgPoolNd("AvgPool" #D "d", D, std::move(kernel_size), std::move(stride),              \
                    std::move(padding), ceil_mode, count_include_pad) {}                         \
  };                                                                                             \
  class AdaptiveAvgPool##D##d final : public UnaryModule {                                       \
   public:                                                                                       \
    explicit AdaptiveAvgPool##D##d(std::vector<int64_t> output_size)                             \
        : UnaryModule("AdaptiveAvgPool" #D "d"), output_size(std::move(output_size)) {}          \
    Tensor forward(const Tensor& x) override { return adaptive_avg_pool##D##d(x, output_size); } \
    std::vector<int64_t> output_size;                                                            \
  };                                                                                             \
  class AdaptiveMaxPool##D##d final : public UnaryModule {                                       \
   public:                                                                                       \
    explicit AdaptiveMaxPool##D##d(std::vector<int64_t> output_size)                             \
        : UnaryModule("AdaptiveMaxPool" #D "d"), output_size(std::move(output_size)) {}          \
    Tensor forward(const Tensor& x) override { return adaptive_max_pool##D##d(x, output_size); } \
    /* The values and where each maximum is (torch's return_indices=True). */                    \
    std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {                           \
      return adaptive_max_pool##D##d_with_indices(x, output_size);                               \
    }                                                                                            \
    std::vector<int64_t> output_size;                                                            \
  };
KILN_POOL_MODULES(1)
KILN_POOL_MODULES(2)
KILN_POOL_MODULES(3)
#undef KILN_POOL_MODULES

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};
// dropout2d: whole channels of [N, C, H, W] (or [C, H, W]) inputs.
class Dropout2d : public UnaryModule {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  double p;
};

class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string approximate;
};

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

// Children applied in order.
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  Sequential& push_back(std::shared_ptr<UnaryModule> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  UnaryModule& operator[](size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

// A list of children of one type, registered as "0", "1", ...
template <class M>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  M& push_back(std::shared_ptr<M> m) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(m)));
    return *items_.back();
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace kiln::nn
