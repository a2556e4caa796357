// Helpers shared by the capture tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "kiln/kiln.h"

namespace kiln::testing {

// Same dtype, shape and values.
inline void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.sizes(), b.sizes());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
}

// Options whose backend counts the graphs it compiles and runs them with the eager backend.
inline CompileOptions counting(std::shared_ptr<std::atomic<int>> graphs) {
  CompileOptions o;
  o.backend = Backend([graphs](const ir::Graph& g, std::span<const TensorMeta> in) {
    ++*graphs;
    return lookup_backend("eager")(g, in);
  });
  return o;
}

}  // namespace kiln::testing
