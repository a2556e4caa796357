// Which OpenBLAS kernels products run on (src/ops/blas_kernels.cpp): on a CPU with AVX-512 or
// AVX2, never older kernels than it supports (OpenBLAS falls back to SSE3 ones for models it
// does not know), unless the user chose with OPENBLAS_CORETYPE, which Kiln leaves alone.
// CTest runs this file's tests a second time with OPENBLAS_CORETYPE=Prescott.
#include <gtest/gtest.h>
#include <strings.h>

#include <cstdlib>
#include <string>

#include "kiln/kiln.h"

namespace {

std::string kernels_named(const std::string& config) {
  const std::string tag = "; kernels: ";
  const size_t at = config.find(tag);
  if (at == std::string::npos) return "";
  const size_t begin = at + tag.size();
  return config.substr(begin, config.find(' ', begin) - begin);
}

bool same_name(const std::string& a, const std::string& b) {
  return strcasecmp(a.c_str(), b.c_str()) == 0;
}

TEST(Blas, ProductsRunOnKernelsAsNewAsTheCpuOrTheUserChose) {
  const std::string config = kiln::blas_config();
  const std::string kernels = kernels_named(config);
  ASSERT_FALSE(kernels.empty()) << config;
  if (const char* chosen = std::getenv("OPENBLAS_CORETYPE")) {
    EXPECT_EQ(config.find("selected by Kiln"), std::string::npos) << config;
#if defined(__x86_64__)  // (CTest's choice, Prescott, is an x86-64 kernel set)
    EXPECT_TRUE(same_name(kernels, chosen)) << config;
#endif
  } else {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd")) {
      EXPECT_TRUE(same_name(kernels, "SkylakeX") || same_name(kernels, "Cooperlake") ||
                  same_name(kernels, "SapphireRapids"))
          << config;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      EXPECT_TRUE(same_name(kernels, "Haswell") || same_name(kernels, "Zen")) << config;
    }
#endif
  }
  // Products on those kernels are right: a float64 product (always OpenBLAS) and a float32 one
  // too small for Kiln's own kernel, against sums written out.
  for (kiln::DType dtype : {kiln::DType::Float64, kiln::DType::Float32}) {
    const kiln::Tensor a = kiln::arange(0, 24, 1, dtype).reshape({4, 6}) / 7;
    const kiln::Tensor b = kiln::arange(0, 30, 1, dtype).reshape({6, 5}) / 3;
    const kiln::Tensor c = kiln::mm(a, b);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double want = 0;
        for (int64_t p = 0; p < 6; ++p) want += (i * 6 + p) / 7.0 * ((p * 5 + j) / 3.0);
        EXPECT_NEAR(c[i][j].to(kiln::DType::Float64).item<double>(), want,
                    1e-4 * std::abs(want) + 1e-6);
      }
  }
}

}  // namespace
