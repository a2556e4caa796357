// StackTensors<N>: a list of n tensors, on the stack when n <= N and on the heap otherwise, for
// the per-call lists of hot paths (a compiled graph's slots, a pure-mode hit's graph inputs),
// where a heap allocation per call cost more than a small graph's work.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

template <size_t N>
class StackTensors {
 public:
  explicit StackTensors(size_t n) {
    if (n > N) heap_.resize(n);
    tensors_ = n > N ? std::span<Tensor>(heap_) : std::span<Tensor>(stack_.data(), n);
  }
  StackTensors(const StackTensors&) = delete;  // (the span points into this object)
  StackTensors& operator=(const StackTensors&) = delete;

  std::span<Tensor> span() const { return tensors_; }
  Tensor& operator[](size_t i) const { return tensors_[i]; }
  size_t size() const { return tensors_.size(); }

 private:
  std::array<Tensor, N> stack_;
  std::vector<Tensor> heap_;
  std::span<Tensor> tensors_;
};

}  // namespace kiln
