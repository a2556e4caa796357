// The reduction loop engine. A reduction folds the input's reduced dims into one accumulator
// per output element. The engine sees the input as two index spaces, the kept dims (the
// output's order) and the reduced dims, coalesces each, and picks a loop order that reads
// memory sequentially:
//  - inner: the input's contiguous dim is reduced, so each output folds contiguous rows
//    (vectorised, with several independent accumulators);
//  - outer: the input's contiguous dim is kept, so a block of adjacent outputs folds whole
//    input rows lane by lane (acc[j] op= x[j]), streaming the input in order.
// Any other layout is made contiguous first, which turns it into one of the two. Work is split
// across OpenMP threads by output, or, when there are too few outputs to go round, by reduced
// range with per-thread partial accumulators merged afterwards.
//
// Internal to the kernels: never included by public headers.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/vec.h"

namespace kiln::kernels {

// Adjacent outputs folded together on the outer path (and columns of a scan or arg-reduction).
inline constexpr int64_t kColumnBlock = 512;

// An index space walked innermost-first: sizes and strides (in elements) per dim.
struct Walk {
  Shape sizes, strides;

  int64_t offset_of(int64_t flat) const {
    int64_t off = 0;
    for (size_t d = 0; d < sizes.size(); ++d) {
      off += (flat % sizes[d]) * strides[d];
      flat /= sizes[d];
    }
    return off;
  }
  // Appends an outer dim, merging it into the previous one when they are contiguous together.
  void push(int64_t size, int64_t stride) {
    if (size == 1) return;
    if (!sizes.empty() && stride == strides.back() * sizes.back()) {
      sizes.back() *= size;
      return;
    }
    sizes.push_back(size);
    strides.push_back(stride);
  }
};

// Calls f(offset, len) for each run of consecutive dim-0 positions among the flat indices
// [begin, end) of `w`; the run's elements sit at offset + i * w.strides[0], i < len.
template <typename F>
void for_each_run(const Walk& w, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  const int64_t nd = w.sizes.ssize();
  if (nd == 1) {
    f(begin * w.strides[0], end - begin);
    return;
  }
  Shape idx(static_cast<size_t>(nd), 0);
  int64_t off = 0;
  for (int64_t d = 0, rem = begin; d < nd; ++d) {
    idx[d] = rem % w.sizes[d];
    rem /= w.sizes[d];
    off += idx[d] * w.strides[d];
  }
  while (begin < end) {
    const int64_t len = std::min(w.sizes[0] - idx[0], end - begin);
    f(off, len);
    begin += len;
    idx[0] += len;
    off += len * w.strides[0];
    for (int64_t d = 0; d + 1 < nd && idx[d] == w.sizes[d]; ++d) {
      off += w.strides[d + 1] - idx[d] * w.strides[d];
      idx[d] = 0;
      ++idx[d + 1];
    }
  }
}

// The two index spaces of a reduction, each coalesced. Pseudo dims keep both non-empty: a full
// reduction has kept = {size 1}, a reduction over nothing (0-d, size-1 dims) has red = {1}.
struct ReducePlan {
  Walk kept;  // kept dims innermost-first (the output's order), with the input's strides
  Walk red;   // reduced dims by increasing input stride
  int64_t num_out = 1, num_red = 1;
};

inline ReducePlan plan_reduction(const Tensor& x, const std::vector<bool>& reduced) {
  ReducePlan p;
  struct Dim {
    int64_t stride, size;
  };
  SmallVector<Dim, 6> red;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    if (reduced[static_cast<size_t>(d)]) {
      red.push_back({x.stride(d), x.size(d)});
      p.num_red *= x.size(d);
    } else {
      p.kept.push(x.size(d), x.stride(d));
      p.num_out *= x.size(d);
    }
  }
  std::stable_sort(red.begin(), red.end(),
                   [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  for (const Dim& d : red) p.red.push(d.size, d.stride);
  if (p.kept.sizes.empty()) {
    p.kept.sizes.push_back(1);
    p.kept.strides.push_back(0);
  }
  if (p.red.sizes.empty()) {
    p.red.sizes.push_back(1);
    p.red.strides.push_back(1);
  }
  return p;
}

inline int64_t max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// Whether run_units splits each unit's reduced range across nt threads (too few units to keep
// them busy) and merges the partial folds, rather than folding each unit whole on one thread.
inline bool splits_reduced_range(int64_t units, int64_t num_red, int64_t work, int64_t nt) {
  if (work <= kParallelGrain || nt == 1) return false;
  return units < 4 * nt && num_red >= 2 * nt;
}
// reduce_loop's outputs per unit when the reduced elements are contiguous ("inner"): many
// when there are many outputs (amortising the bookkeeping of short rows), one when there are
// few (so threads split the rows instead).
inline int64_t inner_outputs_per_unit(int64_t num_out, int64_t nt) {
  return std::clamp<int64_t>(num_out / (8 * nt), 1, kColumnBlock);
}
// Whether reduce_loop folds each of `rows` contiguous rows of n elements whole, starting from
// the identity with the reducer's row(): what a generated row reduction reproduces, bit for bit.
inline bool folds_rows_whole(int64_t rows, int64_t n) {
  const int64_t nt = max_threads(), per_unit = inner_outputs_per_unit(rows, nt);
  return !splits_reduced_range((rows + per_unit - 1) / per_unit, n, rows * n, nt);
}

// Runs `units` independent groups of `width` accumulators, each folding the reduced steps
// [0, num_red): accumulate(unit, rb, re, acc) folds steps [rb, re) into acc[0..width),
// merge(a, b) combines the partials of consecutive ranges (a's first), finish(unit, acc)
// writes the unit's outputs. `work` (elements read in all) decides whether to use threads.
template <typename Acc, typename Accumulate, typename Merge, typename Finish>
void run_units(int64_t units, int64_t width, int64_t num_red, int64_t work, const Acc& identity,
               Accumulate&& accumulate, Merge&& merge, Finish&& finish) {
  auto serial = [&](int64_t ub, int64_t ue) {
    Acc acc[kColumnBlock];
    for (int64_t u = ub; u < ue; ++u) {
      std::fill(acc, acc + width, identity);
      accumulate(u, int64_t{0}, num_red, acc);
      finish(u, acc);
    }
  };
  const int64_t nt = max_threads();
  if (work <= kParallelGrain || nt == 1) return serial(0, units);
  if (!splits_reduced_range(units, num_red, work, nt)) return parallel_range(units, 0, serial);
  // Too few units to keep every thread busy: split each unit's reduced range instead.
  const int64_t per_unit = width * nt;
  std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(units * per_unit)]);
  std::fill(partial.get(), partial.get() + units * per_unit, identity);
  const int threads = static_cast<int>(nt);
#pragma omp parallel num_threads(threads)
  {
    const int64_t nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t chunk = (num_red + nth - 1) / nth;
    const int64_t rb = std::min(num_red, tid * chunk), re = std::min(num_red, rb + chunk);
    if (rb < re)
      for (int64_t u = 0; u < units; ++u)
        accumulate(u, rb, re, partial.get() + u * per_unit + tid * width);
  }
  for (int64_t u = 0; u < units; ++u) {
    Acc* acc = partial.get() + u * per_unit;
    for (int64_t t = 1; t < nt; ++t)
      for (int64_t j = 0; j < width; ++j) acc[j] = merge(acc[j], acc[t * width + j]);
    finish(u, acc);
  }
}

// Rows folded per pass over a block of accumulators on the outer path.
inline constexpr int64_t kRowBatch = 8;

// Folds the `reduced` dims of x (elements of type T) with reducer r and writes
// r.finish(acc, o) to out[o] for each output o (in the kept dims' row-major order). A reducer
// provides: Acc, Out, identity, merge(a, b), row(acc, p, n, o) folding n contiguous elements
// into output o's accumulator, columns(acc, p, step, rows, n, o0) folding p[i * step + j] for
// i < rows into acc[j] (output o0 + j) for j < n, and finish(acc, o).
template <typename T, typename R>
void reduce_loop(Tensor x, const std::vector<bool>& reduced, typename R::Out* out, const R& r) {
  using Acc = typename R::Acc;
  ReducePlan p = plan_reduction(x, reduced);
  if (p.num_out == 0) return;
  if (p.num_red == 0) {
    for (int64_t o = 0; o < p.num_out; ++o) out[o] = r.finish(r.identity, o);
    return;
  }
  bool inner = p.red.strides[0] == 1;
  if (!inner && p.kept.strides[0] != 1) {
    x = x.contiguous();
    p = plan_reduction(x, reduced);
    inner = p.red.strides[0] == 1;
  }
  const T* xp = static_cast<const T*>(x.data_ptr());
  const int64_t work = p.num_out * p.num_red;
  auto merge = [&](const Acc& a, const Acc& b) { return r.merge(a, b); };
  if (inner) {
    // A unit is a block of consecutive outputs.
    const int64_t block = inner_outputs_per_unit(p.num_out, max_threads());
    const int64_t kept_step = p.kept.strides[0];
    run_units<Acc>(
        (p.num_out + block - 1) / block, block, p.num_red, work, r.identity,
        [&](int64_t u, int64_t rb, int64_t re, Acc* acc) {
          const int64_t o0 = u * block;
          int64_t o = o0;
          const bool one_row = p.red.sizes.size() == 1;  // the common case, kept simple
          for_each_run(p.kept, o0, std::min(p.num_out, o0 + block), [&](int64_t off, int64_t len) {
            const T* base = xp + off;
            Acc* a = acc + (o - o0);
            if (one_row) {
              for (int64_t i = 0; i < len; ++i)
                r.row(a[i], base + i * kept_step + rb, re - rb, o + i);
            } else {
              for (int64_t i = 0; i < len; ++i)
                for_each_run(p.red, rb, re, [&](int64_t roff, int64_t rlen) {
                  r.row(a[i], base + i * kept_step + roff, rlen, o + i);
                });
            }
            o += len;
          });
        },
        merge,
        [&](int64_t u, Acc* acc) {
          const int64_t o0 = u * block, o1 = std::min(p.num_out, o0 + block);
          for (int64_t o = o0; o < o1; ++o) out[o] = r.finish(acc[o - o0], o);
        });
    return;
  }
  // Outer: kept dim 0 is contiguous in the input; a unit is a block of it in one output row.
  const int64_t n0 = p.kept.sizes[0], blocks = (n0 + kColumnBlock - 1) / kColumnBlock;
  Walk rest;
  for (int64_t d = 1; d < p.kept.sizes.ssize(); ++d) rest.push(p.kept.sizes[d], p.kept.strides[d]);
  if (rest.sizes.empty()) {  // a single output row
    rest.sizes.push_back(1);
    rest.strides.push_back(0);
  }
  const int64_t step = p.red.strides[0];
  auto unit_range = [&](int64_t u, int64_t& o0, int64_t& n) {
    const int64_t q = u / blocks, j0 = (u % blocks) * kColumnBlock;
    o0 = q * n0 + j0;
    n = std::min(kColumnBlock, n0 - j0);
    return xp + rest.offset_of(q) + j0;
  };
  run_units<Acc>(
      p.num_out / n0 * blocks, kColumnBlock, p.num_red, work, r.identity,
      [&](int64_t u, int64_t rb, int64_t re, Acc* acc) {
        int64_t o0, n;
        const T* base = unit_range(u, o0, n);
        for_each_run(p.red, rb, re, [&](int64_t off, int64_t len) {
          for (int64_t i = 0; i < len; i += kRowBatch)
            r.columns(acc, base + off + i * step, step, std::min(kRowBatch, len - i), n, o0);
        });
      },
      merge,
      [&](int64_t u, Acc* acc) {
        int64_t o0, n;
        unit_range(u, o0, n);
        for (int64_t j = 0; j < n; ++j) out[o0 + j] = r.finish(acc[j], o0 + j);
      });
}

// ---- building reducers from a map, a fold and a finish ----

using vec::load_as;

// Whether a Vec<C> can be split into Vec<Acc> parts (see part()).
template <typename C, typename Acc>
inline constexpr bool kSplits = std::is_same_v<C, Acc>
#ifdef KILN_VEC_AVX2
                                || (std::is_same_v<C, float> && std::is_same_v<Acc, double>)
#endif
    ;

// Lanes [k * w, (k + 1) * w) of v as a Vec<Acc> of width w.
template <typename Acc, typename C>
vec::Vec<Acc> part(vec::Vec<C> v, int k) {
  if constexpr (std::is_same_v<C, Acc>) {
    return v;
#if defined(KILN_VEC_AVX512)
  } else {
    return _mm512_cvtps_pd(k == 0 ? _mm512_castps512_ps256(v.v) : _mm512_extractf32x8_ps(v.v, 1));
#elif defined(KILN_VEC_AVX2)
  } else {
    return _mm256_cvtps_pd(k == 0 ? _mm256_castps256_ps128(v.v) : _mm256_extractf128_ps(v.v, 1));
#endif
  }
}

// The identities of max and min.
template <typename T>
T lowest_value() {
  if constexpr (std::numeric_limits<T>::has_infinity)
    return -std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::lowest();
}
template <typename T>
T highest_value() {
  if constexpr (std::numeric_limits<T>::has_infinity)
    return std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::max();
}

// Scalar and Vec forms of the math a reducer's map uses.
template <typename X>
X abs_any(X x) {
  if constexpr (std::is_arithmetic_v<X>)
    return std::abs(x);
  else
    return vec::abs(x);
}
template <typename X>
X exp_any(X x) {
  if constexpr (std::is_arithmetic_v<X>)
    return std::exp(x);
  else
    return vec::exp(x);
}
template <typename X>
X pow_any(X x, X y) {
  if constexpr (std::is_arithmetic_v<X>)
    return std::pow(x, y);
  else
    return vec::pow(x, y);
}

// Folds: associative, commutative combinations, each for scalars and Vecs.
namespace fold {
struct Add {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>)  // wraps on overflow, as PyTorch's integer sums do
      return static_cast<A>(static_cast<std::make_unsigned_t<A>>(a) +
                            static_cast<std::make_unsigned_t<A>>(b));
    else
      return a + b;
  }
};
struct Mul {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<std::make_unsigned_t<A>>(a) *
                            static_cast<std::make_unsigned_t<A>>(b));
    else
      return a * b;
  }
};
// max and min propagate NaN.
// (On AVX2 and AVX-512, max_ps(a, b) gives b when either is NaN, so only a NaN in a needs a
// blend.)
struct Max {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_arithmetic_v<A>) {
      return (a > b || a != a) ? a : b;
#if defined(KILN_VEC_AVX512)
    } else if constexpr (std::is_same_v<A, vec::Vec<float>>) {
      return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q),
                                  _mm512_max_ps(a.v, b.v), a.v);
    } else if constexpr (std::is_same_v<A, vec::Vec<double>>) {
      return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a.v, a.v, _CMP_UNORD_Q),
                                  _mm512_max_pd(a.v, b.v), a.v);
#elif defined(KILN_VEC_AVX2)
    } else if constexpr (std::is_same_v<A, vec::Vec<float>>) {
      return _mm256_blendv_ps(_mm256_max_ps(a.v, b.v), a.v, _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q));
    } else if constexpr (std::is_same_v<A, vec::Vec<double>>) {
      return _mm256_blendv_pd(_mm256_max_pd(a.v, b.v), a.v, _mm256_cmp_pd(a.v, a.v, _CMP_UNORD_Q));
#endif
    } else {
      return vec::max_nan(a, b);
    }
  }
};
struct Min {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_arithmetic_v<A>) {
      return (a < b || a != a) ? a : b;
#if defined(KILN_VEC_AVX512)
    } else if constexpr (std::is_same_v<A, vec::Vec<float>>) {
      return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q),
                                  _mm512_min_ps(a.v, b.v), a.v);
    } else if constexpr (std::is_same_v<A, vec::Vec<double>>) {
      return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a.v, a.v, _CMP_UNORD_Q),
                                  _mm512_min_pd(a.v, b.v), a.v);
#elif defined(KILN_VEC_AVX2)
    } else if constexpr (std::is_same_v<A, vec::Vec<float>>) {
      return _mm256_blendv_ps(_mm256_min_ps(a.v, b.v), a.v, _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q));
    } else if constexpr (std::is_same_v<A, vec::Vec<double>>) {
      return _mm256_blendv_pd(_mm256_min_pd(a.v, b.v), a.v, _mm256_cmp_pd(a.v, a.v, _CMP_UNORD_Q));
#endif
    } else {
      return vec::min_nan(a, b);
    }
  }
};
struct And {
  bool operator()(bool a, bool b) const { return a && b; }
};
struct Or {
  bool operator()(bool a, bool b) const { return a || b; }
};
}  // namespace fold

// Passes each element through unchanged.
struct IdentityMap {
  template <typename X>
  X operator()(X x, X) const {
    return x;
  }
};

// A reducer: each element of T is converted to C, goes through map(x, param) (param: this
// output's entry of `param`, e.g. its mean for a variance, or 0 when there is none), and is
// folded into an Acc; finish(acc, o) makes output o. C is Acc unless the map is costly math
// better done in the input's own precision (exp of float32 in float32, summed in double).
// Vectorised with Vec<C> when it splits into Vec<Acc> parts, with four accumulators per row.
template <typename T, typename AccT, typename OutT, typename Map, typename Fold, typename Finish,
          typename C = AccT>
struct MapFold {
  using Acc = AccT;
  using Out = OutT;
  using VA = vec::Vec<Acc>;
  using VC = vec::Vec<C>;
  static constexpr int64_t WA = VA::width, WC = VC::width, kParts = WC / WA;
  static constexpr bool kVector = WA > 1 && kSplits<C, Acc>;

  Acc identity;
  Map map;
  Fold fold;
  Finish fin;
  const Acc* param = nullptr;

  Acc merge(Acc a, Acc b) const { return fold(a, b); }
  Out finish(Acc a, int64_t o) const { return fin(a, o); }
  Acc map_one(T x, C prm) const { return static_cast<Acc>(map(static_cast<C>(x), prm)); }

  void row(Acc& acc, const T* p, int64_t n, int64_t o) const {
    const C prm = param ? static_cast<C>(param[o]) : C{};
    int64_t i = 0;
    if constexpr (kVector) {
      if (n >= 4 * WC) {  // shorter rows go faster through the scalar loop
        constexpr int64_t kChunks = kParts >= 4 ? 1 : 4 / kParts;  // per step: 4 accumulators
        const VC pv(prm);
        VA a[4] = {VA(identity), VA(identity), VA(identity), VA(identity)};
        for (; i + kChunks * WC <= n; i += kChunks * WC) {
          for (int64_t c = 0; c < kChunks; ++c) {
            const VC m = map(load_as<C>(p + i + c * WC), pv);
            for (int k = 0; k < kParts; ++k)
              a[(c * kParts + k) % 4] = fold(a[(c * kParts + k) % 4], part<Acc>(m, k));
          }
        }
        for (; i + WC <= n; i += WC) {
          const VC m = map(load_as<C>(p + i), pv);
          for (int k = 0; k < kParts; ++k) a[k % 4] = fold(a[k % 4], part<Acc>(m, k));
        }
        alignas(64) Acc lanes[WA];
        fold(fold(a[0], a[1]), fold(a[2], a[3])).store(lanes);
        for (int64_t k = 0; k < WA; ++k) acc = fold(acc, lanes[k]);
      }
    }
    for (; i < n; ++i) acc = fold(acc, map_one(p[i], prm));
  }

  void columns(Acc* acc, const T* p, int64_t step, int64_t rows, int64_t n, int64_t o0) const {
    int64_t j = 0;
    if constexpr (kVector) {
      for (; j + WC <= n; j += WC) {
        const VC pv = param ? load_as<C>(param + o0 + j) : VC(C{});
        VA a[kParts];
        for (int k = 0; k < kParts; ++k) a[k] = VA::load(acc + j + k * WA);
        for (int64_t i = 0; i < rows; ++i) {
          const VC m = map(load_as<C>(p + i * step + j), pv);
          for (int k = 0; k < kParts; ++k) a[k] = fold(a[k], part<Acc>(m, k));
        }
        for (int k = 0; k < kParts; ++k) a[k].store(acc + j + k * WA);
      }
    }
    for (; j < n; ++j) {
      const C prm = param ? static_cast<C>(param[o0 + j]) : C{};
      Acc a = acc[j];
      for (int64_t i = 0; i < rows; ++i) a = fold(a, map_one(p[i * step + j], prm));
      acc[j] = a;
    }
  }
};

// A MapFold computing its map in Acc (make_reducer) or in C (make_reducer_in<C>).
template <typename T, typename Out, typename Acc, typename Map, typename Fold, typename Finish>
MapFold<T, Acc, Out, Map, Fold, Finish> make_reducer(Acc identity, Map map, Fold fold,
                                                     Finish finish, const Acc* param = nullptr) {
  return {identity, map, fold, finish, param};
}
template <typename C, typename T, typename Out, typename Acc, typename Map, typename Fold,
          typename Finish>
MapFold<T, Acc, Out, Map, Fold, Finish, C> make_reducer_in(Acc identity, Map map, Fold fold,
                                                           Finish finish,
                                                           const Acc* param = nullptr) {
  return {identity, map, fold, finish, param};
}

// Position of the first element of p[0..n) equal to m (or the first NaN, when m is NaN);
// m must occur.
template <typename T>
int64_t find_first(const T* p, int64_t n, T m) {
  int64_t i = 0;
#ifdef KILN_VEC_AVX2
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using V = vec::Vec<T>;
    const V mv(m);
    for (; i + V::width <= n; i += V::width) {
      const V x = V::load(p + i);
      unsigned bits;
#if defined(KILN_VEC_AVX512)
      if constexpr (std::is_same_v<T, float>) {
        bits = m != m ? _mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q)
                      : _mm512_cmp_ps_mask(x.v, mv.v, _CMP_EQ_OQ);
      } else {
        bits = m != m ? _mm512_cmp_pd_mask(x.v, x.v, _CMP_UNORD_Q)
                      : _mm512_cmp_pd_mask(x.v, mv.v, _CMP_EQ_OQ);
      }
#else
      if constexpr (std::is_same_v<T, float>) {
        bits = _mm256_movemask_ps(m != m ? _mm256_cmp_ps(x.v, x.v, _CMP_UNORD_Q)
                                         : _mm256_cmp_ps(x.v, mv.v, _CMP_EQ_OQ));
      } else {
        bits = _mm256_movemask_pd(m != m ? _mm256_cmp_pd(x.v, x.v, _CMP_UNORD_Q)
                                         : _mm256_cmp_pd(x.v, mv.v, _CMP_EQ_OQ));
      }
#endif
      if (bits) return i + __builtin_ctz(bits);
    }
  }
#endif
  for (; i < n; ++i)
    if (p[i] == m || (m != m && p[i] != p[i])) return i;
  return n - 1;  // unreachable when m occurs
}

// ---- reductions along one dim that also give the index (argmax, max(dim)) ----

// The best value so far and its index along the reduced dim (index < 0: nothing seen yet).
template <typename T>
struct ArgAcc {
  T v{};
  int64_t i = -1;
};

// Whether v replaces the current best b: strictly better (ties keep the first), or NaN.
template <bool IsMax, typename T>
inline bool arg_better(T v, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b != b) return false;
    if (v != v) return true;
  }
  return IsMax ? v > b : v < b;
}

// x (contiguous) viewed as [outer, n, inner], reduced over n (n >= 1): writes the best value
// (when `values` is non-null) and its index for each (outer, inner) position.
template <bool IsMax, typename T>
void arg_reduce(const T* xp, int64_t outer, int64_t n, int64_t inner, T* values, int64_t* indices) {
  using A = ArgAcc<T>;
  auto merge = [](const A& a, const A& b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    return arg_better<IsMax>(b.v, a.v) ? b : a;
  };
  const int64_t work = outer * n * inner;
  if (inner == 1) {
    // Rows: the vectorised max (or min) of the range, then where it first occurs.
    using Fold = std::conditional_t<IsMax, fold::Max, fold::Min>;
    const auto extreme = make_reducer<T, T>(IsMax ? lowest_value<T>() : highest_value<T>(),
                                            IdentityMap{}, Fold{}, [](T a, int64_t) { return a; });
    run_units<A>(
        outer, 1, n, work, A{},
        [&](int64_t u, int64_t rb, int64_t re, A* acc) {
          const T* p = xp + u * n + rb;
          T m = extreme.identity;
          extreme.row(m, p, re - rb, 0);
          const int64_t k = find_first(p, re - rb, m);
          acc[0] = merge(acc[0], A{p[k], rb + k});  // p[k], not m: -0.0 and 0.0 compare equal
        },
        merge,
        [&](int64_t u, A* acc) {
          if (values) values[u] = acc[0].v;
          indices[u] = acc[0].i;
        });
    return;
  }
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  run_units<A>(
      outer * blocks, kColumnBlock, n, work, A{},
      [&](int64_t u, int64_t rb, int64_t re, A* acc) {
        const int64_t q = u / blocks, j0 = (u % blocks) * kColumnBlock;
        const int64_t m = std::min(kColumnBlock, inner - j0);
        const T* p = xp + q * n * inner + j0;
        int64_t k = rb;
        if (acc[0].i < 0) {
          for (int64_t j = 0; j < m; ++j) acc[j] = {p[k * inner + j], k};
          ++k;
        }
        // Separate value and index arrays with branch-free updates, which vectorise.
        T best[kColumnBlock];
        int64_t at[kColumnBlock];
        for (int64_t j = 0; j < m; ++j) best[j] = acc[j].v, at[j] = acc[j].i;
        for (; k < re; ++k) {
          const T* row = p + k * inner;
          for (int64_t j = 0; j < m; ++j) {
            const T v = row[j], b = best[j];
            bool take = IsMax ? v > b : v < b;
            if constexpr (std::is_floating_point_v<T>) take = take || (v != v && b == b);
            best[j] = take ? v : b;
            at[j] = take ? k : at[j];
          }
        }
        for (int64_t j = 0; j < m; ++j) acc[j] = {best[j], at[j]};
      },
      merge,
      [&](int64_t u, A* acc) {
        const int64_t q = u / blocks, j0 = (u % blocks) * kColumnBlock;
        const int64_t m = std::min(kColumnBlock, inner - j0);
        for (int64_t j = 0; j < m; ++j) {
          if (values) values[q * inner + j0 + j] = acc[j].v;
          indices[q * inner + j0 + j] = acc[j].i;
        }
      });
}

// ---- scans (cumsum, cumprod) ----

// x (contiguous, of the output's type T) viewed as [outer, n, inner]: out[.., k, ..] is the
// fold of x[.., 0..k, ..], accumulated in Acc.
template <typename T, typename Acc, typename Fold>
void scan(const T* xp, T* out, int64_t outer, int64_t n, int64_t inner, Acc identity, Fold fold) {
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock, units = outer * blocks;
  const int64_t per_unit = std::max<int64_t>(1, n * std::min(inner, kColumnBlock));
  auto run = [&](int64_t ub, int64_t ue) {
    Acc acc[kColumnBlock];
    for (int64_t u = ub; u < ue; ++u) {
      const int64_t q = u / blocks, j0 = (u % blocks) * kColumnBlock;
      const int64_t m = std::min(kColumnBlock, inner - j0);
      const int64_t base = q * n * inner + j0;
      if (m == 1) {
        Acc a = identity;
        for (int64_t k = 0; k < n; ++k) {
          a = fold(a, static_cast<Acc>(xp[base + k * inner]));
          out[base + k * inner] = static_cast<T>(a);
        }
        continue;
      }
      std::fill(acc, acc + m, identity);
      for (int64_t k = 0; k < n; ++k) {
        const T* src = xp + base + k * inner;
        T* dst = out + base + k * inner;
        for (int64_t j = 0; j < m; ++j) {
          acc[j] = fold(acc[j], static_cast<Acc>(src[j]));
          dst[j] = static_cast<T>(acc[j]);
        }
      }
    }
  };
  parallel_range(units, std::max<int64_t>(1, kParallelGrain / per_unit), run);
}

}  // namespace kiln::kernels
