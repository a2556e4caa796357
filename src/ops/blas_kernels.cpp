// Which of OpenBLAS's kernel sets products run on. A DYNAMIC_ARCH OpenBLAS picks one by CPU
// model at load time and falls back to its oldest x86-64 kernels (SSE3, "Prescott") for a model
// it does not know: OpenBLAS 0.3.21 on a Sapphire Rapids VM whose model name is hidden
// ("Intel(R) Xeon(R) Processor") ran every product 3-5x slower than with its AVX-512 kernels.
// When the CPU's features support a better set than the one chosen and the user has not chosen
// one (OPENBLAS_CORETYPE), Kiln selects it once, when the library loads, before any product.
#include <strings.h>

#include <cstdlib>
#include <string>

#include "kiln/ops/linalg.h"

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
// Present in DYNAMIC_ARCH builds only (weak: absent, the kernels stay as OpenBLAS chose them).
// dynamic_quit forgets the choice; dynamic_init chooses again, reading OPENBLAS_CORETYPE.
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace kiln {
namespace {

// 3: AVX-512 kernels, 2: AVX2 + FMA, 1: anything older (or unknown).
int rank_of_core(const char* name) {
  for (const char* avx512 : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(name, avx512) == 0) return 3;
  for (const char* avx2 : {"Haswell", "Zen"})
    if (strcasecmp(name, avx2) == 0) return 2;
  return 1;
}

struct KernelChoice {
  std::string detected;  // what OpenBLAS chose at load time
  std::string selected;  // what Kiln selected instead ("" when it kept OpenBLAS's choice)
};

KernelChoice choose_kernels() {
  KernelChoice choice{openblas_get_corename(), ""};
  if (std::getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit)
    return choice;
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512cd");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const char* better = avx512 ? "SkylakeX" : avx2 ? "Haswell" : nullptr;
  if (!better || rank_of_core(choice.detected.c_str()) >= rank_of_core(better)) return choice;
  // OpenBLAS reads OPENBLAS_CORETYPE when it chooses; the variable is removed again so that
  // child processes choose for themselves.
  setenv("OPENBLAS_CORETYPE", better, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  choice.selected = openblas_get_corename();
  return choice;
}

// Chosen while the library loads (OpenBLAS, a dependency, has initialised by then): no product
// can be running on another thread yet.
const KernelChoice kKernels = choose_kernels();

}  // namespace

std::string blas_config() {
  std::string config = openblas_get_config();
  config += "; kernels: " + std::string(openblas_get_corename());
  if (!kKernels.selected.empty())
    config += " (selected by Kiln: OpenBLAS detected " + kKernels.detected + " on this CPU)";
  return config;
}

}  // namespace kiln
