// Fused scaled dot-product attention: what `scaled_dot_product_attention` runs when it has no
// explicit mask and no dropout (PyTorch's F.scaled_dot_product_attention likewise picks a
// fused CPU kernel). For each batch entry (one head of one sequence) and block of query rows,
// the scores q k^T * scale, their causal mask, softmax and the weighted sum of the values are
// computed in a scratch block that stays in cache, instead of writing [..., L, S] scores and
// weights to memory and reading them back in three more passes. The backward pass recomputes
// the weights from q and k (nothing of size L x S is saved between the passes) and produces
// dq, dk and dv in one sweep per batch entry.
//
// The math is the composite's, step for step: scores scaled after the dot product, softmax's
// three passes with its vector exp (masked keys get weight 0, as exp(-inf) gives), and
// softmax's derivative written as (g * y) - y * sum(g * y). A block's weights are kept
// transposed, [keys, queries], so those passes run down columns of vectors (one query per
// lane) with no sums across lanes. Only the order of some sums differs from eager matmul and
// softmax: the results agree to rounding.
// fused_attention_backward has no derivative of its own (as PyTorch's fused kernels): a double
// backward through it throws, naming it.
#include "ops/attention.h"

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

// Where an operand's matrix dims are. Head-major (PyTorch's layout): q [batch..., L, E].
// Sequence-major: q [batch..., L, H, E], the heads a batch dim after the sequence — the layout
// a projection's output has, so scaled_dot_product_attention passes q, k, v transposed back to
// it and gets its output, [batch..., L, H, Ev] contiguous, in the layout the next projection
// reads (transposing it back is then a view, not a copy), and its gradients likewise.
struct MatrixLayout {
  bool sequence_major = false;
  // The dim of the rows (positions); the columns are always the last dim.
  int64_t row_dim(int64_t rank) const { return sequence_major ? rank - 3 : rank - 2; }
  // Whether dim d of a rank-`rank` operand is a batch dim (neither rows nor columns).
  bool batch_dim(int64_t d, int64_t rank) const { return d != row_dim(rank) && d != rank - 1; }
};

// The shapes of one call: L query and S key positions, E and Ev the last dims of q and v,
// `batch` matrices (heads included).
struct AttentionShape {
  int64_t batch = 1, L = 0, S = 0, E = 0, Ev = 0;
};

void check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                            MatrixLayout layout) {
  const int64_t rank = q.dim(), min_rank = layout.sequence_major ? 3 : 2;
  KILN_CHECK(rank >= min_rank && k.dim() == rank && v.dim() == rank, ShapeError, op,
             ": query, key and value need the same number (>= ", min_rank, ") of dims ",
             layout.sequence_major ? "[..., L, H, E]" : "[..., L, E]", ", got shapes ",
             q.shape_str(), ", ", k.shape_str(), " and ", v.shape_str());
  KILN_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError,
             op, ": query, key and value must share one floating dtype, got ", q.dtype(), ", ",
             k.dtype(), " and ", v.dtype());
  for (int64_t d = 0; d < rank; ++d)
    if (layout.batch_dim(d, rank))
      KILN_CHECK(q.size(d) == k.size(d) && q.size(d) == v.size(d), ShapeError, op,
                 ": query, key and value must have equal batch dims, got shapes ", q.shape_str(),
                 ", ", k.shape_str(), " and ", v.shape_str());
  const int64_t rows = layout.row_dim(rank);
  KILN_CHECK(q.size(-1) == k.size(-1), ShapeError, op, ": query of shape ", q.shape_str(),
             " and key of shape ", k.shape_str(), " differ in the embedding dim (", q.size(-1),
             " != ", k.size(-1), ")");
  KILN_CHECK(k.size(rows) == v.size(rows), ShapeError, op, ": key of shape ", k.shape_str(),
             " and value of shape ", v.shape_str(), " differ in the sequence dim (", k.size(rows),
             " != ", v.size(rows), ")");
  // The causal mask compares positions as floats (row_limits): exact below 2^24.
  KILN_CHECK(
      q.size(rows) < kMaxFusedAttentionPositions && k.size(rows) < kMaxFusedAttentionPositions,
      ShapeError, op, ": sequences of 2^24 positions or more are not supported (query ",
      q.shape_str(), ", key ", k.shape_str(),
      "); scaled_dot_product_attention takes the composite path for them");
}

AttentionShape shape_of(const Tensor& q, const Tensor& k, const Tensor& v, MatrixLayout layout) {
  AttentionShape s;
  const int64_t rank = q.dim();
  for (int64_t d = 0; d < rank; ++d)
    if (layout.batch_dim(d, rank)) s.batch *= q.size(d);
  s.L = q.size(layout.row_dim(rank));
  s.E = q.size(-1);
  s.S = k.size(layout.row_dim(rank));
  s.Ev = v.size(-1);
  return s;
}

// One operand (or output) seen per batch entry: the element offset of each entry's matrix, and
// its row and column strides.
template <typename T>
struct Matrices {
  T* data;
  std::vector<int64_t> offsets;
  int64_t rs, cs;

  Matrices(const Tensor& t, MatrixLayout layout)
      : data(t.data_ptr<T>()), rs(t.stride(layout.row_dim(t.dim()))), cs(t.stride(-1)) {
    std::vector<int64_t> dims;  // the batch dims, outermost first
    int64_t count = 1;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (layout.batch_dim(d, t.dim())) {
        dims.push_back(d);
        count *= t.size(d);
      }
    const auto nb = static_cast<int64_t>(dims.size());
    offsets.resize(static_cast<size_t>(count));
    std::vector<int64_t> idx(static_cast<size_t>(nb), 0);
    int64_t off = 0;
    for (int64_t i = 0; i < count; ++i) {
      offsets[static_cast<size_t>(i)] = off;
      for (int64_t j = nb - 1; j >= 0; --j) {  // odometer over the batch dims
        const auto ju = static_cast<size_t>(j);
        const int64_t d = dims[ju];
        off += t.stride(d);
        if (++idx[ju] < t.size(d)) break;
        off -= t.stride(d) * t.size(d);
        idx[ju] = 0;
      }
    }
  }
  T* at(int64_t b) const { return data + offsets[static_cast<size_t>(b)]; }
};

// m [rows, cols] transposed into buf as [cols, ld] (ld >= rows), the columns past rows zero.
template <typename T>
const T* transposed(const T* m, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t ld,
                    std::vector<T>& buf) {
  buf.assign(static_cast<size_t>(cols * ld), T(0));
  kernels::transpose_into(m, rows, cols, rs, cs, buf.data(), ld);
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

// Sets `rows` rows of m (element strides rs, cs; cols elements each) to zero.
template <typename T>
void zero_rows(T* m, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = m + r * rs;
    if (cs == 1) {
      std::fill(row, row + cols, T(0));
    } else {
      for (int64_t c = 0; c < cols; ++c) row[c * cs] = T(0);
    }
  }
}

// The keys query rows [i0, i1) attend to: all S, or with a causal mask those up to row i1 - 1.
int64_t keys_for_block(int64_t i1, int64_t S, bool causal) { return causal ? std::min(S, i1) : S; }

// Query rows per block rounded up to whole vectors: the weights of a block are kept
// transposed, [keys, lanes], so that a vector holds one key's weights for `width` queries and
// the softmax over keys runs down the columns with no sums across lanes.
template <typename T>
int64_t lanes_for(int64_t rows) {
  constexpr int64_t W = vec::Vec<T>::width;
  return (rows + W - 1) / W * W;
}

// One past each lane's query row, for the query vector starting at row i: under the causal
// mask, key j is visible to the lanes where j < this (exact: rows below 2^24 in float).
template <typename T>
vec::Vec<T> row_limits(int64_t i) {
  alignas(64) T limit[vec::Vec<T>::width];
  for (int l = 0; l < vec::Vec<T>::width; ++l) limit[l] = static_cast<T>(i + l + 1);
  return vec::Vec<T>::load(limit);
}

// The attention weights of query rows [i0, i0 + rows) over keys [0, ncols), transposed into pt
// (row stride lanes_for(rows)): softmax over keys of q k^T * scale, keys after the query's row
// masked (weight 0) when causal. k is read through its strides; qt is the block of q
// transposed, [E, lanes], zero past `rows`.
template <typename T>
void attention_weights(const T* k, int64_t krs, int64_t kcs, const T* qt, int64_t E, int64_t i0,
                       int64_t rows, int64_t ncols, T scale, bool causal, T* pt) {
  using V = vec::Vec<T>;
  constexpr int64_t W = V::width;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t lanes = lanes_for<T>(rows);
  kernels::small_gemm<T>(ncols, lanes, E, scale, k, krs, kcs, qt, lanes, T(0), pt, lanes);
  for (int64_t c = 0; c < lanes; c += W) {
    // The same three passes as softmax_row, each down one column of vectors: the max (NaN
    // ignored, as there), exp(score - max) and its sum, the scaling.
    const V limit = row_limits<T>(i0 + c);
    V mx(kNegInf);
    for (int64_t j = 0; j < ncols; ++j) {
      const V x = V::load(pt + j * lanes + c);
      mx = kernels::vmax(mx, causal ? vec::select(V(T(j)) < limit, x, V(kNegInf)) : x);
    }
    V sum(T(0));
    for (int64_t j = 0; j < ncols; ++j) {
      T* at = pt + j * lanes + c;
      V e = vec::exp(V::load(at) - mx);
      if (causal) e = vec::select(V(T(j)) < limit, e, V(T(0)));
      e.store(at);
      sum = sum + e;
    }
    const V inv = V(T(1)) / sum;
    for (int64_t j = 0; j < ncols; ++j)
      (V::load(pt + j * lanes + c) * inv).store(pt + j * lanes + c);
  }
}

// Batch entries (forward: entries x query blocks) per thread, at least: a few of them cost
// more than a parallel region only when they are tiny.
int64_t attention_grain(const AttentionShape& s, int64_t rows) {
  const int64_t work = std::max<int64_t>(1, rows * s.S * (s.E + s.Ev));
  return std::max<int64_t>(1, kParallelGrain / work);
}

// ---- fused_attention: inputs [q, k, v]; attrs [scale, is_causal, sequence_major] ----
int fused_attention_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2);
  check_attention_inputs("fused_attention", q, k, v, {c.attrs.b(2)});
  Shape sizes = q.sizes();
  sizes.back() = v.size(-1);
  return one_output(out, q.dtype(), std::move(sizes));
}

void fused_attention_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2);
  const MatrixLayout layout{c.attrs.b(2)};
  const AttentionShape s = shape_of(q, k, v, layout);
  const bool causal = c.attrs.b(1);
  KILN_DTYPE_SWITCH_FLOATING(q.dtype(), "fused_attention", [&]<typename T>() {
    T* out = outs[0].data_ptr<T>();
    if (s.S == 0) {  // softmax over no keys: an empty sum of values
      std::fill(out, out + outs[0].numel(), T(0));
      return;
    }
    const T scale = static_cast<T>(c.attrs.f(0));
    const Matrices<T> qm(q, layout), km(k, layout), vm(v, layout), om(outs[0], layout);
    const int64_t blocks = (s.L + kQueryBlock - 1) / kQueryBlock;
    const int64_t block = std::min(s.L, kQueryBlock);
    kernels::parallel_range(
        s.batch * blocks, attention_grain(s, block), [&](int64_t t0, int64_t t1) {
          std::vector<T> qt_buf, v_buf, pt(static_cast<size_t>(s.S * lanes_for<T>(block)));
          std::pair<const T*, int64_t> vrows;
          int64_t packed = -1;  // the batch entry vrows holds
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t b = t / blocks, i0 = (t % blocks) * kQueryBlock;
            const int64_t rows = std::min(s.L, i0 + kQueryBlock) - i0;
            if (b != packed) {
              if (b + 1 < s.batch) {
                prefetch_rows(qm.at(b + 1), s.L, s.E, qm.rs, qm.cs);
                prefetch_rows(km.at(b + 1), s.S, s.E, km.rs, km.cs);
                prefetch_rows(vm.at(b + 1), s.S, s.Ev, vm.rs, vm.cs);
              }
              vrows = kernels::contiguous_rows(vm.at(b), s.S, s.Ev, vm.rs, vm.cs, v_buf);
              packed = b;
            }
            const int64_t ncols = keys_for_block(i0 + rows, s.S, causal),
                          lanes = lanes_for<T>(rows);
            const T* qt = transposed(qm.at(b) + i0 * qm.rs, rows, s.E, qm.rs, qm.cs, lanes, qt_buf);
            attention_weights(km.at(b), km.rs, km.cs, qt, s.E, i0, rows, ncols, scale, causal,
                              pt.data());
            // out = weights @ v, the weights read transposed
            kernels::small_gemm<T>(rows, s.Ev, ncols, T(1), pt.data(), 1, lanes, vrows.first,
                                   vrows.second, T(0), om.at(b) + i0 * om.rs, om.rs);
          }
        });
  });
}

// ---- fused_attention_backward: inputs [grad, q, k, v]; attrs [scale, is_causal,
// sequence_major]; outputs [grad_q, grad_k, grad_v] ----
int fused_attention_backward_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor &g = c.in(0), &q = c.in(1), &k = c.in(2), &v = c.in(3);
  check_attention_inputs("fused_attention_backward", q, k, v, {c.attrs.b(2)});
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

// d(scores) of query rows [i0, i0 + rows) from the weights pt and their gradient dpt (both
// transposed, [ncols, lanes]), written over dpt: softmax's derivative (g * y) - y * sum(g * y)
// per query, times the scale, and zero where the causal mask hid the key.
template <typename T>
void score_gradients(const T* pt, T* dpt, int64_t rows, int64_t ncols, int64_t i0, T scale,
                     bool causal) {
  using V = vec::Vec<T>;
  constexpr int64_t W = V::width;
  const int64_t lanes = lanes_for<T>(rows);
  for (int64_t c = 0; c < lanes; c += W) {
    V total(T(0));
    for (int64_t j = 0; j < ncols; ++j) {
      const V gy = V::load(pt + j * lanes + c) * V::load(dpt + j * lanes + c);
      gy.store(dpt + j * lanes + c);
      total = total + gy;
    }
    const V limit = row_limits<T>(i0 + c), vs(scale);
    for (int64_t j = 0; j < ncols; ++j) {
      T* at = dpt + j * lanes + c;
      V ds = (V::load(at) - V::load(pt + j * lanes + c) * total) * vs;
      if (causal) ds = vec::select(V(T(j)) < limit, ds, V(T(0)));
      ds.store(at);
    }
  }
}

void fused_attention_backward_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor &g = c.in(0), &q = c.in(1), &k = c.in(2), &v = c.in(3);
  const MatrixLayout layout{c.attrs.b(2)};
  const AttentionShape s = shape_of(q, k, v, layout);
  const bool causal = c.attrs.b(1);
  KILN_DTYPE_SWITCH_FLOATING(q.dtype(), "fused_attention_backward", [&]<typename T>() {
    if (s.S == 0) {  // no keys: dk and dv are empty, and q had nothing to attend to
      T* dq = outs[0].data_ptr<T>();
      std::fill(dq, dq + outs[0].numel(), T(0));
      return;
    }
    const T scale = static_cast<T>(c.attrs.f(0));
    const Matrices<T> gm(g, layout), qm(q, layout), km(k, layout), vm(v, layout);
    const Matrices<T> dqm(outs[0], layout), dkm(outs[1], layout), dvm(outs[2], layout);
    const int64_t block = std::min(s.L, kQueryBlock);
    kernels::parallel_range(s.batch, attention_grain(s, s.L), [&](int64_t b0, int64_t b1) {
      std::vector<T> qt_buf, gt_buf, k_buf, q_buf, g_buf;
      const size_t scratch = static_cast<size_t>(s.S * lanes_for<T>(block));
      std::vector<T> pt(scratch), dpt(scratch);
      for (int64_t b = b0; b < b1; ++b) {
        if (b + 1 < b1) {
          prefetch_rows(gm.at(b + 1), s.L, s.Ev, gm.rs, gm.cs);
          prefetch_rows(qm.at(b + 1), s.L, s.E, qm.rs, qm.cs);
          prefetch_rows(km.at(b + 1), s.S, s.E, km.rs, km.cs);
          prefetch_rows(vm.at(b + 1), s.S, s.Ev, vm.rs, vm.cs);
        }
        const auto krows = kernels::contiguous_rows(km.at(b), s.S, s.E, km.rs, km.cs, k_buf);
        T* dkb = dkm.at(b);
        T* dvb = dvm.at(b);
        // dk and dv accumulate over the query blocks: zeroed here, by the thread that owns the
        // entry (a serial fill of the whole outputs first was ~0.2 ms a layer of W7, with the
        // other threads waiting).
        zero_rows(dkb, s.S, s.E, dkm.rs, dkm.cs);
        zero_rows(dvb, s.S, s.Ev, dvm.rs, dvm.cs);
        for (int64_t i0 = 0; i0 < s.L; i0 += kQueryBlock) {
          const int64_t rows = std::min(s.L, i0 + kQueryBlock) - i0, lanes = lanes_for<T>(rows);
          const int64_t ncols = keys_for_block(i0 + rows, s.S, causal);
          const T* qb = qm.at(b) + i0 * qm.rs;
          const T* gb = gm.at(b) + i0 * gm.rs;
          const T* qt = transposed(qb, rows, s.E, qm.rs, qm.cs, lanes, qt_buf);
          attention_weights(km.at(b), km.rs, km.cs, qt, s.E, i0, rows, ncols, scale, causal,
                            pt.data());
          // d(weights)^T = v g^T
          const T* gt = transposed(gb, rows, s.Ev, gm.rs, gm.cs, lanes, gt_buf);
          kernels::small_gemm<T>(ncols, lanes, s.Ev, T(1), vm.at(b), vm.rs, vm.cs, gt, lanes, T(0),
                                 dpt.data(), lanes);
          // dv += weights^T g
          const auto grows = kernels::contiguous_rows(gb, rows, s.Ev, gm.rs, gm.cs, g_buf);
          kernels::small_gemm<T>(ncols, s.Ev, rows, T(1), pt.data(), lanes, 1, grows.first,
                                 grows.second, T(1), dvb, dvm.rs);
          score_gradients(pt.data(), dpt.data(), rows, ncols, i0, scale, causal);
          // dq = d(scores) k, dk += d(scores)^T q (d(scores) read transposed or in place)
          kernels::small_gemm<T>(rows, s.E, ncols, T(1), dpt.data(), 1, lanes, krows.first,
                                 krows.second, T(0), dqm.at(b) + i0 * dqm.rs, dqm.rs);
          const auto qrows = kernels::contiguous_rows(qb, rows, s.E, qm.rs, qm.cs, q_buf);
          kernels::small_gemm<T>(ncols, s.E, rows, T(1), dpt.data(), lanes, 1, qrows.first,
                                 qrows.second, T(1), dkb, dkm.rs);
        }
      }
    });
  });
}

}  // namespace

const OpDef& fused_attention_backward_op = register_op(
    {.name = "fused_attention_backward",
     .schema = "fused_attention_backward(Tensor grad, Tensor query, Tensor key, Tensor value, "
               "float scale, bool is_causal, bool sequence_major) -> (Tensor grad_query, "
               "Tensor grad_key, Tensor grad_value)",
     .kind = OpKind::Extern,
     .meta = fused_attention_backward_meta,
     .kernel = fused_attention_backward_kernel,
     .internal = true});

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

const OpDef& fused_attention_op =
    register_op({.name = "fused_attention",
                 .schema = "fused_attention(Tensor query, Tensor key, Tensor value, float scale, "
                           "bool is_causal, bool sequence_major) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = fused_attention_meta,
                 .kernel = fused_attention_kernel,
                 .derivative = {.fn = fused_attention_derivative, .saved_inputs = save({0, 1, 2})},
                 .internal = true});

}  // namespace ops
}  // namespace kiln
