// Helpers shared by the capture tests.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>

#include "kiln/kiln.h"

namespace kiln::testing {

// Same dtype, shape and values.
inline void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.sizes(), b.sizes());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
}

// A backend that shows each graph it is handed to `see`, then compiles it with "eager".
inline Backend eager_seeing(std::function<void(const ir::Graph&)> see) {
  return Backend([see = std::move(see)](const ir::Graph& g, std::span<const TensorMeta> in) {
    see(g);
    return lookup_backend("eager")(g, in);
  });
}

// Options whose backend counts the graphs it compiles and runs them with the eager backend.
inline CompileOptions counting(std::shared_ptr<std::atomic<int>> graphs) {
  CompileOptions o;
  o.backend = eager_seeing([graphs](const ir::Graph&) { ++*graphs; });
  return o;
}

}  // namespace kiln::testing
