// Kiln's own float32 matrix product for AVX-512 and AVX2 hosts (see sgemm.h for when it is
// used).
//
// Why not OpenBLAS everywhere: for a Linear layer's products on a 2-core AVX-512 machine
// (2048 tokens against weights of 96..512 columns, sums of 96..2048) OpenBLAS 0.3.21 took
// 1.25-1.35x this loop's time, MKL (inside PyTorch) 0.8-1.0x (docs/performance.md, "Kiln's
// own sgemm"); against OpenBLAS's Haswell kernels, the AVX2 build of this loop takes 0.8-0.9x.
// It is the classic blocked scheme:
//   - a micro-kernel keeps a 6-row tile of c in registers (6 x 64 in 24 AVX-512 registers, 6 x 16
//     in 12 of AVX2's 16) and, for each step of the sum, loads a row of the tile's width from b
//     and broadcasts 6 of a (AVX-512: 24 FMAs per 10 loads; the 12 x 32 tile before it, 24 FMAs
//     per 14 loads, took 1.1-1.25x the time on W4's and W7's products), and narrower tiles over
//     a strip's last columns (W7's 96-column products);
//   - b is packed once per 128-long block of the sum into strips of the tile's width (in L1
//     while the kernel walks down a's rows);
//   - a is read in place when its rows are contiguous (a packed copy cost more than it saved,
//     even for row strides of whole pages), and packed into 6-row panels when it is
//     transposed (a weight gradient: its rows would be columns);
//   - threads split c's rows (or, when that balances better, its columns) and never share a
//     write, so each element is one ascending sum whatever the thread count.
#include "ops/sgemm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "ops/kernels/transpose_block.h"
#include "ops/kernels/vec.h"

namespace kiln::ops {

#if defined(KILN_VEC_AVX2)
namespace {

// The vector instructions the loops below are written in: AVX-512's 16 lanes (masks in mask
// registers), or AVX2's 8 (masks as vectors). Masked stores are used at a row's last columns
// only: AVX2's (vmaskmovps) is slow on some processors.
#if defined(KILN_VEC_AVX512)
struct Simd {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
  static constexpr int kTileVecs = 4;  // vectors of a tile's row: 24 of 32 registers
  static V zero() { return _mm512_setzero_ps(); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_load_ps(p); }  // 64-byte aligned
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V x) { _mm512_store_ps(p, x); }  // 64-byte aligned
  static void storeu(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static Mask first(int64_t count) {  // the first `count` lanes (all, or none)
    return count >= 16 ? Mask(0xFFFF) : count <= 0 ? Mask(0) : Mask((1u << count) - 1);
  }
  static V load_masked(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store_masked(Mask m, float* p, V x) { _mm512_mask_storeu_ps(p, m, x); }

  static void transpose(const float* src, int64_t ld, int rows, int cols, float* dst,
                        int64_t ld_dst) {
    kernels::transpose_block(src, ld, rows, cols, dst, ld_dst);
  }
};
#else
struct Simd {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int kLanes = 8;
  static constexpr int kTileVecs = 2;  // 12 accumulators, 2 rows of b and a broadcast: 15 of 16
  static V zero() { return _mm256_setzero_ps(); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_load_ps(p); }  // 32-byte aligned
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V x) { _mm256_store_ps(p, x); }  // 32-byte aligned
  static void storeu(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static Mask first(int64_t count) {
    const int live = static_cast<int>(std::clamp<int64_t>(count, 0, 8));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(live), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load_masked(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
  static void store_masked(Mask m, float* p, V x) { _mm256_maskstore_ps(p, m, x); }

  static void transpose(const float* src, int64_t ld, int rows, int cols, float* dst,
                        int64_t ld_dst) {
    kernels::transpose_block(src, ld, rows, cols, dst, ld_dst);
  }
};
#endif
using V = Simd::V;
using Mask = Simd::Mask;
constexpr int kLanes = Simd::kLanes;

constexpr int kTileRows = 6;                          // rows of c per micro-kernel call
constexpr int kTileVecs = Simd::kTileVecs;            // vectors of columns of c per call
constexpr int kTileCols = kLanes * kTileVecs;         // columns of c per call
constexpr int64_t kSumBlock = 128;                    // length of the sum per packed block of b
constexpr int64_t kRowBlock = 36;                     // rows of a walked per strip of b
constexpr int64_t kWorkPerThread = int64_t{1} << 21;  // multiply-adds that pay for a thread

// How a micro-kernel call finishes its tile: c = alpha * sum + beta * c on the columns the
// masks select (beta == 0: c is not read), or + beta * bias[column] when there is a bias. The
// first `whole` vectors of a row are whole (no mask needed).
struct TileStore {
  float alpha, beta;
  int whole;
  Mask mask[kTileVecs];
  const float* bias;  // the tile's first column of the row bias, or null
};

// The R x (V vectors) tile of c at `c` += the product of R rows of a and the first V vectors of
// a packed strip `bp` of b (kc rows of kTileCols floats). a(r, p) is a[p * R + r] when Packed,
// else a[r * lda + p]. (V < kTileVecs: a strip's last columns, so no FMA works on columns past
// the end.)
template <int R, int NV, bool Packed>
void micro_kernel(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict bp,
                  float* c, int64_t ldc, TileStore s) {
  V acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Simd::zero();
      // The tile's lines are written at the end: fetch them now (for writing), while the sum
      // runs.
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_prefetch(c + r * ldc + kLanes * v, 1, 3);
  }
  for (int64_t p = 0; p < kc; ++p) {
    V b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = Simd::load(bp + p * kTileCols + kLanes * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const V ar = Simd::broadcast(Packed ? a[p * R + r] : a[r * lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = Simd::fmadd(ar, b[v], acc[r][v]);
    }
  }
  const V alpha = Simd::broadcast(s.alpha), beta = Simd::broadcast(s.beta);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      V x = acc[r][v];
      if (s.alpha != 1.0f) x = Simd::mul(x, alpha);
      const bool whole = v < s.whole;
      if (s.bias)
        x = Simd::fmadd(beta,
                        whole ? Simd::loadu(s.bias + kLanes * v)
                              : Simd::load_masked(s.mask[v], s.bias + kLanes * v),
                        x);
      else if (s.beta != 0.0f)
        x = Simd::fmadd(
            beta,
            whole ? Simd::loadu(row + kLanes * v) : Simd::load_masked(s.mask[v], row + kLanes * v),
            x);
      if (whole)
        Simd::storeu(row + kLanes * v, x);
      else
        Simd::store_masked(s.mask[v], row + kLanes * v, x);
    }
  }
}

using MicroKernel = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t,
                             TileStore);
// [rows - 1][vectors - 1]: a kernel for every tile height and width in vectors, so a's last rows
// and b's last columns need no padding, copies or wasted multiply-adds.
template <bool Packed, int R, size_t... V>
constexpr std::array<MicroKernel, sizeof...(V)> widths_for(std::index_sequence<V...>) {
  return {&micro_kernel<R, static_cast<int>(V) + 1, Packed>...};
}
template <bool Packed, size_t... R>
constexpr std::array<std::array<MicroKernel, kTileVecs>, sizeof...(R)> kernels_for(
    std::index_sequence<R...>) {
  return {widths_for<Packed, static_cast<int>(R) + 1>(std::make_index_sequence<kTileVecs>())...};
}
constexpr auto kDirectKernels = kernels_for<false>(std::make_index_sequence<kTileRows>());
constexpr auto kPackedKernels = kernels_for<true>(std::make_index_sequence<kTileRows>());

struct Problem {
  bool trans_a, trans_b;
  int64_t k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  const float* row_bias;
};

// Grows on demand, 64-byte aligned, one per thread: packing buffers are reused across calls.
float* scratch(std::vector<float>& buffer, size_t floats) {
  if (buffer.size() < floats + 16) buffer.resize(floats + 16);
  auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
}

// Columns [j, j + width) of rows [p0, p0 + kc) of op(b) into `strip` (kc rows of kTileCols
// floats, columns past width zero).
void pack_b_strip(const Problem& P, int64_t p0, int64_t kc, int64_t j, int64_t width,
                  float* strip) {
  if (!P.trans_b) {
    Mask m[kTileVecs];
    for (int v = 0; v < kTileVecs; ++v) m[v] = Simd::first(width - kLanes * v);
    for (int64_t p = 0; p < kc; ++p) {
      const float* row = P.b + (p0 + p) * P.ldb + j;
      for (int v = 0; v < kTileVecs; ++v)
        Simd::store(strip + p * kTileCols + kLanes * v, Simd::load_masked(m[v], row + kLanes * v));
    }
    return;
  }
  // b holds op(b)'s columns as rows: a square block of lanes x lanes at a time, transposed on
  // registers (AVX-512: 64 shuffles where gathering them took 16 gathers of 16 loads each:
  // W4's forward products, 256 x 512 x 512, 6-10% faster).
  for (int v = 0; v < kTileVecs; ++v) {
    const int live = static_cast<int>(std::clamp<int64_t>(width - kLanes * v, 0, kLanes));
    const float* rows = live > 0 ? P.b + (j + kLanes * v) * P.ldb + p0 : P.b;  // (none read)
    for (int64_t p = 0; p < kc; p += kLanes)
      Simd::transpose(rows + p, P.ldb, live, static_cast<int>(std::min<int64_t>(kLanes, kc - p)),
                      strip + p * kTileCols + kLanes * v, kTileCols);
  }
}

int64_t strip_count(int64_t columns) { return (columns + kTileCols - 1) / kTileCols; }

// Rows [i, i + rows) of columns [p0, p0 + kc) of op(a) = a transposed into `panel` as
// panel[p * rows + r]: op(a)'s column p is a row of a, `rows` (<= kTileRows) contiguous floats.
void pack_a_panel(const Problem& P, int64_t i, int rows, int64_t p0, int64_t kc, float* panel) {
  const Mask live = Simd::first(rows);
  for (int64_t p = 0; p < kc; ++p)
    Simd::store_masked(live, panel + p * rows, Simd::load_masked(live, P.a + (p0 + p) * P.lda + i));
}

// Rows [i0, i1) x columns [j0, j1) of c += the sum's block [p0, p0 + kc), with op(b)'s block
// already packed into strips of kTileCols columns from column j0 on.
void compute_rows(const Problem& P, int64_t p0, int64_t kc, const float* packed_b, int64_t i0,
                  int64_t i1, int64_t j0, int64_t j1) {
  thread_local std::vector<float> a_buffer;
  float* packed_a =
      P.trans_a ? scratch(a_buffer, static_cast<size_t>(kRowBlock * kSumBlock)) : nullptr;
  // The first block of the sum applies beta (to c or the bias); later ones add to what it
  // stored.
  const float beta = p0 == 0 ? P.beta : 1.0f;
  const float* bias = p0 == 0 ? P.row_bias : nullptr;
  const int64_t strips = strip_count(j1 - j0);
  for (int64_t ib = i0; ib < i1; ib += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, i1 - ib);
    if (packed_a)
      for (int64_t i = 0; i < rows; i += kTileRows)
        pack_a_panel(P, ib + i, static_cast<int>(std::min<int64_t>(kTileRows, rows - i)), p0, kc,
                     packed_a + i * kc);
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t j = j0 + s * kTileCols, width = std::min<int64_t>(kTileCols, j1 - j);
      TileStore store{
          P.alpha, beta, static_cast<int>(width / kLanes), {}, bias ? bias + j : nullptr};
      for (int v = 0; v < kTileVecs; ++v) store.mask[v] = Simd::first(width - kLanes * v);
      const auto vectors = static_cast<size_t>((width + kLanes - 1) / kLanes);
      const float* strip = packed_b + s * kc * kTileCols;
      for (int64_t i = 0; i < rows; i += kTileRows) {
        const int height = static_cast<int>(std::min<int64_t>(kTileRows, rows - i));
        float* tile = P.c + (ib + i) * P.ldc + j;
        if (packed_a)
          kPackedKernels[static_cast<size_t>(height - 1)][vectors - 1](kc, packed_a + i * kc, 0,
                                                                       strip, tile, P.ldc, store);
        else
          kDirectKernels[static_cast<size_t>(height - 1)][vectors - 1](
              kc, P.a + (ib + i) * P.lda + p0, P.lda, strip, tile, P.ldc, store);
      }
    }
  }
}

// Rows [i0, i1) x columns [j0, j1) of c, a block of the sum at a time: op(b)'s strips for
// columns [j0, j1) are packed into `packed_b` by `packers` threads together (this one is number
// `packer`), which wait for each other around each block's packing; one packer: no waiting.
void compute_block(const Problem& P, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                   float* packed_b, int64_t packer, int64_t packers) {
  const int64_t strips = strip_count(j1 - j0);
  for (int64_t p0 = 0; p0 < P.k; p0 += kSumBlock) {
    const int64_t kc = std::min(kSumBlock, P.k - p0);
    for (int64_t s = packer; s < strips; s += packers) {
      const int64_t j = j0 + s * kTileCols;
      pack_b_strip(P, p0, kc, j, std::min<int64_t>(kTileCols, j1 - j),
                   packed_b + s * kc * kTileCols);
    }
    if (packers > 1) {
#pragma omp barrier
    }
    compute_rows(P, p0, kc, packed_b, i0, i1, j0, j1);
    if (packers > 1) {
#pragma omp barrier  // before the next block's packing overwrites this one
    }
  }
}

// A thread's buffer for packed strips of b covering `columns`.
float* packed_b_buffer(int64_t columns) {
  thread_local std::vector<float> buffer;
  return scratch(buffer, static_cast<size_t>(strip_count(columns) * kTileCols * kSumBlock));
}

// ceil(units / threads) * threads / units: how much longer the slowest thread works than an
// even share would take.
double imbalance(int64_t units, int64_t threads) {
  return static_cast<double>((units + threads - 1) / threads * threads) / units;
}

bool disabled_by_environment() {
  const char* choice = std::getenv("KILN_SGEMM");
  return choice && std::string_view(choice) == "openblas";
}

}  // namespace

// Where it measured faster than OpenBLAS (bench/sgemm_shapes.cpp, docs/performance.md), with
// 2 threads. AVX-512 (against OpenBLAS's AVX-512 kernels): 16 to 1024 columns (above 512 only
// with sums of at most 512; a packed block of b then outgrows L2) and sums of 4 or more; 128 or
// more rows, or fewer for a transposed a (a weight gradient with few outputs), which must be
// small (at most 2048 rows and 2^20 elements). Not below 2^20
// multiply-adds, where OpenBLAS's small-matrix path is faster, except with a transposed b
// (2^18), where it is not. (Fewer than 16 columns leave most of each 16-lane vector of the tile
// idle.) AVX2 (against OpenBLAS's Haswell kernels, on an AMD Zen 4 running AVX2 code): only
// the tall products of a Linear layer's forward and input gradient, a not transposed: 1024 or
// more rows of at most 128 columns (0.80-0.87 of OpenBLAS's time), or of at most 512 with sums
// of at most 128 (0.93-1.0, and addmm's bias is fused: OpenBLAS needs a pass to copy it in);
// longer sums, wider products and weight gradients ran 1.0-1.4x OpenBLAS's.
bool own_sgemm_applies(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k) {
  static const bool disabled = disabled_by_environment();
  const int64_t work = m * n * k;
  if (disabled || n < 16 || k < 4 || work < (trans_b ? int64_t{1} << 18 : int64_t{1} << 20))
    return false;
#if defined(KILN_VEC_AVX512)
  if (n > 1024 || (n > 512 && k > 512)) return false;
  // A transposed a is packed with strided reads: past 2048 rows or 2^20 elements of a, OpenBLAS
  // is faster (Intel, 2026-11-30: 10000 x 200 x 700 1.30x its time, 8192 x 128 x 512 1.15x,
  // 2048 x 256 x 700 1.10x; W7's weight gradients, 0.71-0.98x, stay).
  if (trans_a && (m > 2048 || m * k > (int64_t{1} << 20))) return false;
  return m >= 128 || (trans_a && m >= 4 && k >= 16);
#else
  return !trans_a && m >= 1024 && (n <= 128 || (n <= 512 && k <= 128));
#endif
}

void own_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc, const float* row_bias) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: only the beta term remains
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float& out = c[i * ldc + j];
        out = beta == 0.0f ? 0.0f : beta * (row_bias ? row_bias[j] : out);
      }
    return;
  }
  const Problem P{trans_a, trans_b, k, alpha, a, lda, b, ldb, beta, c, ldc, row_bias};
  int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  threads = std::clamp<int64_t>(m * n * k / kWorkPerThread, 1, threads);
  if (threads == 1) {
    compute_block(P, 0, m, 0, n, packed_b_buffer(n), 0, 1);
    return;
  }
  // Split c's rows in whole tiles, or its columns in whole strips when that balances better.
  // With columns split, a packed (transposed) a is packed whole by every thread: worth it only
  // where uneven rows cost more, n * (imbalance difference) > 8 * threads (packing a float
  // takes ~1/4 cycle, a multiply-add 1/32). Measured: a weight gradient of 128 x 512 x 2048
  // runs faster with columns split, one of 512 x 128 x 2048 with rows split.
  const int64_t tiles = (m + kTileRows - 1) / kTileRows, strips = strip_count(n);
  const double uneven_rows = imbalance(tiles, threads) - imbalance(strips, threads);
  // Evenly split either way, a transposed a goes with columns split when it is the smaller
  // operand (packed whole by every thread, but no waiting on shared packing of b).
  const bool split_columns =
      strips >= threads &&
      (!trans_a           ? uneven_rows > 0
       : uneven_rows == 0 ? m <= n
                          : uneven_rows > 0 && n * uneven_rows > 8.0 * threads);
  // Rows split: every thread needs all of b, so they pack its strips together into one buffer.
  float* shared_b = split_columns ? nullptr : packed_b_buffer(n);
#pragma omp parallel num_threads(static_cast <int>(threads))
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    if (split_columns) {
      const int64_t j0 = strips * t / count * kTileCols;
      const int64_t j1 = std::min(n, strips * (t + 1) / count * kTileCols);
      compute_block(P, 0, m, j0, j1, packed_b_buffer(j1 - j0), 0, 1);
    } else {
      const int64_t i0 = tiles * t / count * kTileRows;
      compute_block(P, i0, std::min(m, tiles * (t + 1) / count * kTileRows), 0, n, shared_b, t,
                    count);
    }
  }
}

#else  // no AVX2: OpenBLAS computes every product

bool own_sgemm_applies(bool, bool, int64_t, int64_t, int64_t) { return false; }

void own_sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
               int64_t, float, float*, int64_t, const float*) {
  KILN_CHECK(
      false, NotImplementedError,
      "own_sgemm: this build has no AVX2 or AVX-512 kernel (own_sgemm_applies is false here)");
}

#endif

}  // namespace kiln::ops
