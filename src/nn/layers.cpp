// The standard layers and their PyTorch-default initialisation.
#include "kiln/nn/layers.h"

#include <algorithm>
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln::nn {

namespace {
Tensor uniform_init(IntList sizes, double bound, DType dtype) {
  Tensor t = empty(sizes, dtype);
  uniform_(t, -bound, bound);
  return t;
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, DType dtype)
    : UnaryModule("Linear") {
  KILN_CHECK(in_features > 0 && out_features > 0, ValueError,
             "Linear: in_features and out_features must be positive, got ", in_features, " and ",
             out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = uniform_init({out_features, in_features}, bound, dtype);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = uniform_init({out_features}, bound, dtype);
    register_parameter("bias", bias);
  }
}
namespace {
// A (transposed) convolution's weight [lead, second, kernel...] and bias [out_channels],
// checked and drawn as PyTorch draws them: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in the
// weight's dim 1 times the kernel's size (in / groups for a convolution, out / groups for a
// transposed one). Returns (weight, bias); bias undefined without one.
std::pair<Tensor, Tensor> conv_parameters(const char* name, int64_t dims, int64_t in_channels,
                                          int64_t out_channels,
                                          const std::vector<int64_t>& kernel_size, int64_t groups,
                                          bool with_bias, DType dtype, bool transposed) {
  KILN_CHECK(in_channels > 0 && out_channels > 0 && groups > 0 && in_channels % groups == 0 &&
                 out_channels % groups == 0,
             ValueError, name, ": in_channels (", in_channels, ") and out_channels (", out_channels,
             ") must be positive multiples of groups (", groups, ")");
  const bool sizes_ok =
      (kernel_size.size() == 1 || static_cast<int64_t>(kernel_size.size()) == dims) &&
      std::all_of(kernel_size.begin(), kernel_size.end(), [](int64_t k) { return k > 0; });
  KILN_CHECK(sizes_ok, ValueError, name, ": kernel_size must be 1 or ", dims,
             " positive values, got ", IntList(kernel_size));
  std::vector<int64_t> shape = transposed
                                   ? std::vector<int64_t>{in_channels, out_channels / groups}
                                   : std::vector<int64_t>{out_channels, in_channels / groups};
  int64_t fan_in = shape[1];
  for (int64_t d = 0; d < dims; ++d) {
    shape.push_back(kernel_size[kernel_size.size() == 1 ? 0 : static_cast<size_t>(d)]);
    fan_in *= shape.back();
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return {uniform_init(shape, bound, dtype),
          with_bias ? uniform_init({out_channels}, bound, dtype) : Tensor()};
}
}  // namespace

ConvNd::ConvNd(const char* name, int64_t dims, int64_t in_channels, int64_t out_channels,
               std::vector<int64_t> kernel_size, ConvOptions opts)
    : UnaryModule(name), options(std::move(opts)), dims_(dims) {
  std::tie(weight, bias) = conv_parameters(name, dims, in_channels, out_channels, kernel_size,
                                           options.groups, options.bias, options.dtype, false);
  register_parameter("weight", weight);
  if (bias.defined()) register_parameter("bias", bias);
}
Tensor ConvNd::forward(const Tensor& x) {
  const std::optional<Tensor> b = bias.defined() ? std::optional<Tensor>(bias) : std::nullopt;
  using Numeric = Tensor (*)(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntList,
                             IntList, IntList, int64_t);
  using Named = Tensor (*)(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntList,
                           ConvPadding, IntList, int64_t);
  const Numeric numeric[] = {conv1d, conv2d, conv3d};
  const Named named[] = {conv1d, conv2d, conv3d};
  const auto k = static_cast<size_t>(dims_ - 1);
  if (options.padding_mode != PadMode::Constant) {
    // The padding as pad()'s (left, right) pairs, the last dim's first: `padding` on both
    // sides, or "same"'s split (the odd one on the high side, as conv's own).
    std::vector<int64_t> pairs;
    for (int64_t d = dims_ - 1; d >= 0; --d) {
      const auto u = static_cast<size_t>(d);
      int64_t low = 0, high = 0;
      if (options.named_padding == ConvPadding::Same) {
        const int64_t dil =
            options.dilation.size() == 1 ? options.dilation[0] : options.dilation[u];
        const int64_t total = dil * (weight.size(2 + d) - 1);
        low = total / 2;
        high = total - low;
      } else if (!options.named_padding) {
        low = high = options.padding.size() == 1 ? options.padding[0] : options.padding.at(u);
      }
      pairs.push_back(low);
      pairs.push_back(high);
    }
    return numeric[k](pad(x, pairs, options.padding_mode), weight, b, options.stride, {0},
                      options.dilation, options.groups);
  }
  if (options.named_padding)
    return named[k](x, weight, b, options.stride, *options.named_padding, options.dilation,
                    options.groups);
  return numeric[k](x, weight, b, options.stride, options.padding, options.dilation,
                    options.groups);
}

ConvTransposeNd::ConvTransposeNd(const char* name, int64_t dims, int64_t in_channels,
                                 int64_t out_channels, std::vector<int64_t> kernel_size,
                                 ConvTransposeOptions opts)
    : UnaryModule(name), options(std::move(opts)), dims_(dims) {
  std::tie(weight, bias) = conv_parameters(name, dims, in_channels, out_channels, kernel_size,
                                           options.groups, options.bias, options.dtype, true);
  register_parameter("weight", weight);
  if (bias.defined()) register_parameter("bias", bias);
}
Tensor ConvTransposeNd::forward(const Tensor& x) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntList,
                        IntList, IntList, int64_t, IntList);
  const Fn fns[] = {conv_transpose1d, conv_transpose2d, conv_transpose3d};
  return fns[dims_ - 1](x, weight, bias.defined() ? std::optional<Tensor>(bias) : std::nullopt,
                        options.stride, options.padding, options.output_padding, options.groups,
                        options.dilation);
}

MaxPoolNd::MaxPoolNd(const char* name, int64_t dims, std::vector<int64_t> kernel_size_,
                     std::vector<int64_t> stride_, std::vector<int64_t> padding_,
                     std::vector<int64_t> dilation_, bool ceil_mode_)
    : UnaryModule(name),
      kernel_size(std::move(kernel_size_)),
      stride(std::move(stride_)),
      padding(std::move(padding_)),
      dilation(std::move(dilation_)),
      ceil_mode(ceil_mode_),
      dims_(dims) {}
Tensor MaxPoolNd::forward(const Tensor& x) {
  using Fn = Tensor (*)(const Tensor&, IntList, IntList, IntList, IntList, bool);
  const Fn fns[] = {max_pool1d, max_pool2d, max_pool3d};
  return fns[dims_ - 1](x, kernel_size, stride, padding, dilation, ceil_mode);
}
std::tuple<Tensor, Tensor> MaxPoolNd::forward_with_indices(const Tensor& x) {
  using Fn =
      std::tuple<Tensor, Tensor> (*)(const Tensor&, IntList, IntList, IntList, IntList, bool);
  const Fn fns[] = {max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices};
  return fns[dims_ - 1](x, kernel_size, stride, padding, dilation, ceil_mode);
}
AvgPoolNd::AvgPoolNd(const char* name, int64_t dims, std::vector<int64_t> kernel_size_,
                     std::vector<int64_t> stride_, std::vector<int64_t> padding_, bool ceil_mode_,
                     bool count_include_pad_)
    : UnaryModule(name),
      kernel_size(std::move(kernel_size_)),
      stride(std::move(stride_)),
      padding(std::move(padding_)),
      ceil_mode(ceil_mode_),
      count_include_pad(count_include_pad_),
      dims_(dims) {}
Tensor AvgPoolNd::forward(const Tensor& x) {
  using Fn =
      Tensor (*)(const Tensor&, IntList, IntList, IntList, bool, bool, std::optional<int64_t>);
  const Fn fns[] = {avg_pool1d, avg_pool2d, avg_pool3d};
  return fns[dims_ - 1](x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override);
}

Tensor Linear::forward(const Tensor& x) {
  // Errors name the module and its features, not the ops it is built from (linear, addmm).
  KILN_CHECK(weight.dim() == 2, ShapeError,
             "Linear: weight must be 2-D [out_features, in_features], got shape ",
             weight.shape_str());
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_f, ShapeError, "Linear(in_features=", in_f,
             ", out_features=", out_f, "): input of shape ", x.shape_str(), " has ",
             x.dim() >= 1 ? x.size(-1) : 0, " features, expected ", in_f);
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_f), ShapeError,
             "Linear(in_features=", in_f, ", out_features=", out_f, "): bias has shape ",
             bias.defined() ? bias.shape_str() : "", ", expected [", out_f, "]");
  return linear(x, weight, bias.defined() ? std::optional<Tensor>(bias) : std::nullopt);
}

Embedding::Embedding(int64_t num, int64_t dim, DType dtype) : UnaryModule("Embedding") {
  KILN_CHECK(num > 0 && dim > 0, ValueError,
             "Embedding: num_embeddings and embedding_dim must be positive, got ", num, " and ",
             dim);
  weight = randn({num, dim}, dtype);
  register_parameter("weight", weight);
}
Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices); }

LayerNorm::LayerNorm(std::vector<int64_t> shape, double eps_, bool affine, bool with_bias,
                     DType dtype)
    : UnaryModule("LayerNorm"), normalized_shape(std::move(shape)), eps(eps_) {
  if (affine) {
    weight = ones(normalized_shape, dtype);
    register_parameter("weight", weight);
    if (with_bias) {
      bias = zeros(normalized_shape, dtype);
      register_parameter("bias", bias);
    }
  }
}
Tensor LayerNorm::forward(const Tensor& x) {
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return layer_norm(x, normalized_shape, opt(weight), opt(bias), eps);
}

RMSNorm::RMSNorm(std::vector<int64_t> shape, std::optional<double> eps_, bool affine, DType dtype)
    : UnaryModule("RMSNorm"), normalized_shape(std::move(shape)), eps(eps_) {
  if (affine) {
    weight = ones(normalized_shape, dtype);
    register_parameter("weight", weight);
  }
}
Tensor RMSNorm::forward(const Tensor& x) {
  return rms_norm(x, normalized_shape,
                  weight.defined() ? std::optional<Tensor>(weight) : std::nullopt, eps);
}

BatchNorm::BatchNorm(const char* name, std::vector<int64_t> ranks, int64_t num_features_,
                     double eps_, std::optional<double> momentum_, bool affine, bool track,
                     DType dtype)
    : UnaryModule(name),
      num_features(num_features_),
      eps(eps_),
      momentum(momentum_),
      track_running_stats(track),
      ranks_(std::move(ranks)) {
  KILN_CHECK(num_features > 0, ValueError, name, ": num_features must be positive, got ",
             num_features);
  KILN_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1), ValueError, name,
             ": momentum must be in [0, 1] (or std::nullopt: a cumulative average), got ",
             momentum.value_or(0));
  if (affine) {
    weight = register_parameter("weight", ones({num_features}, dtype));
    bias = register_parameter("bias", zeros({num_features}, dtype));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({num_features}, dtype));
    running_var = register_buffer("running_var", ones({num_features}, dtype));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  const bool rank_ok = std::find(ranks_.begin(), ranks_.end(), x.dim()) != ranks_.end();
  KILN_CHECK(rank_ok, ShapeError, type_name(), ": expected an input of ",
             ranks_.size() == 1 ? "" : "either ", IntList(ranks_), " dims, got shape ",
             x.shape_str());
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  const bool use_batch_stats = is_training() || !track_running_stats;
  if (is_training() && track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(Scalar(1));
  }
  if (!momentum && is_training() && track_running_stats)  // a cumulative average
    return batch_norm(x, opt(running_mean), opt(running_var), opt(weight), opt(bias), true,
                      1.0 / num_batches_tracked.to(running_mean.dtype()), eps);
  return batch_norm(x, opt(running_mean), opt(running_var), opt(weight), opt(bias), use_batch_stats,
                    momentum.value_or(0.1), eps);
}

GroupNorm::GroupNorm(int64_t num_groups_, int64_t num_channels, double eps_, bool affine,
                     DType dtype)
    : UnaryModule("GroupNorm"), num_groups(num_groups_), eps(eps_) {
  KILN_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, ValueError,
             "GroupNorm: num_groups (", num_groups, ") must be positive and divide num_channels (",
             num_channels, ")");
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}, dtype));
    bias = register_parameter("bias", zeros({num_channels}, dtype));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return group_norm(x, num_groups, opt(weight), opt(bias), eps);
}

Dropout::Dropout(double p_) : UnaryModule("Dropout"), p(p_) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "Dropout: probability must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }
Dropout2d::Dropout2d(double p_) : UnaryModule("Dropout2d"), p(p_) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "Dropout2d: probability must be in [0, 1], got ", p);
}
Tensor Dropout2d::forward(const Tensor& x) { return dropout2d(x, p, is_training()); }

InstanceNorm::InstanceNorm(std::string type, int64_t rank_, int64_t num_features_, double eps_,
                           double momentum_, bool affine, bool track, DType dtype)
    : UnaryModule(std::move(type)),
      rank(rank_),
      num_features(num_features_),
      eps(eps_),
      momentum(momentum_),
      track_running_stats(track) {
  KILN_CHECK(num_features > 0, ValueError, type_name(), ": num_features must be positive, got ",
             num_features);
  KILN_CHECK(momentum >= 0 && momentum <= 1, ValueError, type_name(),
             ": momentum must be in [0, 1], got ", momentum);
  if (affine) {
    weight = register_parameter("weight", ones({num_features}, dtype));
    bias = register_parameter("bias", zeros({num_features}, dtype));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({num_features}, dtype));
    running_var = register_buffer("running_var", ones({num_features}, dtype));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
}
Tensor InstanceNorm::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == rank || x.dim() == rank - 1, ShapeError, type_name(),
             ": expected an input of ", rank, " dims (or ", rank - 1, " unbatched), got ",
             x.shape_str());
  const Tensor batched = x.dim() == rank ? x : x.unsqueeze(0);
  KILN_CHECK(batched.size(1) == num_features, ShapeError, type_name(), ": expected ", num_features,
             " channels, got ", x.shape_str());
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  Tensor y;
  if (track_running_stats && !is_training()) {
    // Eval with running statistics: every instance normalised by the same per-channel ones.
    y = batch_norm(batched, running_mean, running_var, opt(weight), opt(bias), false, 0.0, eps);
  } else {
    y = instance_norm(batched, opt(weight), opt(bias), eps);
    if (track_running_stats) {
      // As PyTorch: each instance's mean and unbiased variance, averaged over the batch.
      std::vector<int64_t> spatial;
      for (int64_t d = 2; d < batched.dim(); ++d) spatial.push_back(d);
      NoGradGuard no_grad;
      const Tensor instance_mean = mean(batched.detach(), spatial);
      const Tensor instance_var = var(batched.detach(), spatial, /*correction=*/1);
      running_mean.mul_(Scalar(1 - momentum)).add_(mean(instance_mean, {0}) * momentum);
      running_var.mul_(Scalar(1 - momentum)).add_(mean(instance_var, {0}) * momentum);
    }
  }
  return x.dim() == rank ? y : y.squeeze(0);
}

GELU::GELU(std::string approx) : UnaryModule("GELU"), approximate(std::move(approx)) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", ValueError,
             "GELU: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Sequential& Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  KILN_CHECK(m != nullptr, Error, "Sequential: cannot add a null module");
  layers_.push_back(register_module(std::to_string(layers_.size()), std::move(m)));
  return *this;
}
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace kiln::nn
