// Fused scaled dot-product attention: what `scaled_dot_product_attention` runs when it has no
// explicit mask and no dropout (PyTorch's F.scaled_dot_product_attention likewise picks a
// fused CPU kernel). For each batch entry (one head of one sequence) and block of query rows,
// the scores q k^T * scale, their causal mask, softmax and the weighted sum of the values are
// computed in a scratch block that stays in cache, instead of writing [..., L, S] scores and
// weights to memory and reading them back in three more passes. The backward pass recomputes
// the weights from q and k (nothing of size L x S is saved between the passes) and produces
// dq, dk and dv in one sweep per batch entry.
//
// The math is the composite's, step for step: scores scaled after the dot product, the softmax
// row function eager softmax uses (over the keys a row keeps: masked keys get weight 0, as
// exp(-inf) gives), and softmax's derivative written as (g * y) - y * sum(g * y). Only the
// order of some sums differs from eager matmul and softmax (the results agree to rounding).
// fused_attention_backward has no derivative of its own (as PyTorch's fused kernels): a double
// backward through it throws, naming it.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kiln/core/parallel.h"
#include "ops/kernels/block_loop.h"
#include "ops/kernels/small_gemm.h"
#include "ops/kernels/softmax_row.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {
namespace {

// Query rows per block: a block's scores (kQueryBlock x S) stay in the L2 cache up to S of a
// few thousand, and with a causal mask only the keys up to the block's last row are computed.
constexpr int64_t kQueryBlock = 32;

// The shapes of one call: q [batch..., L, E], k [batch..., S, E], v [batch..., S, Ev].
struct AttentionShape {
  int64_t batch = 1, L = 0, S = 0, E = 0, Ev = 0;
};

void check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  KILN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, op,
             ": query, key and value need the same number (>= 2) of dims [..., L, E], got shapes ",
             q.shape_str(), ", ", k.shape_str(), " and ", v.shape_str());
  KILN_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError,
             op, ": query, key and value must share one floating dtype, got ", q.dtype(), ", ",
             k.dtype(), " and ", v.dtype());
  for (int64_t d = 0; d + 2 < q.dim(); ++d)
    KILN_CHECK(q.size(d) == k.size(d) && q.size(d) == v.size(d), ShapeError, op,
               ": query, key and value must have equal batch dims, got shapes ", q.shape_str(),
               ", ", k.shape_str(), " and ", v.shape_str());
  KILN_CHECK(q.size(-1) == k.size(-1), ShapeError, op, ": query of shape ", q.shape_str(),
             " and key of shape ", k.shape_str(), " differ in the embedding dim (", q.size(-1),
             " != ", k.size(-1), ")");
  KILN_CHECK(k.size(-2) == v.size(-2), ShapeError, op, ": key of shape ", k.shape_str(),
             " and value of shape ", v.shape_str(), " differ in the sequence dim (", k.size(-2),
             " != ", v.size(-2), ")");
}

AttentionShape shape_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionShape s;
  for (int64_t d = 0; d + 2 < q.dim(); ++d) s.batch *= q.size(d);
  s.L = q.size(-2);
  s.E = q.size(-1);
  s.S = k.size(-2);
  s.Ev = v.size(-1);
  return s;
}

// One operand seen per batch entry: the element offset of each entry's matrix, and its row and
// column strides.
template <typename T>
struct Matrices {
  const T* data;
  std::vector<int64_t> offsets;
  int64_t rs, cs;

  explicit Matrices(const Tensor& t) : data(t.data_ptr<T>()), rs(t.stride(-2)), cs(t.stride(-1)) {
    const int64_t nb = t.dim() - 2;
    int64_t count = 1;
    for (int64_t d = 0; d < nb; ++d) count *= t.size(d);
    offsets.resize(static_cast<size_t>(count));
    std::vector<int64_t> idx(static_cast<size_t>(nb), 0);
    int64_t off = 0;
    for (int64_t i = 0; i < count; ++i) {
      offsets[static_cast<size_t>(i)] = off;
      for (int64_t d = nb - 1; d >= 0; --d) {  // odometer over the batch dims
        const auto du = static_cast<size_t>(d);
        off += t.stride(d);
        if (++idx[du] < t.size(d)) break;
        off -= t.stride(d) * t.size(d);
        idx[du] = 0;
      }
    }
  }
  const T* at(int64_t b) const { return data + offsets[static_cast<size_t>(b)]; }
};

// `rows` x `cols` of m (element strides rs, cs) as contiguous rows in buf; returns the rows'
// pointer and stride, m itself when its rows are already contiguous.
template <typename T>
std::pair<const T*, int64_t> contiguous_rows(const T* m, int64_t rows, int64_t cols, int64_t rs,
                                             int64_t cs, std::vector<T>& buf) {
  if (cs == 1 || cols <= 1) return {m, rs};
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[static_cast<size_t>(r * cols + c)] = m[r * rs + c * cs];
  return {buf.data(), cols};
}

// m [rows, cols] transposed into buf as [cols, rows], contiguous.
template <typename T>
const T* transposed(const T* m, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                    std::vector<T>& buf) {
  buf.resize(static_cast<size_t>(rows * cols));
  kernels::transpose_into(m, rows, cols, rs, cs, buf.data());
  return buf.data();
}

// Asks for `rows` rows of m (element strides rs, cs; cols elements each) to be brought into
// the cache: the next batch entry's operands, while this one computes. Rows of q, k and v are
// far apart (a head's slice of every position), which the hardware prefetchers do not follow,
// so without this each entry starts by waiting on the L3 cache line by line.
template <typename T>
void prefetch_rows(const T* m, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs != 1) return;
  constexpr int64_t kLine = 64 / sizeof(T);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += kLine) __builtin_prefetch(m + r * rs + c);
}

// The keys query rows [i0, i1) attend to: all S, or with a causal mask those up to row i1 - 1.
int64_t keys_for_block(int64_t i1, int64_t S, bool causal) { return causal ? std::min(S, i1) : S; }

// The attention weights of query rows [i0, i1) over keys [0, ncols) into p (row stride ncols):
// softmax(q k^T * scale) with keys after the row masked when causal. kt is k transposed [E, S].
template <typename T>
void attention_weights(const T* q, int64_t qrs, int64_t qcs, const T* kt, const AttentionShape& s,
                       int64_t i0, int64_t i1, int64_t ncols, T scale, bool causal, T* p) {
  const int64_t rows = i1 - i0;
  kernels::small_gemm<T>(rows, ncols, s.E, scale, q + i0 * qrs, qrs, qcs, kt, s.S, T(0), p, ncols);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = p + r * ncols;
    // Masked keys get weight 0: the softmax runs over the kept ones only (a causal row i keeps
    // keys 0..i), as exp(-inf - max) would give 0 for the others.
    const int64_t kept = causal ? std::min(ncols, i0 + r + 1) : ncols;
    kernels::softmax_row<T, false>(row, row, kept, false, nullptr, nullptr);
    std::fill(row + kept, row + ncols, T(0));
  }
}

// Batch entries (forward: entries x query blocks) per thread, at least: a few of them cost
// more than a parallel region only when they are tiny.
int64_t attention_grain(const AttentionShape& s, int64_t rows) {
  const int64_t work = std::max<int64_t>(1, rows * s.S * (s.E + s.Ev));
  return std::max<int64_t>(1, kParallelGrain / work);
}

// ---- fused_attention: inputs [q, k, v]; attrs [scale, is_causal] ----
int fused_attention_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2);
  check_attention_inputs("fused_attention", q, k, v);
  Shape sizes = q.sizes();
  sizes.back() = v.size(-1);
  return one_output(out, q.dtype(), std::move(sizes));
}

void fused_attention_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2);
  const AttentionShape s = shape_of(q, k, v);
  const bool causal = c.attrs.b(1);
  KILN_DTYPE_SWITCH_FLOATING(q.dtype(), "fused_attention", [&]<typename T>() {
    T* out = outs[0].data_ptr<T>();
    if (s.S == 0) {  // softmax over no keys: an empty sum of values
      std::fill(out, out + outs[0].numel(), T(0));
      return;
    }
    const T scale = static_cast<T>(c.attrs.f(0));
    const Matrices<T> qm(q), km(k), vm(v);
    const int64_t blocks = (s.L + kQueryBlock - 1) / kQueryBlock;
    kernels::parallel_range(
        s.batch * blocks, attention_grain(s, std::min(s.L, kQueryBlock)),
        [&](int64_t t0, int64_t t1) {
          std::vector<T> kt_buf, v_buf, p(static_cast<size_t>(std::min(s.L, kQueryBlock) * s.S));
          const T* kt = nullptr;
          std::pair<const T*, int64_t> vrows;
          int64_t packed = -1;  // the batch entry kt and vrows hold
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t b = t / blocks, i0 = (t % blocks) * kQueryBlock;
            const int64_t i1 = std::min(s.L, i0 + kQueryBlock);
            if (b != packed) {
              if (b + 1 < s.batch) {
                prefetch_rows(qm.at(b + 1), s.L, s.E, qm.rs, qm.cs);
                prefetch_rows(km.at(b + 1), s.S, s.E, km.rs, km.cs);
                prefetch_rows(vm.at(b + 1), s.S, s.Ev, vm.rs, vm.cs);
              }
              kt = transposed(km.at(b), s.S, s.E, km.rs, km.cs, kt_buf);
              vrows = contiguous_rows(vm.at(b), s.S, s.Ev, vm.rs, vm.cs, v_buf);
              packed = b;
            }
            const int64_t ncols = keys_for_block(i1, s.S, causal);
            attention_weights(qm.at(b), qm.rs, qm.cs, kt, s, i0, i1, ncols, scale, causal,
                              p.data());
            kernels::small_gemm<T>(i1 - i0, s.Ev, ncols, T(1), p.data(), ncols, 1, vrows.first,
                                   vrows.second, T(0), out + (b * s.L + i0) * s.Ev, s.Ev);
          }
        });
  });
}

// ---- fused_attention_backward: inputs [grad, q, k, v]; attrs [scale, is_causal];
// outputs [grad_q, grad_k, grad_v] ----
int fused_attention_backward_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &g = c.in(0), &q = c.in(1), &k = c.in(2), &v = c.in(3);
  check_attention_inputs("fused_attention_backward", q, k, v);
  Shape want = q.sizes();
  want.back() = v.size(-1);
  KILN_CHECK(g.sizes() == want && g.dtype() == q.dtype(), ShapeError,
             "fused_attention_backward: the output gradient must be ", q.dtype(), " of shape ",
             IntList(want), ", got ", g.dtype(), " of shape ", g.shape_str());
  out[0] = {q.dtype(), q.sizes()};
  out[1] = {k.dtype(), k.sizes()};
  out[2] = {v.dtype(), v.sizes()};
  return 3;
}

// d(scores) of query rows [i0, i1) from the weights p and their gradient dp (both [rows,
// ncols]), written over dp: softmax's derivative (g * y) - y * sum(g * y), times the scale, and
// zero where the causal mask set the score.
template <typename T>
void score_gradients(const T* p, T* dp, int64_t rows, int64_t ncols, int64_t i0, T scale,
                     bool causal) {
  using V = vec::Vec<T>;
  constexpr int64_t W = V::width;
  for (int64_t r = 0; r < rows; ++r) {
    const T* pr = p + r * ncols;
    T* gr = dp + r * ncols;
    V acc(T(0));
    int64_t j = 0;
    for (; j + W <= ncols; j += W) {
      const V gy = V::load(pr + j) * V::load(gr + j);
      gy.store(gr + j);
      acc = acc + gy;
    }
    T total = kernels::reduce_lanes(acc, false);
    for (; j < ncols; ++j) total += gr[j] = pr[j] * gr[j];
    const V vt(total), vs(scale);
    j = 0;
    for (; j + W <= ncols; j += W) ((V::load(gr + j) - V::load(pr + j) * vt) * vs).store(gr + j);
    for (; j < ncols; ++j) gr[j] = (gr[j] - pr[j] * total) * scale;
    if (causal) std::fill(gr + std::min(ncols, i0 + r + 1), gr + ncols, T(0));
  }
}

void fused_attention_backward_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor &g = c.in(0), &q = c.in(1), &k = c.in(2), &v = c.in(3);
  const AttentionShape s = shape_of(q, k, v);
  const bool causal = c.attrs.b(1);
  KILN_DTYPE_SWITCH_FLOATING(q.dtype(), "fused_attention_backward", [&]<typename T>() {
    T* dq = outs[0].data_ptr<T>();
    T* dk = outs[1].data_ptr<T>();
    T* dv = outs[2].data_ptr<T>();
    std::fill(dk, dk + outs[1].numel(), T(0));  // dk and dv accumulate over query blocks
    std::fill(dv, dv + outs[2].numel(), T(0));
    if (s.S == 0) {
      std::fill(dq, dq + outs[0].numel(), T(0));
      return;
    }
    const T scale = static_cast<T>(c.attrs.f(0));
    const Matrices<T> gm(g), qm(q), km(k), vm(v);
    const int64_t block = std::min(s.L, kQueryBlock);
    kernels::parallel_range(s.batch, attention_grain(s, s.L), [&](int64_t b0, int64_t b1) {
      std::vector<T> kt_buf, vt_buf, k_buf, q_buf, g_buf;
      std::vector<T> p(static_cast<size_t>(block * s.S)), dp(p.size());
      for (int64_t b = b0; b < b1; ++b) {
        if (b + 1 < b1) {
          prefetch_rows(gm.at(b + 1), s.L, s.Ev, gm.rs, gm.cs);
          prefetch_rows(qm.at(b + 1), s.L, s.E, qm.rs, qm.cs);
          prefetch_rows(km.at(b + 1), s.S, s.E, km.rs, km.cs);
          prefetch_rows(vm.at(b + 1), s.S, s.Ev, vm.rs, vm.cs);
        }
        const T* kt = transposed(km.at(b), s.S, s.E, km.rs, km.cs, kt_buf);
        const T* vt = transposed(vm.at(b), s.S, s.Ev, vm.rs, vm.cs, vt_buf);
        const auto krows = contiguous_rows(km.at(b), s.S, s.E, km.rs, km.cs, k_buf);
        T* dkb = dk + b * s.S * s.E;
        T* dvb = dv + b * s.S * s.Ev;
        for (int64_t i0 = 0; i0 < s.L; i0 += kQueryBlock) {
          const int64_t i1 = std::min(s.L, i0 + kQueryBlock), rows = i1 - i0;
          const int64_t ncols = keys_for_block(i1, s.S, causal);
          attention_weights(qm.at(b), qm.rs, qm.cs, kt, s, i0, i1, ncols, scale, causal, p.data());
          const T* gb = gm.at(b) + i0 * gm.rs;
          // d(weights) = g v^T
          kernels::small_gemm<T>(rows, ncols, s.Ev, T(1), gb, gm.rs, gm.cs, vt, s.S, T(0),
                                 dp.data(), ncols);
          // dv += weights^T g (the weights read transposed in place)
          const auto grows = contiguous_rows(gb, rows, s.Ev, gm.rs, gm.cs, g_buf);
          kernels::small_gemm<T>(ncols, s.Ev, rows, T(1), p.data(), 1, ncols, grows.first,
                                 grows.second, T(1), dvb, s.Ev);
          score_gradients(p.data(), dp.data(), rows, ncols, i0, scale, causal);
          // dq = d(scores) k, dk += d(scores)^T q
          kernels::small_gemm<T>(rows, s.E, ncols, T(1), dp.data(), ncols, 1, krows.first,
                                 krows.second, T(0), dq + (b * s.L + i0) * s.E, s.E);
          const auto qrows = contiguous_rows(qm.at(b) + i0 * qm.rs, rows, s.E, qm.rs, qm.cs, q_buf);
          kernels::small_gemm<T>(ncols, s.E, rows, T(1), dp.data(), 1, ncols, qrows.first,
                                 qrows.second, T(1), dkb, s.E);
        }
      }
    });
  });
}

}  // namespace

const OpDef& fused_attention_backward_op = register_op(
    {.name = "fused_attention_backward",
     .schema = "fused_attention_backward(Tensor grad, Tensor query, Tensor key, Tensor value, "
               "float scale, bool is_causal) -> (Tensor grad_query, Tensor grad_key, "
               "Tensor grad_value)",
     .kind = OpKind::Extern,
     .meta = fused_attention_backward_meta,
     .kernel = fused_attention_backward_kernel});

namespace {
void fused_attention_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (!c.grad(0).defined()) return;
  const Tensor inputs[] = {c.grad(0), c.in(0), c.in(1), c.in(2)};
  std::array<Tensor, kMaxOpOutputs> grads;
  dispatch(fused_attention_backward_op, inputs, c.attrs, grads);
  for (size_t i = 0; i < 3; ++i)
    if (c.needs_grad(i)) g[i] = grads[i];
}
}  // namespace

const OpDef& fused_attention_op = register_op(
    {.name = "fused_attention",
     .schema = "fused_attention(Tensor query, Tensor key, Tensor value, float scale, "
               "bool is_causal) -> Tensor",
     .kind = OpKind::Extern,
     .meta = fused_attention_meta,
     .kernel = fused_attention_kernel,
     .derivative = {.fn = fused_attention_derivative, .saved_inputs = save({0, 1, 2})}});

}  // namespace ops
}  // namespace kiln
