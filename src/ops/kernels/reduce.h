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
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/vec.h"

namespace kiln::kernels {

// Adjacent outputs folded together on the outer path (and columns of a scan or arg-reduction).
inline constexpr int64_t kColumnBlock = 128;

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
  const int64_t nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (work <= kParallelGrain || nt == 1) return serial(0, units);
  if (units >= 4 * nt || num_red < 2 * nt) return parallel_range(units, 0, serial);
  // Too few units to keep every thread busy: split each unit's reduced range instead.
  const int64_t per_unit = width * nt;
  std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(units * per_unit)]);
  std::fill(partial.get(), partial.get() + units * per_unit, identity);
#pragma omp parallel num_threads(static_cast<int>(nt))
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

// Folds the `reduced` dims of x (elements of type T) with reducer r and writes
// r.finish(acc, o) to out[o] for each output o (in the kept dims' row-major order). A reducer
// provides: Acc, Out, identity, merge(a, b), row(acc, p, n, o) folding n contiguous elements
// into output o's accumulator, columns(acc, p, n, o0) folding p[j] into acc[j] (output o0 + j)
// for j < n, and finish(acc, o).
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
    run_units<Acc>(
        p.num_out, 1, p.num_red, work, r.identity,
        [&](int64_t o, int64_t rb, int64_t re, Acc* acc) {
          const T* base = xp + p.kept.offset_of(o);
          for_each_run(p.red, rb, re,
                       [&](int64_t off, int64_t len) { r.row(acc[0], base + off, len, o); });
        },
        merge, [&](int64_t o, Acc* acc) { out[o] = r.finish(acc[0], o); });
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
          for (int64_t i = 0; i < len; ++i) r.columns(acc, base + off + i * step, n, o0);
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

// Loads Vec<Acc>::width elements of T, converted to Acc.
template <typename Acc, typename T>
vec::Vec<Acc> load_as(const T* p) {
  using V = vec::Vec<Acc>;
  if constexpr (std::is_same_v<Acc, T>) {
    return V::load(p);
#ifdef KILN_VEC_AVX2
  } else if constexpr (std::is_same_v<Acc, double> && std::is_same_v<T, float>) {
    return V(_mm256_cvtps_pd(_mm_loadu_ps(p)));
#endif
  } else {
    alignas(64) Acc buf[V::width];
    for (int i = 0; i < V::width; ++i) buf[i] = static_cast<Acc>(p[i]);
    return V::load(buf);
  }
}

// Scalar and Vec forms of the math a reducer's map uses.
template <typename X>
X abs_any(X x) {
  if constexpr (std::is_arithmetic_v<X>) return std::abs(x);
  else return vec::abs(x);
}
template <typename X>
X exp_any(X x) {
  if constexpr (std::is_arithmetic_v<X>) return std::exp(x);
  else return vec::exp(x);
}
template <typename X>
X pow_any(X x, X y) {
  if constexpr (std::is_arithmetic_v<X>) return std::pow(x, y);
  else return vec::pow(x, y);
}

// Folds: associative, commutative combinations, each for scalars and Vecs.
namespace fold {
struct Add {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>)  // wraps on overflow, as PyTorch's integer sums do
      return static_cast<A>(static_cast<std::make_unsigned_t<A>>(a) +
                            static_cast<std::make_unsigned_t<A>>(b));
    else return a + b;
  }
};
struct Mul {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<std::make_unsigned_t<A>>(a) *
                            static_cast<std::make_unsigned_t<A>>(b));
    else return a * b;
  }
};
// max and min propagate NaN.
struct Max {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_arithmetic_v<A>) return (a > b || a != a) ? a : b;
    else return vec::max_nan(a, b);
  }
};
struct Min {
  template <typename A>
  A operator()(A a, A b) const {
    if constexpr (std::is_arithmetic_v<A>) return (a < b || a != a) ? a : b;
    else return vec::min_nan(a, b);
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
  X operator()(X x, X) const { return x; }
};

// A reducer: each element of T becomes Acc, goes through map(x, param) (param: this output's
// entry of `param`, e.g. its mean for a variance, or 0 when there is none), and is folded;
// finish(acc, o) makes output o. Vectorised with Vec<Acc> when Acc has a SIMD form.
template <typename T, typename AccT, typename OutT, typename Map, typename Fold, typename Finish>
struct MapFold {
  using Acc = AccT;
  using Out = OutT;
  using V = vec::Vec<Acc>;
  static constexpr int64_t W = V::width;

  Acc identity;
  Map map;
  Fold fold;
  Finish fin;
  const Acc* param = nullptr;

  Acc merge(Acc a, Acc b) const { return fold(a, b); }
  Out finish(Acc a, int64_t o) const { return fin(a, o); }

  void row(Acc& acc, const T* p, int64_t n, int64_t o) const {
    const Acc prm = param ? param[o] : Acc{};
    int64_t i = 0;
    if constexpr (W > 1) {
      if (n >= W) {
        const V pv(prm);
        V a0(identity), a1(identity), a2(identity), a3(identity);
        for (; i + 4 * W <= n; i += 4 * W) {
          a0 = fold(a0, map(load_as<Acc>(p + i), pv));
          a1 = fold(a1, map(load_as<Acc>(p + i + W), pv));
          a2 = fold(a2, map(load_as<Acc>(p + i + 2 * W), pv));
          a3 = fold(a3, map(load_as<Acc>(p + i + 3 * W), pv));
        }
        for (; i + W <= n; i += W) a0 = fold(a0, map(load_as<Acc>(p + i), pv));
        alignas(64) Acc lanes[W];
        fold(fold(a0, a1), fold(a2, a3)).store(lanes);
        for (int64_t k = 0; k < W; ++k) acc = fold(acc, lanes[k]);
      }
    }
    for (; i < n; ++i) acc = fold(acc, map(static_cast<Acc>(p[i]), prm));
  }

  void columns(Acc* acc, const T* p, int64_t n, int64_t o0) const {
    int64_t j = 0;
    if constexpr (W > 1) {
      for (; j + W <= n; j += W) {
        const V pv = param ? V::load(param + o0 + j) : V(Acc{});
        fold(V::load(acc + j), map(load_as<Acc>(p + j), pv)).store(acc + j);
      }
    }
    for (; j < n; ++j)
      acc[j] = fold(acc[j], map(static_cast<Acc>(p[j]), param ? param[o0 + j] : Acc{}));
  }
};

template <typename T, typename Out, typename Acc, typename Map, typename Fold, typename Finish>
MapFold<T, Acc, Out, Map, Fold, Finish> make_reducer(Acc identity, Map map, Fold fold,
                                                     Finish finish, const Acc* param = nullptr) {
  return {identity, map, fold, finish, param};
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
void arg_reduce(const T* xp, int64_t outer, int64_t n, int64_t inner, T* values,
                int64_t* indices) {
  using A = ArgAcc<T>;
  auto merge = [](const A& a, const A& b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    return arg_better<IsMax>(b.v, a.v) ? b : a;
  };
  const int64_t work = outer * n * inner;
  if (inner == 1) {
    run_units<A>(
        outer, 1, n, work, A{},
        [&](int64_t u, int64_t rb, int64_t re, A* acc) {
          const T* p = xp + u * n;
          int64_t k = rb;
          if (acc[0].i < 0) acc[0] = {p[k], k}, ++k;
          T bv = acc[0].v;
          int64_t bi = acc[0].i;
          if (bv == bv) {
            for (; k < re; ++k) {
              const T v = p[k];
              if (arg_better<IsMax>(v, bv)) {
                bv = v;
                bi = k;
                if (v != v) break;  // NaN wins over everything after it
              }
            }
          }
          acc[0] = {bv, bi};
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
        for (; k < re; ++k) {
          const T* row = p + k * inner;
          for (int64_t j = 0; j < m; ++j)
            if (arg_better<IsMax>(row[j], acc[j].v)) acc[j] = {row[j], k};
        }
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
  parallel_range(units, std::max<int64_t>(1, kParallelGrain / per_unit), [&](int64_t ub,
                                                                              int64_t ue) {
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
  });
}

}  // namespace kiln::kernels
