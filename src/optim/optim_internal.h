// Helpers shared by the optimizer sources (not installed).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim::detail {

// The round-trip (shortest exact) decimal form of v.
std::string format_double(double v);
std::string format_bool(bool v);
// Reads metadata[key] as a double / bool; throws ValueError naming the key when it is missing or
// malformed.
double meta_double(const std::map<std::string, std::string>& m, const std::string& key);
bool meta_bool(const std::map<std::string, std::string>& m, const std::string& key);

// A contiguous tensor shaped and typed as p, every element `value` (0: zero-filled), written
// directly rather than by an op: under kiln::compile the state exists before the step's graph,
// which reads it as an input at every step.
Tensor filled_like_param(const Tensor& p, double value);
inline Tensor zeros_like_param(const Tensor& p) { return filled_like_param(p, 0.0); }
// A concrete 0-d tensor holding `value` (made without dispatch, so under kiln::compile it is a
// graph input whose value is not part of the guard: optimizer scalars that change every step).
Tensor scalar_input(double value, DType dtype);

// The gradient of p ready for an update op: p's dtype, shape-checked.
Tensor dense_grad(const Tensor& p, size_t index, const char* who);

// The 0-d hyper-parameter tensors of one step(), one per distinct value and dtype: parameters
// that share a value share a tensor, so a captured step has one graph input per value rather
// than one per parameter.
class ScalarInputs {
 public:
  Tensor get(double value, DType dtype);

 private:
  std::vector<std::pair<std::pair<double, DType>, Tensor>> made_;
};

// Throws ValueError "<who>: invalid <what> value: <value>" unless value is finite and >= 0.
void check_non_negative(const char* who, const char* what, double value);

// The gradient the composed optimizers (Adagrad, RMSprop, Adadelta) update with, as PyTorch's:
// dense_grad, negated under maximize, plus weight_decay * p (the decay a graph input) when the
// decay is not 0.
Tensor decayed_grad(const Tensor& p, size_t index, const char* who, bool maximize,
                    double weight_decay, ScalarInputs& scalars);

// Whether `value` rounded to dtype is below 0.5 (which side of a lerp's two-sided formula the
// update takes, decided in the parameter's precision as its kernel would).
bool below_half_in(double value, DType dtype);

}  // namespace kiln::optim::detail
