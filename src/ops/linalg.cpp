// Matrix products (matmul, mm, bmm, addmm) through OpenBLAS's CBLAS. Operands reach gemm in
// place whenever their strides allow it (row-major, or column-major passed as a transpose);
// only a matrix with no unit-stride dim is packed first. Batched products loop over the
// (broadcast) batch calling gemm: in parallel over the batch when the matrices are small,
// otherwise one after the other with BLAS threading each product — never both at once. Tiny
// products (up to 16^3 multiply-adds) skip BLAS, whose per-call cost would dominate, for a
// small register-blocked vector kernel.
#include <cblas.h>

#include <omp.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <vector>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/pointwise.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/small_gemm.h"
#include "ops/op_utils.h"
#include "ops/sgemm.h"
#include "ops/split_sum.h"

namespace kiln {
namespace ops {

// Products split their sum across the threads (split_sum.h) when it is at least twice as long
// as the output is wide or tall: split by rows or columns instead, every thread packs the whole
// of the other operand (the kernels' packing is per thread); split by the sum, each thread reads
// only its slices of both, and the partial results are added after. Measured against the
// row/column split (2 threads, Intel AVX-512 and its AVX2 code): W7's weight gradients
// 384 x 128 x 2048 0.79-0.85 of the time, 128 x 512 x 2048 0.86-0.88, 128 x 96 x 2048
// 0.60-0.75, 256 x 256 x 1024 0.84-0.86; a product whose sum is as long as its sides (1024^3)
// 1.00-1.04, and one taller than its sum (2048 x 128 x 512) 0.90-1.15. At least 2^21
// multiply-adds and 256 of the sum a thread; the partial results take at most half the
// operands' size: (S - 1) n m <= k (n + m) / 2.
int64_t split_sum_threads(int64_t n, int64_t m, int64_t k) {
  if (omp_in_parallel() || k < 2 * std::max(n, m)) return 1;
  const int64_t threads =
      std::min({int64_t{omp_get_max_threads()}, k / 256, 1 + k * (n + m) / (2 * n * m)});
  return threads > 1 && n * m * k >= threads * (int64_t{1} << 21) ? threads : 1;
}

namespace {

constexpr int64_t kMaxBlasInt = std::numeric_limits<blasint>::max();
// Products with fewer multiply-adds than this are too small for BLAS to thread well; a batch
// of them is spread over the threads instead.
constexpr int64_t kSmallGemmWork = int64_t{1} << 18;  // 64 x 64 x 64
// Up to this size, a batch with at least two products per thread is also spread over the
// threads: one parallel region for the whole batch instead of one inside every BLAS call.
constexpr int64_t kMediumGemmWork = int64_t{1} << 24;  // 256 x 256 x 256

// ---- validation shared by the metas ----
void check_dtypes(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), DTypeError, op,
             ": expected floating tensors (float32 or float64), got dtypes ", a.dtype(), " and ",
             b.dtype());
  KILN_CHECK(a.dtype() == b.dtype(), DTypeError, op,
             ": expected both operands to have the same dtype, got ", a.dtype(), " and ",
             b.dtype());
}
void check_inner(const char* op, const Tensor& a, const Tensor& b, int64_t ka, int64_t kb) {
  KILN_CHECK(ka == kb, ShapeError, op, ": shapes ", a.shape_str(), " and ", b.shape_str(),
             " cannot be multiplied (", ka, " != ", kb, ")");
}
void check_blas_size(const char* op, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    KILN_CHECK(d <= kMaxBlasInt, NotImplementedError, op, ": a matrix dimension of ", d,
               " exceeds what BLAS can index (", kMaxBlasInt, ")");
}

// ---- the gemm driver ----
// One product on the calling thread's choice of kernel: Kiln's own sgemm where it measured
// faster, else BLAS. Threads: all of OpenMP's, or one inside a parallel region.
template <typename T>
void gemm_kernel(bool trans_a, bool trans_b, int64_t n, int64_t m, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto bi = [](int64_t v) { return static_cast<blasint>(v); };
  if constexpr (std::is_same_v<T, float>) {
    if (own_sgemm_applies(trans_a, trans_b, n, m, k)) {
      own_sgemm(trans_a, trans_b, n, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    cblas_sgemm(CblasRowMajor, ta, tb, bi(n), bi(m), bi(k), alpha, a, bi(lda), b, bi(ldb), beta, c,
                bi(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, bi(n), bi(m), bi(k), alpha, a, bi(lda), b, bi(ldb), beta, c,
                bi(ldc));
  }
}

// c [n, m] = alpha * op(a) [n, k] @ op(b) [k, m] + beta * c, with a and b read in place
// (op: transposed or not, leading dims lda, ldb). A long sum is split (split_sum_threads):
// slice s, [k s / S, k (s + 1) / S), of every element is computed by one thread — slice 0 into
// c with beta, the others into scratch — and the slices are added in order. The result depends
// on S (the thread count, as OpenBLAS's may), not on which threads OpenMP hands out.
template <typename T>
void blas_gemm(bool trans_a, bool trans_b, int64_t n, int64_t m, int64_t k, T alpha, const T* a,
               int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t slices = split_sum_threads(n, m, k);
  if (slices == 1) {
    gemm_kernel<T>(trans_a, trans_b, n, m, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // (From the caching allocator: the same size comes back every training step.)
  const Tensor partials = make_tensor({slices - 1, n, m}, dtype_v<T>);
  T* scratch = partials.data_ptr<T>();
  std::exception_ptr failure;  // (an exception may not leave a parallel region)
#pragma omp parallel num_threads(static_cast <int>(slices))
  {
#pragma omp for schedule(static)
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t k0 = k * s / slices, k1 = k * (s + 1) / slices;
      try {
        gemm_kernel<T>(trans_a, trans_b, n, m, k1 - k0, alpha, trans_a ? a + k0 * lda : a + k0, lda,
                       trans_b ? b + k0 : b + k0 * ldb, ldb, s == 0 ? beta : T(0),
                       s == 0 ? c : scratch + (s - 1) * n * m, s == 0 ? ldc : m);
      } catch (...) {
#pragma omp critical(kiln_split_sum_failure)
        if (!failure) failure = std::current_exception();
      }
    }
    // (The loop's barrier: every slice is done, and `failure` is the same for every thread.)
    if (!failure) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        T* row = c + i * ldc;
        for (int64_t p = 0; p < slices - 1; ++p) {
          const T* add = scratch + p * n * m + i * m;
          for (int64_t j = 0; j < m; ++j) row[j] += add[j];
        }
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// Products this small cost less as vector loops than a BLAS call's fixed overhead (which
// dominates batches of tiny matrices, e.g. attention over short sequences).
constexpr int64_t kTinyGemmWork = 16 * 16 * 16;

// The tiny kernel takes b with contiguous rows and c rows of 1, 2, 4 or 8 whole vectors.
template <typename T>
bool tiny_gemm_applies(int64_t n, int64_t m, int64_t k, int64_t bcs) {
  constexpr int64_t W = vec::Vec<T>::width;
  const int64_t nv = m / W;
  return n * m * k <= kTinyGemmWork && (bcs == 1 || m == 1) && m % W == 0 &&
         (nv == 1 || nv == 2 || nv == 4 || nv == 8);
}

// Small products that the same loop computes when batched: at most kSmallGemmWork
// multiply-adds, c rows of 1, 2, 4 or 8 whole vectors (b's rows are packed when needed).
template <typename T>
bool small_gemm_applies(int64_t n, int64_t m, int64_t k) {
  constexpr int64_t W = vec::Vec<T>::width;
  const int64_t nv = m / W;
  return n * m * k <= kSmallGemmWork && m % W == 0 && (nv == 1 || nv == 2 || nv == 4 || nv == 8);
}

// How gemm reads a rows x cols matrix with element strides (rs, cs): row-major with leading
// dim `ld`, or column-major (passed as the transpose of a row-major matrix). Size-1 dims may
// have any stride.
struct BlasLayout {
  bool transposed = false;
  int64_t ld = 1;
};
std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t min_row_ld = std::max<int64_t>(cols, 1), min_col_ld = std::max<int64_t>(rows, 1);
  if ((cols <= 1 || cs == 1) && (rows <= 1 || (rs >= min_row_ld && rs <= kMaxBlasInt)))
    return BlasLayout{false, rows <= 1 ? min_row_ld : rs};
  if ((rows <= 1 || rs == 1) && (cols <= 1 || (cs >= min_col_ld && cs <= kMaxBlasInt)))
    return BlasLayout{true, cols <= 1 ? min_col_ld : cs};
  return std::nullopt;
}

// One operand of a (batched) product: [batch..., rows, cols] over raw data. Its batch dims
// are right-aligned against the output's and broadcast where they are 1 or missing.
template <typename T>
struct Operand {
  const T* data;
  Shape sizes, strides;
  Tensor packed;  // owns a contiguous copy when the original layout is unusable

  int64_t rows() const { return sizes[sizes.ssize() - 2]; }
  int64_t cols() const { return sizes.back(); }
  int64_t rs() const { return strides[strides.ssize() - 2]; }
  int64_t cs() const { return strides.back(); }
  std::optional<BlasLayout> layout() const { return blas_layout(rows(), cols(), rs(), cs()); }

  // Copies the elements into contiguous storage (when no unit-stride dim exists).
  void pack() {
    packed = make_tensor(sizes, dtype_v<T>);
    T* dst = packed.data_ptr<T>();
    const int64_t nd = sizes.ssize(), numel = packed.numel();
    Shape idx(sizes.size(), 0);
    for (int64_t i = 0; i < numel; ++i) {
      int64_t off = 0;
      for (int64_t d = 0; d < nd; ++d) off += idx[d] * strides[d];
      dst[i] = data[off];
      for (int64_t d = nd - 1; d >= 0 && ++idx[d] == sizes[d]; --d) idx[d] = 0;
    }
    data = dst;
    strides = contiguous_strides(sizes);
  }

  // Stride of the operand along output batch dim `d` of `nb` batch dims (0 when broadcast).
  int64_t batch_stride(int64_t d, int64_t nb) const {
    const int64_t own = sizes.ssize() - 2, od = d - (nb - own);
    return od < 0 || sizes[od] == 1 ? 0 : strides[od];
  }
};

template <typename T>
Operand<T> operand(const Tensor& t) {
  return {t.data_ptr<T>(), t.sizes(), t.strides(), {}};
}

// For every flat batch index, the element offset of each operand's matrix.
template <typename T>
void batch_offsets(IntList batch, const Operand<T>& a, const Operand<T>& b,
                   std::vector<int64_t>& off_a, std::vector<int64_t>& off_b) {
  const int64_t nb = batch.ssize();
  int64_t count = 1;
  for (int64_t s : batch) count *= s;
  off_a.assign(static_cast<size_t>(count), 0);
  off_b.assign(static_cast<size_t>(count), 0);
  Shape idx(static_cast<size_t>(nb), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < count; ++i) {
    off_a[i] = oa;
    off_b[i] = ob;
    for (int64_t d = nb - 1; d >= 0; --d) {
      oa += a.batch_stride(d, nb);
      ob += b.batch_stride(d, nb);
      if (++idx[d] < batch[d]) break;
      oa -= idx[d] * a.batch_stride(d, nb);
      ob -= idx[d] * b.batch_stride(d, nb);
      idx[d] = 0;
    }
  }
}

// When b is the same matrix for every batch entry and a's [batch..., rows] dims walk memory
// with one row stride, the whole batch is one [batch*rows, k] @ [k, m] product. Returns that
// row stride.
template <typename T>
std::optional<int64_t> folded_row_stride(IntList batch, const Operand<T>& a, const Operand<T>& b) {
  const int64_t nb = batch.ssize();
  for (int64_t d = 0; d < nb; ++d)
    if (b.batch_stride(d, nb) != 0 || (batch[d] > 1 && a.batch_stride(d, nb) == 0))
      return std::nullopt;
  // (size, stride) of a's row-like dims, innermost last, size-1 dims dropped.
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int64_t d = 0; d < nb; ++d)
    if (batch[d] > 1) dims.emplace_back(batch[d], a.batch_stride(d, nb));
  if (a.rows() > 1) dims.emplace_back(a.rows(), a.rs());
  if (dims.empty()) return a.rs();
  for (size_t i = 0; i + 1 < dims.size(); ++i)
    if (dims[i].second != dims[i + 1].second * dims[i + 1].first) return std::nullopt;
  return dims.back().second;
}

// out (contiguous [batch..., n, m]) = alpha * (a @ b) + beta * out.
template <typename T>
void batched_gemm(T* out, IntList batch, Operand<T> a, Operand<T> b, T alpha, T beta) {
  const int64_t n = a.rows(), k = a.cols(), m = b.cols();
  int64_t count = 1;
  for (int64_t s : batch) count *= s;
  if (count == 0 || n == 0 || m == 0) return;
  if (k == 0) {  // an empty sum: only the beta term remains
    const int64_t total = count * n * m;
    for (int64_t i = 0; i < total; ++i) out[i] = beta == T(0) ? T(0) : beta * out[i];
    return;
  }
  if (!a.layout()) a.pack();
  if (!b.layout()) b.pack();
  const BlasLayout la = *a.layout(), lb = *b.layout();

  if (count > 1) {
    if (auto rs = folded_row_stride(batch, a, b); rs && count * n <= kMaxBlasInt) {
      if (auto lf = blas_layout(count * n, k, *rs, a.cs()); lf && !lf->transposed) {
        blas_gemm<T>(false, lb.transposed, count * n, m, k, alpha, a.data, lf->ld, b.data, lb.ld,
                     beta, out, m);
        return;
      }
    }
  }
  std::vector<int64_t> off_a, off_b;
  batch_offsets(batch, a, b, off_a, off_b);
  const int64_t work = n * m * k;
  const bool tiny = tiny_gemm_applies<T>(n, m, k, b.cs());
  // Small products of a batch (attention over short sequences: 64 x 64 x 32) also run the
  // register-blocked loop, b's rows packed contiguous per product where they are not: a BLAS
  // call packs both operands and checks its threading every time, which cost it half its
  // speed at these sizes.
  const bool small = !tiny && count > 1 && small_gemm_applies<T>(n, m, k);
  const auto run = [&](int64_t begin, int64_t end) {
    std::vector<T> panel;
    for (int64_t i = begin; i < end; ++i) {
      if (tiny || small) {
        const auto rows = kernels::contiguous_rows(b.data + off_b[i], k, m, b.rs(), b.cs(), panel);
        kernels::small_gemm<T>(n, m, k, alpha, a.data + off_a[i], a.rs(), a.cs(), rows.first,
                               rows.second, beta, out + i * n * m, m);
      } else {
        blas_gemm<T>(la.transposed, lb.transposed, n, m, k, alpha, a.data + off_a[i], la.ld,
                     b.data + off_b[i], lb.ld, beta, out + i * n * m, m);
      }
    }
  };
  const int64_t threads = omp_get_max_threads();
  if (work < kSmallGemmWork || (work < kMediumGemmWork && count >= 2 * threads)) {
    // BLAS runs single-threaded inside the parallel region (OpenMP build of OpenBLAS).
    kernels::parallel_range(count, std::max<int64_t>(1, kSmallGemmWork / 4 / work), run);
  } else {
    run(0, count);
  }
}

// Output batch shape of two operands' batch dims (all but the last two), broadcast.
Shape broadcast_batch(const char* op, const Tensor& a, const Tensor& b) {
  const int64_t na = std::max<int64_t>(a.dim() - 2, 0), nbd = std::max<int64_t>(b.dim() - 2, 0);
  const int64_t nb = std::max(na, nbd);
  Shape out(static_cast<size_t>(nb), 1);
  for (int64_t d = 0; d < nb; ++d) {
    const int64_t da = d - (nb - na), db = d - (nb - nbd);
    const int64_t sa = da >= 0 ? a.size(da) : 1, sb = db >= 0 ? b.size(db) : 1;
    KILN_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, op, ": the batch dims of shapes ",
               a.shape_str(), " and ", b.shape_str(), " cannot be broadcast (size ", sa, " vs ", sb,
               " at batch dim ", d, ")");
    out[d] = sa == 1 ? sb : sa;
  }
  return out;
}

// ---- matmul: torch.matmul semantics, any ranks >= 1 ----
int matmul_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &a = c.in(0), &b = c.in(1);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
             "matmul: both arguments need at least 1 dimension, got shapes ", a.shape_str(),
             " and ", b.shape_str());
  check_dtypes("matmul", a, b);
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  check_inner("matmul", a, b, ka, kb);
  Shape sizes = broadcast_batch("matmul", a, b);
  const int64_t n = a.dim() >= 2 ? a.size(-2) : 1, m = b.dim() >= 2 ? b.size(-1) : 1;
  check_blas_size("matmul", {n, m, ka});
  if (a.dim() >= 2) sizes.push_back(n);
  if (b.dim() >= 2) sizes.push_back(m);
  checked_numel(sizes, "matmul");
  return one_output(out, a.dtype(), std::move(sizes));
}
void matmul_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor &a = c.in(0), &b = c.in(1);
  const Shape batch = broadcast_batch("matmul", a, b);
  KILN_DTYPE_SWITCH_FLOATING(a.dtype(), "matmul", [&]<typename T>() {
    Operand<T> oa = operand<T>(a), ob = operand<T>(b);
    if (a.dim() == 1) {  // [k] -> [1, k]
      oa.sizes = {1, a.size(0)};
      oa.strides = {a.size(0) * a.stride(0), a.stride(0)};
    }
    if (b.dim() == 1) {  // [k] -> [k, 1]
      ob.sizes = {b.size(0), 1};
      ob.strides = {b.stride(0), 1};
    }
    batched_gemm<T>(outs[0].data_ptr<T>(), batch, std::move(oa), std::move(ob), T(1), T(0));
  });
}

// ---- mm: [n, k] @ [k, m] ----
int mm_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &a = c.in(0), &b = c.in(1);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "mm: expected 2-D tensors, got shapes ",
             a.shape_str(), " and ", b.shape_str());
  check_dtypes("mm", a, b);
  check_inner("mm", a, b, a.size(1), b.size(0));
  check_blas_size("mm", {a.size(0), a.size(1), b.size(1)});
  return one_output(out, a.dtype(), {a.size(0), b.size(1)});
}
void mm_kernel(const OpCall& c, std::span<Tensor> outs) {
  KILN_DTYPE_SWITCH_FLOATING(c.in(0).dtype(), "mm", [&]<typename T>() {
    batched_gemm<T>(outs[0].data_ptr<T>(), {}, operand<T>(c.in(0)), operand<T>(c.in(1)), T(1),
                    T(0));
  });
}

// ---- bmm: [B, n, k] @ [B, k, m], no broadcasting ----
int bmm_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &a = c.in(0), &b = c.in(1);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: expected 3-D tensors, got shapes ",
             a.shape_str(), " and ", b.shape_str());
  check_dtypes("bmm", a, b);
  KILN_CHECK(a.size(0) == b.size(0), ShapeError, "bmm: batch sizes of shapes ", a.shape_str(),
             " and ", b.shape_str(), " differ (", a.size(0), " != ", b.size(0),
             "); bmm does not broadcast, use matmul");
  check_inner("bmm", a, b, a.size(2), b.size(1));
  check_blas_size("bmm", {a.size(1), a.size(2), b.size(2)});
  return one_output(out, a.dtype(), {a.size(0), a.size(1), b.size(2)});
}
void bmm_kernel(const OpCall& c, std::span<Tensor> outs) {
  KILN_DTYPE_SWITCH_FLOATING(c.in(0).dtype(), "bmm", [&]<typename T>() {
    const Shape batch{c.in(0).size(0)};
    batched_gemm<T>(outs[0].data_ptr<T>(), batch, operand<T>(c.in(0)), operand<T>(c.in(1)), T(1),
                    T(0));
  });
}

// ---- addmm: beta * self + alpha * (a @ b), self broadcast to [n, m]; attrs [beta, alpha] ----
int addmm_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &self = c.in(0), &a = c.in(1), &b = c.in(2);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "addmm: expected 2-D matrices, got shapes ",
             a.shape_str(), " and ", b.shape_str());
  check_dtypes("addmm", a, b);
  KILN_CHECK(self.dtype() == a.dtype(), DTypeError, "addmm: self has dtype ", self.dtype(),
             " but the matrices have dtype ", a.dtype());
  check_inner("addmm", a, b, a.size(1), b.size(0));
  check_blas_size("addmm", {a.size(0), a.size(1), b.size(1)});
  const Shape sizes{a.size(0), b.size(1)};
  bool ok = self.dim() <= 2;
  for (int64_t d = 0; ok && d < self.dim(); ++d) {
    const int64_t s = self.size(d);
    ok = s == 1 || s == sizes[2 - self.dim() + d];
  }
  KILN_CHECK(ok, ShapeError, "addmm: self of shape ", self.shape_str(),
             " cannot be broadcast to the product's shape ", IntList(sizes));
  return one_output(out, a.dtype(), sizes);
}
void addmm_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& self = c.in(0);
  const Tensor& out = outs[0];
  KILN_DTYPE_SWITCH_FLOATING(out.dtype(), "addmm", [&]<typename T>() {
    const T beta = c.attrs.scalar(0).to<T>(), alpha = c.attrs.scalar(1).to<T>();
    T* o = out.data_ptr<T>();
    const int64_t n = out.size(0), m = out.size(1), k = c.in(1).size(1);
    if (beta != T(0)) {
      const T* s = self.data_ptr<T>();
      const int64_t nd = self.dim();
      const int64_t rs = nd == 2 && self.size(0) > 1 ? self.stride(0) : 0;
      const int64_t cs = nd >= 1 && self.size(-1) > 1 ? self.stride(-1) : 0;
      if constexpr (std::is_same_v<T, float>) {
        // A Linear layer's bias (one row for every row of out): added as the product's tiles
        // are stored, instead of written into out first and read back.
        if (rs == 0 && cs == 1) {
          Operand<T> a = operand<T>(c.in(1)), b = operand<T>(c.in(2));
          // (An operand with no unit-stride dim is packed contiguous: not transposed.)
          const bool ta = a.layout() && a.layout()->transposed;
          const bool tb = b.layout() && b.layout()->transposed;
          if (own_sgemm_applies(ta, tb, n, m, k)) {
            if (!a.layout()) a.pack();
            if (!b.layout()) b.pack();
            own_sgemm(ta, tb, n, m, k, alpha, a.data, a.layout()->ld, b.data, b.layout()->ld, beta,
                      o, m, s);
            return;
          }
        }
      }
      // out = self (broadcast); gemm then scales it by beta
      for (int64_t i = 0; i < n; ++i) {
        if (cs == 1) {
          std::copy(s + i * rs, s + i * rs + m, o + i * m);
        } else {
          for (int64_t j = 0; j < m; ++j) o[i * m + j] = s[i * rs + j * cs];
        }
      }
    }  // beta == 0 ignores self entirely (NaN included), as in BLAS and PyTorch
    batched_gemm<T>(o, {}, operand<T>(c.in(1)), operand<T>(c.in(2)), alpha, beta);
  });
}

// ---- derivatives (in Kiln ops; transposed views go to gemm without copies) ----
// Whether a matrix is the transpose of a contiguous one (a weight passed as w.t()).
bool is_transposed(const Tensor& m) {
  return m.dim() == 2 && m.size(0) > 1 && m.size(1) > 1 && m.stride(0) == 1 &&
         m.stride(1) == m.size(0);
}
// The gradients of a @ b, laid out as the operand they are for: for a transposed operand
// (Linear's w.t()) the product is taken the other way round and transposed back, so that the
// view's backward hands the weight a contiguous gradient that AccumulateGrad keeps instead of
// copying. Decided by the layout alone, so eager autograd and AOT autograd's trace (where the
// operand is a graph input with that layout) compute the same products, bit for bit.
Tensor mm_grad_a(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return is_transposed(a) ? mm(b, grad.t()).t() : mm(grad, b.t());
}
Tensor mm_grad_b(const Tensor& grad, const Tensor& a, const Tensor& b) {
  return is_transposed(b) ? mm(grad.t(), a).t() : mm(a.t(), grad);
}
// grad_a = grad @ b^T, grad_b = a^T @ grad, with 1-d operands seen as a row ([1, k]) or a
// column ([k, 1]) and the added dim taken out of the result again. Batch dims come back at the
// output's broadcast shape; autograd sums them down to each operand's shape.
void matmul_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor grad = c.grad();
  if (a.dim() == 2 && b.dim() == 2) {
    if (c.needs_grad(0)) g[0] = mm_grad_a(grad, a, b);
    if (c.needs_grad(1)) g[1] = mm_grad_b(grad, a, b);
    return;
  }
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1 && b1) {  // dot product: grad is 0-d
    if (c.needs_grad(0)) g[0] = grad * b;
    if (c.needs_grad(1)) g[1] = grad * a;
    return;
  }
  // Restore the dims the product dropped: [.., n, m] with n = 1 / m = 1 for 1-d operands.
  if (a1) grad = grad.unsqueeze(-2);
  if (b1) grad = grad.unsqueeze(-1);
  const Tensor a2 = a1 ? a.unsqueeze(0) : a, b2 = b1 ? b.unsqueeze(-1) : b;
  if (c.needs_grad(0)) {
    Tensor ga = matmul(grad, b2.mT());  // [..., n, k]
    if (a1) {
      ga = ga.squeeze(-2);  // [..., k]; autograd sums the batch dims
    }
    g[0] = ga;
  }
  if (c.needs_grad(1)) {
    // A matrix b against a batch of a (a Linear or a tied output layer written as matmul): one
    // product over the batch's rows, [k, rows] @ [rows, m], rather than a batch of [k, m]
    // products summed afterwards.
    Tensor gb = b2.dim() == 2 && a2.dim() > 2
                    ? mm(a2.reshape({-1, a2.size(-1)}).t(), grad.reshape({-1, grad.size(-1)}))
                    : matmul(a2.mT(), grad);  // [..., k, m]
    if (b1) gb = gb.squeeze(-1);
    g[1] = gb;
  }
}
void mm_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = mm_grad_a(c.grad(), c.in(0), c.in(1));
  if (c.needs_grad(1)) g[1] = mm_grad_b(c.grad(), c.in(0), c.in(1));
}
void bmm_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = bmm(c.grad(), c.in(1).mT());
  if (c.needs_grad(1)) g[1] = bmm(c.in(0).mT(), c.grad());
}
void addmm_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const double beta = c.attrs.scalar(0).to<double>(), alpha = c.attrs.scalar(1).to<double>();
  const Tensor& grad = c.grad();
  if (c.needs_grad(0)) g[0] = beta == 1.0 ? grad : grad * beta;
  const Tensor ga = alpha == 1.0 ? grad : grad * alpha;
  if (c.needs_grad(1)) g[1] = mm_grad_a(ga, c.in(1), c.in(2));
  if (c.needs_grad(2)) g[2] = mm_grad_b(ga, c.in(1), c.in(2));
}

}  // namespace

const OpDef& matmul_op =
    register_op({.name = "matmul",
                 .schema = "matmul(Tensor self, Tensor other) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = matmul_meta,
                 .kernel = matmul_kernel,
                 .derivative = {.fn = matmul_derivative, .saved_inputs = save({0, 1})}});
const OpDef& mm_op =
    register_op({.name = "mm",
                 .schema = "mm(Tensor self, Tensor mat2) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = mm_meta,
                 .kernel = mm_kernel,
                 .derivative = {.fn = mm_derivative, .saved_inputs = save({0, 1})}});
const OpDef& bmm_op =
    register_op({.name = "bmm",
                 .schema = "bmm(Tensor self, Tensor mat2) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = bmm_meta,
                 .kernel = bmm_kernel,
                 .derivative = {.fn = bmm_derivative, .saved_inputs = save({0, 1})}});
const OpDef& addmm_op = register_op(
    {.name = "addmm",
     .schema =
         "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
     .kind = OpKind::Extern,
     .meta = addmm_meta,
     .kernel = addmm_kernel,
     .derivative = {.fn = addmm_derivative, .saved_inputs = save({1, 2})}});

}  // namespace ops

Tensor matmul(const Tensor& a, const Tensor& b) { return ops::call(ops::matmul_op, {a, b}); }
Tensor mm(const Tensor& a, const Tensor& b) { return ops::call(ops::mm_op, {a, b}); }
Tensor bmm(const Tensor& a, const Tensor& b) { return ops::call(ops::bmm_op, {a, b}); }
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta,
             const Scalar& alpha) {
  return ops::call(ops::addmm_op, {self, a, b}, {beta, alpha});
}
Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  return ops::call_into(out, ops::matmul_op, {a, b});
}

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  KILN_CHECK(weight.dim() == 2, ShapeError,
             "linear: weight must be 2-D [out_features, in_features], got shape ",
             weight.shape_str());
  KILN_CHECK(x.dim() >= 1, ShapeError, "linear: input must have at least 1 dimension, got shape ",
             x.shape_str());
  KILN_CHECK(x.size(-1) == weight.size(1), ShapeError, "linear: input of shape ", x.shape_str(),
             " has ", x.size(-1), " features but weight of shape ", weight.shape_str(), " expects ",
             weight.size(1));
  if (!bias) return matmul(x, weight.t());
  // The bias must broadcast to [..., out_features]; say so here rather than in addmm or add.
  KILN_CHECK(bias->defined(), Error, "linear: bias is an undefined tensor");
  KILN_CHECK(bias->dim() == 0 || bias->size(-1) == weight.size(0) || bias->size(-1) == 1,
             ShapeError, "linear: bias of shape ", bias->shape_str(),
             " does not match out_features ", weight.size(0), " (weight of shape ",
             weight.shape_str(), ", input of shape ", x.shape_str(), ")");
  // With a bias, fold the leading dims into rows so the bias rides along in one addmm.
  if (x.dim() == 2) return addmm(*bias, x, weight.t());
  if (x.dim() > 2 && bias->dim() <= 1 && x.is_contiguous()) {
    Shape out_sizes = x.sizes();
    out_sizes.back() = weight.size(0);
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
    return addmm(*bias, x.reshape({rows, x.size(-1)}), weight.t()).view(out_sizes);
  }
  return add(matmul(x, weight.t()), *bias);
}

// ---- Python-facing forms (kiln/ops/function.h) ----
namespace {
const FunctionDef& linear_function =
    register_function({.schema = "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
                       .doc = "input @ weight.T + bias.",
                       .call = [](const FunctionArgs& a) -> FunctionResult {
                         return linear(a.tensor(0), a.tensor(1), a.opt_tensor(2));
                       },
                       .module = "nn.functional"});
}  // namespace

}  // namespace kiln
