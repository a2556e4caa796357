// Tensor factories: new tensors from sizes, ranges, or host data.
#pragma once

#include <initializer_list>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor empty(IntList sizes, DType dtype = kDefaultFloat);
Tensor zeros(IntList sizes, DType dtype = kDefaultFloat);
Tensor ones(IntList sizes, DType dtype = kDefaultFloat);
Tensor full(IntList sizes, const Scalar& value, std::optional<DType> dtype = {});
// A 0-d tensor holding `value` (dtype from the value unless given: bool, int64, float32).
Tensor scalar_tensor(const Scalar& value, std::optional<DType> dtype = {});

Tensor empty_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = {});
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype = {});

// Values start, start+step, ... below end. Int64 when all arguments are integers, else float32
// (as PyTorch).
Tensor arange(const Scalar& end, std::optional<DType> dtype = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
              std::optional<DType> dtype = {});
Tensor linspace(double start, double end, int64_t steps, DType dtype = kDefaultFloat);
Tensor eye(int64_t n, std::optional<int64_t> m = {}, DType dtype = kDefaultFloat);

// From host data (always copied). The dtype follows T unless given.
template <typename T>
Tensor tensor(const std::vector<T>& values, IntList sizes);
template <typename T>
Tensor tensor(const std::vector<T>& values);  // 1-d
Tensor tensor(std::initializer_list<double> values, DType dtype = kDefaultFloat);
Tensor tensor(std::initializer_list<int> values, DType dtype = DType::Int64);
// Copies numel(sizes) elements of `dtype` from `data`.
Tensor from_blob(const void* data, IntList sizes, DType dtype);

}  // namespace kiln
