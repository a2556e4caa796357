/* W7's Linear products (as bench/w7_gemms.py and `kiln bench --only W7gl`) through the
 * cblas_sgemm of any BLAS library, loaded at run time: to compare libraries on one machine
 * without rebuilding Kiln (docs/performance.md, "What made the difference": Kiln's own sgemm,
 * the BLAS libraries compared). Not part of the build:
 *
 *   gcc -O2 bench/gemm_libraries.c -o /tmp/gemm_libraries -ldl
 *   L=/usr/lib/x86_64-linux-gnu
 *   OMP_NUM_THREADS=2 /tmp/gemm_libraries $L/openblas-openmp/libopenblas.so.0
 *   BLIS_NUM_THREADS=2 /tmp/gemm_libraries $L/blis-openmp/libblis.so.4
 *
 * Prints the median and minimum of 15 timed steps (after 3 warm-up steps). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBRARY.so\n", argv[0]);
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW);
  sgemm_fn sgemm = library ? (sgemm_fn)dlsym(library, "cblas_sgemm") : NULL;
  if (!sgemm) {
    fprintf(stderr, "%s: no cblas_sgemm (%s)\n", argv[1], dlerror());
    return 2;
  }
  enum { kTokens = 2048, kMaxWidth = 512, kWarmUp = 3, kTimed = 15 };
  /* (fan in, fan out, how many) of W7's Linear layers */
  const int layers[5][3] = {
      {128, 384, 4}, {128, 128, 4}, {128, 512, 4}, {512, 128, 4}, {128, 96, 1}};
  float* x = malloc(sizeof(float) * kTokens * kMaxWidth);
  float* w = malloc(sizeof(float) * kMaxWidth * kMaxWidth);
  float* g = malloc(sizeof(float) * kTokens * kMaxWidth);
  float* out = malloc(sizeof(float) * kTokens * kMaxWidth);
  for (int i = 0; i < kTokens * kMaxWidth; ++i) x[i] = g[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < kMaxWidth * kMaxWidth; ++i) w[i] = (float)rand() / RAND_MAX - 0.5f;
  double times[kTimed];
  for (int step = 0; step < kWarmUp + kTimed; ++step) {
    const double start = now_ms();
    for (int l = 0; l < 5; ++l) {
      const int in = layers[l][0], fo = layers[l][1];
      for (int c = 0; c < layers[l][2]; ++c) {
        sgemm(kRowMajor, kNoTrans, kTrans, kTokens, fo, in, 1, x, in, w, in, 0, out, fo); /* x wᵀ */
        sgemm(kRowMajor, kNoTrans, kNoTrans, kTokens, in, fo, 1, g, fo, w, in, 0, out,
              in);                                                                        /* g w */
        sgemm(kRowMajor, kTrans, kNoTrans, fo, in, kTokens, 1, g, fo, x, in, 0, out, in); /* gᵀ x */
      }
    }
    if (step >= kWarmUp) times[step - kWarmUp] = now_ms() - start;
  }
  qsort(times, kTimed, sizeof(double), by_value);
  printf("%s: W7's Linear products, median %.2f ms, min %.2f ms\n", argv[1], times[kTimed / 2],
         times[0]);
  return 0;
}
