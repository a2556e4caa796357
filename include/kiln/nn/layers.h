// The standard layers (torch.nn), each initialised as PyTorch initialises it by default.
#pragma once

#include <optional>
#include <string>

#include "kiln/core/random.h"
#include "kiln/nn/module.h"

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

// Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p)).
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
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
