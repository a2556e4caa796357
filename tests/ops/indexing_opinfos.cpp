// OpInfos for the joining, indexing, scattering, shape-copying and sorting ops
// (include/kiln/ops/indexing.h), with float64 references written as plain loops over Ref.
// An op's non-tensor arguments (dims, sizes, k, ...) travel as a trailing float64 "params"
// tensor in each sample, so that the same sample drives the Kiln call and the reference.
#include <algorithm>
#include <limits>
#include <numeric>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- sample helpers ----
// Non-tensor arguments (dims, alpha, ...) carried as a float64 tensor. Marked as a wrapped
// number so that the gradient checks treat them as constants, not as data to perturb.
Tensor params(std::vector<double> p) {
  Tensor t = tensor(p);
  t.impl()->set_wrapped_number(true);
  return t;
}
Ints ints_of(const Tensor& p) {
  Ints out;
  for (double v : p.to_vector<double>()) out.push_back(static_cast<int64_t>(v));
  return out;
}
Ints ints_of(const Ref& p) {
  Ints out;
  for (double v : p.v) out.push_back(static_cast<int64_t>(v));
  return out;
}
Tensor make(Ints sizes, DType dt, Layout layout = Layout::Contiguous, uint32_t seed = 0,
            double lo = -5, double hi = 5) {
  return make_tensor_for_test(std::move(sizes), dt, lo, hi, layout, seed);
}
// An index tensor with the given values and shape (1-d when sizes is empty).
Tensor ix(Ints values, Ints sizes = {}, DType dt = DType::Int64) {
  return (sizes.empty() ? tensor(values) : tensor(values, sizes)).to(dt);
}
Tensor ix0(int64_t value) { return tensor(Ints{value}, Ints{}); }  // 0-d int64
// The same values stored transposed (a non-contiguous layout of any tensor, e.g. an index).
Tensor transposed(const Tensor& t) {
  Ints perm;
  for (int64_t d = t.dim() - 1; d >= 0; --d) perm.push_back(d);
  return t.permute(perm).contiguous().permute(perm);
}
// Deterministic indices in [0, bound) (bound > 0).
Tensor random_ix(Ints sizes, int64_t bound, uint32_t seed, DType dt = DType::Int64) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  Ints v(static_cast<size_t>(n));
  uint64_t state = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(bound));
  }
  return tensor(v, sizes).to(dt);
}
// Values drawn from a small set, so that sorting meets many ties.
Tensor with_ties(Ints sizes, DType dt, uint32_t seed, Layout layout = Layout::Contiguous) {
  Tensor t = make(sizes, DType::Float64, Layout::Contiguous, seed, -2, 2).to(DType::Float64);
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = dt == DType::Bool ? (x > 0 ? 1 : 0) : std::round(x);
  Tensor r = tensor(v, sizes).to(dt);
  return layout == Layout::Transposed ? transposed(r) : r;
}
std::vector<double> values_of(const Tensor& t) { return t.to_vector<double>(); }

// ---- reference helpers ----
int64_t wrap(int64_t d, int64_t nd) { return d < 0 ? d + std::max<int64_t>(nd, 1) : d; }
Ref make_ref(Ints sizes, DType dt) { return Ref::zeros(std::move(sizes), dt); }
Ref narrow_ref(const Ref& a, int64_t d, int64_t start, int64_t len) {
  Ints sizes = a.sizes;
  sizes[d] = len;
  Ref out = make_ref(sizes, a.dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = out.unravel(i);
    idx[d] += start;
    out.v[i] = a.at(idx);
  }
  return out;
}
Ref select_ref(const Ref& a, int64_t d, int64_t index) {
  Ref piece = narrow_ref(a, d, index, 1);
  piece.sizes.erase(piece.sizes.begin() + d);
  return piece;
}
// Lines of `a` along d, as lists of flat positions (the line's elements in order).
std::vector<Ints> lines_of(const Ref& a, int64_t d) {
  std::vector<Ints> lines;
  if (a.dim() == 0) return {{0}};
  for (int64_t i = 0; i < a.numel(); ++i) {
    Ints idx = a.unravel(i);
    if (idx[d] != 0) continue;
    Ints line;
    for (int64_t k = 0; k < a.sizes[d]; ++k) {
      idx[d] = k;
      line.push_back(a.ravel(idx));
    }
    lines.push_back(line);
  }
  return lines;
}

std::vector<Sample> cat_samples(DType dt) {
  return {
      {"dim 0 [2, 3] + [4, 3]",
       {make({2, 3}, dt, Layout::Contiguous, 1), make({4, 3}, dt), params({0})}},
      {"dim 1 [2, 1] + [2, 3] + [2, 0]",
       {make({2, 1}, dt), make({2, 3}, dt, Layout::Contiguous, 2), make({2, 0}, dt), params({1})}},
      {"dim -1 transposed", {make({3, 4}, dt, Layout::Transposed), make({3, 2}, dt), params({-1})}},
      {"dim 1 strided 3-d",
       {make({2, 3, 4}, dt, Layout::Strided), make({2, 1, 4}, dt, Layout::Transposed),
        params({1})}},
      {"legacy [0] skipped",
       {make({0}, dt), make({2, 3}, dt), make({0}, dt), make({1, 3}, dt), params({0})}},
      {"only [0] tensors", {make({0}, dt), make({0}, dt), params({0})}},
      {"single tensor", {make({3, 2}, dt), params({1})}},
      {"zero-size [0, 3] + [2, 3]", {make({0, 3}, dt), make({2, 3}, dt), params({0})}},
      {"type promotion with int64", {make({2, 2}, dt), make({1, 2}, DType::Int64), params({0})}},
      {"type promotion with float64",
       {make({2, 2}, DType::Float64), make({2, 2}, dt), params({1})}},
      {"large dim 0 (threaded)",
       {make({400, 300}, dt, Layout::Contiguous, 3), make({130, 300}, dt), params({0})}},
      {"large dim 1 (threaded)",
       {make({500, 230}, dt), make({500, 70}, dt, Layout::Contiguous, 4), make({500, 1}, dt),
        params({-1})}},
      {"large non-contiguous (threaded)",
       {make({200, 300}, dt, Layout::Transposed), make({200, 10}, dt), params({1})}},
  };
}
Ref ref_cat(const std::vector<Ref>& ins, int64_t dim) {
  const DType dt = expected_result_type(ins);
  std::vector<const Ref*> kept;
  for (const Ref& r : ins)
    if (!(r.dim() == 1 && r.sizes[0] == 0)) kept.push_back(&r);
  if (kept.empty()) return make_ref({0}, dt);
  const int64_t d = wrap(dim, kept[0]->dim());
  Ints sizes = kept[0]->sizes;
  sizes[d] = 0;
  for (const Ref* r : kept) sizes[d] += r->sizes[d];
  Ref out = make_ref(sizes, dt);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = out.unravel(i);
    for (const Ref* r : kept) {
      if (idx[d] < r->sizes[d]) {
        out.v[i] = cast_to(r->at(idx), dt);
        break;
      }
      idx[d] -= r->sizes[d];
    }
  }
  return out;
}
std::vector<Tensor> without_params(const std::vector<Tensor>& in) {
  return {in.begin(), in.end() - 1};
}

KILN_OPINFO(OpInfo{
    .name = "cat",
    .covers = {"cat"},
    .dtypes = kAllDTypes,
    .samples = cat_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{cat(without_params(in), ints_of(in.back())[0])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_cat({in.begin(), in.end() - 1}, ints_of(in.back())[0])};
        },
    .errors =
        {
            expect_error<ShapeError>("sizes differ off the cat dim", "[2, 3]",
                                     [] {
                                       cat({zeros({2, 3}), zeros({2, 4})}, 0);
                                     }),
            expect_error<ShapeError>("dims differ", "same number of dimensions",
                                     [] {
                                       cat({zeros({2, 3}), zeros({2, 3, 1})}, 0);
                                     }),
            expect_error<ShapeError>("0-d input", "zero-dimensional", [] { cat({zeros({})}, 0); }),
            expect_error<ValueError>("empty list", "non-empty", [] { cat({}, 0); }),
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] {
                                       cat({zeros({2, 3})}, 2);
                                     }),
        },
    .trailing_params = 1,
});

KILN_OPINFO(OpInfo{
    .name = "stack",
    .covers = {"cat"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"dim 0",
           {make({2, 3}, dt, Layout::Contiguous, 1), make({2, 3}, dt, Layout::Contiguous, 2),
            params({0})}},
          {"dim 1 transposed",
           {make({2, 3}, dt, Layout::Transposed), make({2, 3}, dt),
            make({2, 3}, dt, Layout::Contiguous, 5), params({1})}},
          {"dim -1 (new last dim)",
           {make({4, 2}, dt), make({4, 2}, dt, Layout::Strided), params({-1})}},
          {"0-d tensors",
           {make({}, dt, Layout::Contiguous, 1), make({}, dt, Layout::Contiguous, 2), params({0})}},
          {"zero-size", {make({0, 2}, dt), make({0, 2}, dt), params({1})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{stack(without_params(in), ints_of(in.back())[0])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const int64_t n = static_cast<int64_t>(in.size()) - 1;
          const int64_t d = wrap(ints_of(in.back())[0], in[0].dim() + 1);
          Ints sizes = in[0].sizes;
          sizes.insert(sizes.begin() + d, n);
          Ref out = make_ref(sizes, in[0].dtype);
          for (int64_t i = 0; i < out.numel(); ++i) {
            Ints idx = out.unravel(i);
            const int64_t which = idx[d];
            idx.erase(idx.begin() + d);
            out.v[i] = in[which].at(idx);
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<ShapeError>("shapes differ", "[2, 4] at entry 1",
                                     [] {
                                       stack({zeros({2, 3}), zeros({2, 4})}, 0);
                                     }),
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] {
                                       stack({zeros({2, 3})}, 3);
                                     }),
        },
    .trailing_params = 1,
});

// ---- split / chunk / unbind (views) ----
std::vector<Sample> split_samples(DType dt) {
  return {
      {"[7, 4] by 3 on dim 0", {make({7, 4}, dt), params({3, 0})}},
      {"[3, 8] by 4 on dim -1 (exact)", {make({3, 8}, dt, Layout::Transposed), params({4, -1})}},
      {"[2, 5, 3] by 2 on dim 1 strided", {make({2, 5, 3}, dt, Layout::Strided), params({2, 1})}},
      {"size larger than the dim", {make({3, 2}, dt), params({10, 0})}},
      {"empty dim by 0", {make({2, 0}, dt), params({0, 1})}},
      {"empty dim by 3", {make({0, 4}, dt), params({3, 0})}},
  };
}
std::vector<Ref> ref_split(const Ref& x, int64_t size, int64_t dim) {
  const int64_t d = wrap(dim, x.dim()), n = x.sizes[d];
  std::vector<Ref> out;
  if (size == 0 || n == 0) return {x};
  for (int64_t start = 0; start < n; start += size)
    out.push_back(narrow_ref(x, d, start, std::min(size, n - start)));
  return out;
}
KILN_OPINFO(OpInfo{
    .name = "split",
    .covers = {"slice"},
    .dtypes = kAllDTypes,
    .samples = split_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          return split(in[0], p[0], p[1]);
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          return ref_split(in[0], p[0], p[1]);
        },
    .errors =
        {
            expect_error<ShapeError>("0-d", "at least a 1-dimensional",
                                     [] { split(zeros({}), 1); }),
            expect_error<ValueError>("negative size", "non-negative",
                                     [] { split(zeros({3}), -1); }),
            expect_error<ValueError>("size 0 on a non-empty dim", "can only be 0",
                                     [] { split(zeros({3}), 0); }),
        },
    .trailing_params = 1,
});

KILN_OPINFO(OpInfo{
    .name = "split_sizes",
    .covers = {"slice"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[6, 2] into 1, 3, 2", {make({6, 2}, dt), params({0, 1, 3, 2})}},
          {"transposed [3, 5] into 0, 5, 0 on dim -1",
           {make({3, 5}, dt, Layout::Transposed), params({-1, 0, 5, 0})}},
          {"single piece", {make({4}, dt), params({0, 4})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          return split(in[0], Ints(p.begin() + 1, p.end()), p[0]);
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          const int64_t d = wrap(p[0], in[0].dim());
          std::vector<Ref> out;
          int64_t start = 0;
          for (size_t i = 1; i < p.size(); ++i) {
            out.push_back(narrow_ref(in[0], d, start, p[i]));
            start += p[i];
          }
          return out;
        },
    .errors =
        {
            expect_error<ShapeError>("sizes don't sum to the dim", "must sum exactly to 5",
                                     [] {
                                       split(zeros({5, 2}), Ints{2, 2}, 0);
                                     }),
            expect_error<ValueError>("negative size", "non-negative",
                                     [] {
                                       split(zeros({2}), Ints{3, -1}, 0);
                                     }),
        },
    .trailing_params = 1,
});

KILN_OPINFO(OpInfo{
    .name = "chunk",
    .covers = {"slice"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[7, 3] into 3", {make({7, 3}, dt), params({3, 0})}},
          {"[4, 6] into 3 on dim -1 transposed",
           {make({4, 6}, dt, Layout::Transposed), params({3, -1})}},
          {"more chunks than elements", {make({2, 3}, dt), params({5, 0})}},
          {"empty dim into 3", {make({2, 0}, dt), params({3, 1})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          return chunk(in[0], p[0], p[1]);
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          const Ref& x = in[0];
          const int64_t d = wrap(p[1], x.dim()), n = x.sizes[d];
          if (n == 0) return std::vector<Ref>(static_cast<size_t>(p[0]), x);
          return ref_split(x, (n + p[0] - 1) / p[0], d);
        },
    .errors =
        {
            expect_error<ValueError>("zero chunks", "greater than 0", [] { chunk(zeros({3}), 0); }),
            expect_error<ShapeError>("0-d", "at least a 1-dimensional",
                                     [] { chunk(zeros({}), 2); }),
        },
    .trailing_params = 1,
});

KILN_OPINFO(OpInfo{
    .name = "unbind",
    .covers = {"select"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[3, 4] dim 0", {make({3, 4}, dt), params({0})}},
          {"transposed [3, 4] dim -1", {make({3, 4}, dt, Layout::Transposed), params({-1})}},
          {"strided [2, 3, 2] dim 1", {make({2, 3, 2}, dt, Layout::Strided), params({1})}},
          {"[0, 3] dim 0 (no pieces)", {make({0, 3}, dt), params({0})}},
          {"[2, 0] dim 0", {make({2, 0}, dt), params({0})}},
      };
    },
    .fn = [](const std::vector<Tensor>& in) { return unbind(in[0], ints_of(in[1])[0]); },
    .ref =
        [](const std::vector<Ref>& in) {
          const int64_t d = wrap(ints_of(in[1])[0], in[0].dim());
          std::vector<Ref> out;
          for (int64_t i = 0; i < in[0].sizes[d]; ++i) out.push_back(select_ref(in[0], d, i));
          return out;
        },
    .errors =
        {
            expect_error<IndexError>("0-d", "0-d", [] { unbind(zeros({})); }),
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] { unbind(zeros({2}), 1); }),
        },
    .trailing_params = 1,
});

// ---- index_select / embedding ----
KILN_OPINFO(OpInfo{
    .name = "index_select",
    .covers = {"index_select"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"dim 0 with repeats", {make({5, 4}, dt), ix({4, 0, 0, 2}), params({0})}},
          {"dim 1 int32 index", {make({3, 6}, dt), ix({5, 1}, {}, DType::Int32), params({1})}},
          {"dim -1 transposed",
           {make({4, 5}, dt, Layout::Transposed), ix({3, 3, 0, 4, 1, 2}), params({-1})}},
          {"strided 3-d dim 1", {make({2, 4, 3}, dt, Layout::Strided), ix({3, 1}), params({1})}},
          {"non-contiguous index",
           {make({6, 2}, dt), ix({5, 9, 0, 9, 2, 9}).slice(0, 0, std::nullopt, 2), params({0})}},
          {"0-d index", {make({4, 3}, dt), ix0(2), params({0})}},
          {"0-d input", {make({}, dt), ix({0}), params({0})}},
          {"empty index", {make({4, 3}, dt), ix({}), params({1})}},
          {"zero-size input", {make({0, 3}, dt), ix({2, 0}), params({1})}},
          {"large rows (threaded)",
           {make({400, 128}, dt, Layout::Contiguous, 3), random_ix({1000}, 400, 1), params({0})}},
          {"large columns (threaded)",
           {make({256, 300}, dt), random_ix({400}, 300, 2, DType::Int32), params({1})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{index_select(in[0], ints_of(in[2])[0], in[1])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref &x = in[0], &index = in[1];
          const int64_t d = wrap(ints_of(in[2])[0], x.dim());
          if (x.dim() == 0) return std::vector<Ref>{x};
          Ints sizes = x.sizes;
          sizes[d] = index.numel();
          Ref out = make_ref(sizes, x.dtype);
          for (int64_t i = 0; i < out.numel(); ++i) {
            Ints idx = out.unravel(i);
            idx[d] = static_cast<int64_t>(index.v[idx[d]]);
            out.v[i] = x.at(idx);
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<IndexError>("index out of range",
                                     "index 3 is out of bounds for dimension 0 with size 3",
                                     [] {
                                       index_select(zeros({3, 2}), 0, ix({0, 3}));
                                     }),
            expect_error<IndexError>("negative index", "index -1 is out of bounds",
                                     [] {
                                       index_select(zeros({3, 2}), 1, ix({-1}));
                                     }),
            expect_error<DTypeError>("float index", "int64 or int32",
                                     [] {
                                       index_select(zeros({3, 2}), 0, zeros({1}));
                                     }),
            expect_error<ShapeError>("2-d index", "1-d",
                                     [] {
                                       index_select(zeros({3, 2}), 0, ix({0, 1}, {1, 2}));
                                     }),
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] {
                                       index_select(zeros({3, 2}), 2, ix({0}));
                                     }),
        },
});

KILN_OPINFO(OpInfo{
    .name = "embedding",
    .covers = {"embedding"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[2, 3] indices", {make({6, 4}, dt), ix({5, 0, 2, 2, 1, 5}, {2, 3})}},
          {"0-d index", {make({6, 4}, dt), ix0(3)}},
          {"empty indices", {make({6, 4}, dt), ix({}, {0, 2})}},
          {"int32 transposed indices, transposed weight",
           {make({5, 3}, dt, Layout::Transposed),
            transposed(ix({4, 0, 1, 3, 3, 2}, {2, 3}, DType::Int32))}},
          {"large (threaded)",
           {make({1000, 64}, dt, Layout::Contiguous, 5), random_ix({32, 50}, 1000, 3)}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{embedding(in[0], in[1])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref &w = in[0], &index = in[1];
          Ints sizes = index.sizes;
          sizes.push_back(w.sizes[1]);
          Ref out = make_ref(sizes, w.dtype);
          for (int64_t i = 0; i < index.numel(); ++i)
            for (int64_t j = 0; j < w.sizes[1]; ++j)
              out.v[i * w.sizes[1] + j] = w.at({static_cast<int64_t>(index.v[i]), j});
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<IndexError>(
                "index out of range",
                "embedding: index 6 is out of bounds for dimension 0 with size 6",
                [] {
                  embedding(zeros({6, 2}), ix({1, 6}, {2, 1}));
                }),
            expect_error<ShapeError>("1-d weight", "2-d", [] { embedding(zeros({6}), ix({1})); }),
            expect_error<DTypeError>("float indices", "int64",
                                     [] {
                                       embedding(zeros({6, 2}), zeros({2}));
                                     }),
        },
});

// ---- gather / scatter / scatter_add / index_add ----
// out[p] = x[p with dim replaced by index[p]].
Ref ref_gather(const Ref& x, const Ref& index, int64_t dim) {
  const int64_t d = wrap(dim, x.dim());
  Ref out = make_ref(index.sizes, x.dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Ints idx = index.unravel(i);
    if (!idx.empty()) idx[d] = static_cast<int64_t>(index.v[i]);
    out.v[i] = x.at(idx);
  }
  return out;
}
// x with src[p] written (or added) at p with dim replaced by index[p], in row-major order.
Ref ref_scatter(const Ref& x, const Ref& index, const Ref& src, int64_t dim, bool add) {
  const int64_t d = wrap(dim, x.dim());
  Ref out = x;
  for (int64_t i = 0; i < index.numel(); ++i) {
    Ints p = index.unravel(i);
    Ints q = p;
    if (!q.empty()) q[d] = static_cast<int64_t>(index.v[i]);
    double& dst = out.v[out.ravel(q)];
    dst = add ? cast_to(dst + src.at(p), x.dtype) : src.at(p);
  }
  return out;
}
std::vector<Sample> gather_samples(DType dt) {
  return {
      {"[3, 4] dim 0", {make({3, 4}, dt), ix({2, 0, 1, 1, 0, 0, 2, 1}, {2, 4}), params({0})}},
      {"[3, 4] dim -1, narrower index", {make({3, 4}, dt), ix({3, 3, 0, 1}, {2, 2}), params({-1})}},
      {"index longer than the dim",
       {make({2, 2}, dt), ix({1, 0, 1, 1, 1, 0}, {2, 3}), params({1})}},
      {"transposed input and index",
       {make({4, 5}, dt, Layout::Transposed), transposed(random_ix({4, 3}, 4, 2)), params({0})}},
      {"strided 3-d dim 1",
       {make({2, 3, 4}, dt, Layout::Strided), random_ix({2, 5, 3}, 3, 4), params({1})}},
      {"0-d", {make({}, dt), ix0(0), params({0})}},
      {"empty index", {make({3, 4}, dt), ix({}, {0, 4}), params({0})}},
      {"large (threaded)",
       {make({300, 200}, dt, Layout::Contiguous, 5), random_ix({300, 200}, 200, 6), params({1})}},
      // one position per line (a loss's target): the gradient is a one-hot (gather_backward's
      // decomposition under inductor)
      {"one per row", {make({4, 6}, dt), ix({5, 0, 2, 2}, {4, 1}), params({1})}},
      {"one per column, dim 0", {make({3, 5}, dt), ix({2, 0, 1, 1, 0}, {1, 5}), params({0})}},
  };
}
KILN_OPINFO(OpInfo{
    .name = "gather",
    .covers = {"gather"},
    .dtypes = kAllDTypes,
    .samples = gather_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{gather(in[0], ints_of(in[2])[0], in[1])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_gather(in[0], in[1], ints_of(in[2])[0])};
        },
    .errors =
        {
            expect_error<IndexError>("index out of range",
                                     "gather: index 4 is out of bounds for dimension 1 with size 4",
                                     [] {
                                       gather(zeros({2, 4}), 1, ix({0, 4}, {1, 2}));
                                     }),
            expect_error<IndexError>("negative index", "index -1",
                                     [] {
                                       gather(zeros({2, 4}), 0, ix({-1}, {1, 1}));
                                     }),
            expect_error<DTypeError>("int32 index", "int64",
                                     [] {
                                       gather(zeros({2, 4}), 0, ix({0}, {1, 1}, DType::Int32));
                                     }),
            expect_error<ShapeError>("index dims differ", "as many dims",
                                     [] {
                                       gather(zeros({2, 4}), 0, ix({0}));
                                     }),
            expect_error<ShapeError>("index too large off dim", "no larger than the input",
                                     [] {
                                       gather(zeros({2, 4}), 1, ix({0, 0, 0}, {3, 1}));
                                     }),
        },
    .second_order = true,
});

// gather's gradient on its own: [grad, index, params(dim, input sizes...)]. Where index picks
// one position per line (and matches the input elsewhere) it is a one-hot, and its
// decomposition (where(arange == index, grad, 0)) must give the kernel's bits.
Tensor call_gather_backward(const std::vector<Tensor>& in) {
  const Ints p = ints_of(in[2]);
  const int64_t dim = p[0];
  const Ints sizes(p.begin() + 1, p.end());
  const Tensor& index = in[1];
  const int64_t d = dim < 0 ? dim + static_cast<int64_t>(sizes.size()) : dim;
  bool one_per_line = index.dim() == static_cast<int64_t>(sizes.size());
  for (int64_t k = 0; one_per_line && k < index.dim(); ++k)
    one_per_line = index.size(k) == (k == d ? 1 : sizes[static_cast<size_t>(k)]);
  std::array<Tensor, kMaxOpOutputs> outs;
  const Tensor args[] = {in[0], index};
  dispatch(*find_op("gather_backward"), args, {dim, Ints(sizes), one_per_line}, outs);
  return outs[0];
}
KILN_OPINFO(OpInfo{
    .name = "gather_backward",
    .covers = {"gather_backward"},
    .dtypes = kFloatDTypes,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{
              {"one per row", {make({4, 1}, dt), ix({5, 0, 2, 2}, {4, 1}), params({1, 4, 6})}},
              {"one per column, dim 0",
               {make({1, 5}, dt), ix({2, 0, 1, 1, 0}, {1, 5}), params({0, 3, 5})}},
              {"duplicates along dim 1",
               {make({2, 4}, dt), ix({0, 0, 0, 0, 2, 2, 1, 2}, {2, 4}), params({1, 2, 3})}},
              {"one per row of fewer rows",
               {make({2, 1}, dt), ix({3, 1}, {2, 1}), params({-1, 3, 4})}},
              {"large one per row (threaded)",
               {make({400, 1}, dt), random_ix({400, 1}, 300, 3), params({1, 400, 300})}},
          };
        },
    .fn =
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{call_gather_backward(in)}; },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ints p = ints_of(in[2]);
          const Ints sizes(p.begin() + 1, p.end());
          const Ref zero = make_ref(sizes, in[0].dtype);
          return std::vector<Ref>{ref_scatter(zero, in[1], in[0], p[0], /*add=*/true)};
        },
    .errors = {expect_error<IndexError>(
        "index out of range", "out of bounds",
        [] {
          call_gather_backward({ones({2, 1}), ix({0, 4}, {2, 1}), params({1, 2, 4})});
        })},
    .second_order = true,
});

std::vector<Sample> scatter_samples(DType dt, bool duplicates) {
  // Without duplicates every (line, position) is written once; with them, later writes win
  // (scatter) or accumulate (scatter_add).
  Tensor dup = ix({1, 1, 0, 1, 2, 2, 2, 0}, {2, 4});
  Tensor perm = ix({2, 0, 1, 1, 2, 0, 0, 1}, {2, 4});
  return {
      {"dim 0",
       {make({3, 4}, dt), duplicates ? dup : perm, make({2, 4}, dt, Layout::Contiguous, 7),
        params({0})}},
      {"dim -1, src larger than index",
       {make({3, 4}, dt), ix({3, 0, 2, 1}, {2, 2}), make({3, 3}, dt, Layout::Transposed),
        params({-1})}},
      {"duplicates along dim 1",
       {make({2, 3}, dt), ix({0, 0, 0, 0, 2, 2, 1, 2}, {2, 4}),
        make({2, 4}, dt, Layout::Contiguous, 3), params({1})}},
      {"transposed x, index and src",
       {make({4, 5}, dt, Layout::Transposed),
        transposed(duplicates
                       ? random_ix({4, 5}, 4, 8)
                       : ix({3, 2, 1, 0, 0, 3, 2, 1, 1, 0, 3, 2, 2, 1, 0, 3, 0, 3, 2, 1}, {4, 5})),
        make({4, 5}, dt, Layout::Transposed, 2), params({0})}},
      {"strided 3-d dim 1",
       {make({2, 3, 4}, dt, Layout::Strided), ix({2, 0, 1, 1}, {1, 2, 2}),
        make({2, 2, 3}, dt, Layout::Strided, 4), params({1})}},
      {"0-d", {make({}, dt), ix0(0), make({}, dt, Layout::Contiguous, 9), params({0})}},
      {"empty index", {make({3, 4}, dt), ix({}, {0, 4}), make({2, 4}, dt), params({0})}},
      {"large (threaded)",
       {make({200, 300}, dt, Layout::Contiguous, 5), random_ix({200, 300}, 300, 6),
        make({200, 300}, dt, Layout::Contiguous, 7), params({1})}},
  };
}
KILN_OPINFO(OpInfo{
    .name = "scatter",
    .covers = {"scatter"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) { return scatter_samples(dt, false); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scatter(in[0], ints_of(in[3])[0], in[1], in[2])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_scatter(in[0], in[1], in[2], ints_of(in[3])[0], false)};
        },
    .errors =
        {
            expect_error<IndexError>(
                "index out of range",
                "scatter: index 3 is out of bounds for dimension 0 with size 3",
                [] {
                  scatter(zeros({3, 2}), 0, ix({3, 0}, {1, 2}), zeros({1, 2}));
                }),
            expect_error<DTypeError>(
                "src dtype differs", "same dtype",
                [] {
                  scatter(zeros({3, 2}), 0, ix({0}, {1, 1}), zeros({1, 1}, DType::Float64));
                }),
            expect_error<ShapeError>("index larger than src", "no larger than src",
                                     [] {
                                       scatter(zeros({3, 2}), 0, ix({0, 1}, {2, 1}), zeros({1, 1}));
                                     }),
            expect_error<DTypeError>(
                "int32 index", "int64",
                [] {
                  scatter(zeros({3, 2}), 0, ix({0}, {1, 1}, DType::Int32), zeros({1, 1}));
                }),
        },
});

KILN_OPINFO(OpInfo{
    .name = "scatter_value",
    .covers = {"scatter"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"dim 0", {make({3, 4}, dt), ix({2, 0, 1, 1, 0, 0, 2, 1}, {2, 4}), params({0, 1})}},
          {"dim -1 transposed",
           {make({4, 3}, dt, Layout::Transposed), ix({2, 0, 1, 1}, {4, 1}), params({-1, 3})}},
          {"0-d", {make({}, dt), ix0(0), params({0, 1})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[2]);
          return std::vector<Tensor>{scatter(in[0], p[0], in[1], Scalar(p[1]))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[2]);
          Ref src = Ref::zeros(in[1].sizes, in[0].dtype);
          for (double& v : src.v) v = cast_to(static_cast<double>(p[1]), in[0].dtype);
          return std::vector<Ref>{ref_scatter(in[0], in[1], src, p[0], false)};
        },
    .errors =
        {
            expect_error<IndexError>("index out of range", "index -2 is out of bounds",
                                     [] {
                                       scatter(zeros({3, 2}), 1, ix({-2}, {1, 1}), Scalar(1.0));
                                     }),
        },
});

KILN_OPINFO(OpInfo{
    .name = "scatter_add",
    .covers = {"scatter_add"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) { return scatter_samples(dt, true); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scatter_add(in[0], ints_of(in[3])[0], in[1], in[2])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_scatter(in[0], in[1], in[2], ints_of(in[3])[0], true)};
        },
    .errors =
        {
            expect_error<IndexError>(
                "index out of range",
                "scatter_add: index 2 is out of bounds for dimension 1 with size 2",
                [] {
                  scatter_add(zeros({3, 2}), 1, ix({2}, {1, 1}), zeros({1, 1}));
                }),
            expect_error<ShapeError>("index dims differ", "as many dims",
                                     [] {
                                       scatter_add(zeros({3, 2}), 1, ix({0}), zeros({1}));
                                     }),
        },
});

// Copies of x in a transposed layout, for the in-place forms.
Tensor transposed_copy(const Tensor& x) { return x.dim() < 2 ? x.clone() : transposed(x); }

KILN_OPINFO(OpInfo{
    .name = "scatter_inplace",
    .covers = {"scatter"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) { return scatter_samples(dt, false); },
    .fn =
        [](const std::vector<Tensor>& in) {
          Tensor self = transposed_copy(in[0]);
          Tensor& r = scatter_(self, ints_of(in[3])[0], in[1], in[2]);
          EXPECT_TRUE(r.is_same(self));
          return std::vector<Tensor>{self};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_scatter(in[0], in[1], in[2], ints_of(in[3])[0], false)};
        },
    .errors =
        {
            expect_error<IndexError>("index out of range", "index 5",
                                     [] {
                                       Tensor self = zeros({3, 2});
                                       scatter_(self, 0, ix({5}, {1, 1}), ones({1, 1}));
                                     }),
        },
});

KILN_OPINFO(OpInfo{
    .name = "scatter_add_inplace",
    .covers = {"scatter_add"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) { return scatter_samples(dt, true); },
    .fn =
        [](const std::vector<Tensor>& in) {
          Tensor self = transposed_copy(in[0]);
          scatter_add_(self, ints_of(in[3])[0], in[1], in[2]);
          return std::vector<Tensor>{self};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_scatter(in[0], in[1], in[2], ints_of(in[3])[0], true)};
        },
    .errors =
        {
            expect_error<IndexError>("index out of range", "index 3",
                                     [] {
                                       Tensor self = zeros({3, 2});
                                       scatter_add_(self, 0, ix({3}, {1, 1}), ones({1, 1}));
                                     }),
        },
});

std::vector<Sample> index_add_samples(DType dt) {
  const double alpha = dt == DType::Bool ? 1 : is_floating(dt) ? 2.5 : 3;
  return {
      {"dim 0 with duplicates",
       {make({4, 3}, dt), ix({1, 3, 1, 1, 0}), make({5, 3}, dt, Layout::Contiguous, 2),
        params({0, 1})}},
      {"dim 1 int32 index, alpha",
       {make({2, 5}, dt), ix({4, 4, 0}, {}, DType::Int32), make({2, 3}, dt, Layout::Contiguous, 3),
        params({1, alpha})}},
      {"dim -1 transposed",
       {make({3, 4}, dt, Layout::Transposed), ix({2, 0, 2, 3, 2}),
        make({3, 5}, dt, Layout::Transposed, 4), params({-1, 1})}},
      {"strided 3-d dim 1",
       {make({2, 3, 4}, dt, Layout::Strided), ix({2, 2}), make({2, 2, 4}, dt, Layout::Strided, 5),
        params({1, alpha})}},
      {"0-d", {make({}, dt), ix({0}), make({}, dt, Layout::Contiguous, 6), params({0, 1})}},
      {"empty index", {make({3, 2}, dt), ix({}), make({0, 2}, dt), params({0, 1})}},
      {"large rows (threaded)",
       {make({300, 256}, dt, Layout::Contiguous, 7), random_ix({500}, 300, 8),
        make({500, 256}, dt, Layout::Contiguous, 9), params({0, 1})}},
      {"large inner dim (threaded)",
       {make({4, 40000}, dt), ix({3, 0, 3}), make({3, 40000}, dt, Layout::Contiguous, 10),
        params({0, alpha})}},
  };
}
Ref ref_index_add(const Ref& x, const Ref& index, const Ref& src, int64_t dim, double alpha) {
  const int64_t d = wrap(dim, x.dim());
  Ref out = x;
  for (int64_t i = 0; i < src.numel(); ++i) {
    Ints p = src.unravel(i);
    Ints q = p;
    if (!q.empty()) q[d] = static_cast<int64_t>(index.v[p[d]]);
    double& dst = out.v[out.ravel(q)];
    dst = cast_to(dst + alpha * src.v[i], x.dtype);
  }
  return out;
}
Scalar alpha_for(const Tensor& x, double a) {
  return is_floating(x.dtype()) ? Scalar(a) : Scalar(static_cast<int64_t>(a));
}
KILN_OPINFO(OpInfo{
    .name = "index_add",
    .covers = {"index_add"},
    .dtypes = kAllDTypes,
    .samples = index_add_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          std::vector<double> p = values_of(in[3]);
          return std::vector<Tensor>{
              index_add(in[0], static_cast<int64_t>(p[0]), in[1], in[2], alpha_for(in[0], p[1]))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{
              ref_index_add(in[0], in[1], in[2], static_cast<int64_t>(in[3].v[0]), in[3].v[1])};
        },
    .errors =
        {
            expect_error<IndexError>(
                "index out of range",
                "index_add: index 4 is out of bounds for dimension 0 with size 4",
                [] {
                  index_add(zeros({4, 2}), 0, ix({0, 4}), ones({2, 2}));
                }),
            expect_error<ShapeError>("source size differs from the index count",
                                     "number of indices (2)",
                                     [] {
                                       index_add(zeros({4, 2}), 0, ix({0, 1}), ones({3, 2}));
                                     }),
            expect_error<DTypeError>("float alpha for ints", "alpha",
                                     [] {
                                       index_add(zeros({4}, DType::Int64), 0, ix({0}),
                                                 ones({1}, DType::Int64), 0.5);
                                     }),
            expect_error<DTypeError>("float index", "int64 or int32",
                                     [] { index_add(zeros({4}), 0, zeros({1}), ones({1})); }),
            expect_error<DTypeError>("source dtype differs", "same dtype",
                                     [] {
                                       index_add(zeros({4}), 0, ix({0}), ones({1}, DType::Float64));
                                     }),
        },
});

KILN_OPINFO(OpInfo{
    .name = "index_add_inplace",
    .covers = {"index_add"},
    .dtypes = kAllDTypes,
    .samples = index_add_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          std::vector<double> p = values_of(in[3]);
          Tensor self = transposed_copy(in[0]);
          Tensor& r =
              index_add_(self, static_cast<int64_t>(p[0]), in[1], in[2], alpha_for(in[0], p[1]));
          EXPECT_TRUE(r.is_same(self));
          return std::vector<Tensor>{self};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{
              ref_index_add(in[0], in[1], in[2], static_cast<int64_t>(in[3].v[0]), in[3].v[1])};
        },
    .errors =
        {
            expect_error<IndexError>("index out of range", "index -1",
                                     [] {
                                       Tensor self = zeros({4, 2});
                                       index_add_(self, 0, ix({-1}), ones({1, 2}));
                                     }),
        },
});

// ---- masked_select / nonzero ----
KILN_OPINFO(OpInfo{
    .name = "masked_select",
    .covers = {"masked_select"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"same shape", {make({4, 5}, dt), make({4, 5}, DType::Bool, Layout::Contiguous, 1)}},
          {"mask broadcast [5]", {make({3, 5}, dt), make({5}, DType::Bool, Layout::Contiguous, 2)}},
          {"input broadcast [1, 4]",
           {make({1, 4}, dt), make({3, 4}, DType::Bool, Layout::Contiguous, 3)}},
          {"transposed input, strided mask",
           {make({4, 6}, dt, Layout::Transposed), make({4, 6}, DType::Bool, Layout::Strided, 4)}},
          {"0-d input and mask", {make({}, dt), full({}, true, DType::Bool)}},
          {"all false", {make({3, 2}, dt), zeros({3, 2}, DType::Bool)}},
          {"empty", {make({0, 3}, dt), make({3}, DType::Bool)}},
          {"large",
           {make({300, 200}, dt, Layout::Contiguous, 5),
            make({300, 200}, DType::Bool, Layout::Contiguous, 6)}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{masked_select(in[0], in[1])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ref shape = zip(in, in[0].dtype,
                          [](const std::vector<double>& v) { return v[1] != 0 ? 1.0 : 0.0; });
          Ref vals = zip(in, in[0].dtype, [](const std::vector<double>& v) { return v[0]; });
          Ref out = make_ref({0}, in[0].dtype);
          for (int64_t i = 0; i < shape.numel(); ++i)
            if (shape.v[i] != 0) out.v.push_back(vals.v[i]);
          out.sizes = {static_cast<int64_t>(out.v.size())};
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<DTypeError>("non-bool mask", "bool",
                                     [] { masked_select(zeros({2}), ones({2})); }),
            expect_error<ShapeError>("shapes don't broadcast", "cannot be broadcast",
                                     [] {
                                       masked_select(zeros({2, 3}), ones({2}, DType::Bool));
                                     }),
        },
});

KILN_OPINFO(OpInfo{
    .name = "nonzero",
    .covers = {"nonzero"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"2-d with zeros", {with_ties({4, 5}, dt, 0)}},
          {"1-d", {with_ties({9}, dt, 1)}},
          {"transposed 3-d", {with_ties({3, 2, 4}, dt, 2, Layout::Transposed)}},
          {"strided", {make({3, 4}, dt, Layout::Strided, 3, -1.4, 1.4)}},
          {"0-d nonzero", {full({}, 1, dt)}},
          {"0-d zero", {zeros({}, dt)}},
          {"empty", {make({2, 0}, dt)}},
          {"all zero", {zeros({3, 3}, dt)}},
      };
    },
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{nonzero(in[0])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          Ref out = make_ref({0, x.dim()}, DType::Int64);
          for (int64_t i = 0; i < x.numel(); ++i) {
            if (x.v[i] == 0) continue;
            for (int64_t c : x.unravel(i)) out.v.push_back(static_cast<double>(c));
            ++out.sizes[0];
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<Error>("no in-place form", "no in-place",
                                [] {
                                  Tensor out = zeros({1, 1}, DType::Int64);
                                  std::array<Tensor, kMaxOpOutputs> outs{out};
                                  const Tensor in[] = {ones({1})};
                                  dispatch(*find_op("nonzero"), in, {}, outs);
                                }),
        },
});

// ---- one_hot ----
KILN_OPINFO(OpInfo{
    .name = "one_hot",
    .covers = {"one_hot"},
    .dtypes = {DType::Int64},
    .samples = [](DType) -> std::vector<Sample> {
      return {
          {"[5] with 4 classes", {ix({0, 3, 1, 1, 2}), params({4})}},
          {"inferred classes", {ix({0, 3, 1, 6, 2}), params({-1})}},
          {"transposed 2-d", {transposed(ix({0, 2, 1, 1, 2, 0}, {2, 3})), params({3})}},
          {"0-d", {ix0(2), params({5})}},
          {"empty with 3 classes", {ix({}), params({3})}},
          {"large", {random_ix({5000}, 20, 3), params({20})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{one_hot(in[0], ints_of(in[1])[0])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          int64_t c = ints_of(in[1])[0];
          if (c < 0)
            for (double v : x.v) c = std::max(c, static_cast<int64_t>(v) + 1);
          Ints sizes = x.sizes;
          sizes.push_back(c);
          Ref out = make_ref(sizes, DType::Int64);
          for (int64_t i = 0; i < x.numel(); ++i) out.v[i * c + static_cast<int64_t>(x.v[i])] = 1;
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<IndexError>("class too large", "smaller than num_classes (3), got 3",
                                     [] {
                                       one_hot(ix({0, 3}), 3);
                                     }),
            expect_error<IndexError>("negative class", "non-negative, got -1",
                                     [] {
                                       one_hot(ix({0, -1}), 3);
                                     }),
            expect_error<IndexError>("negative class, inferred", "non-negative",
                                     [] {
                                       one_hot(ix({-2, -1}));
                                     }),
            expect_error<DTypeError>("int32 indices", "int64",
                                     [] { one_hot(ix({0}, {}, DType::Int32), 2); }),
            expect_error<ValueError>("empty, inferred", "empty", [] { one_hot(ix({})); }),
            expect_error<ValueError>("num_classes < -1", "non-negative",
                                     [] { one_hot(ix({0}), -3); }),
        },
});

// ---- tril / triu ----
std::vector<Sample> triangle_samples(DType dt) {
  return {
      {"[4, 5]", {make({4, 5}, dt), params({0})}},
      {"[5, 3] diagonal 1", {make({5, 3}, dt), params({1})}},
      {"[4, 6] diagonal -2 transposed", {make({4, 6}, dt, Layout::Transposed), params({-2})}},
      {"batched strided [2, 3, 4] diagonal 2", {make({2, 3, 4}, dt, Layout::Strided), params({2})}},
      {"huge diagonal", {make({3, 3}, dt), params({1e15})}},
      {"huge negative diagonal", {make({3, 3}, dt), params({-1e15})}},
      {"zero-size", {make({0, 3}, dt), params({0})}},
      {"large (threaded)", {make({4, 200, 300}, dt, Layout::Contiguous, 3), params({-7})}},
  };
}
Ref ref_triangle(const Ref& x, int64_t diagonal, bool lower) {
  Ref out = x;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Ints idx = x.unravel(i);
    const int64_t r = idx[x.dim() - 2], c = idx[x.dim() - 1];
    const bool keep = lower ? c - r <= diagonal : c - r >= diagonal;
    if (!keep) out.v[i] = 0;
  }
  return out;
}
KILN_OPINFO(OpInfo{
    .name = "tril",
    .covers = {"tril"},
    .dtypes = kAllDTypes,
    .samples = triangle_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{tril(in[0], ints_of(in[1])[0])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_triangle(in[0], ints_of(in[1])[0], true)};
        },
    .errors = {expect_error<ShapeError>("1-d", "at least 2 dimensions", [] { tril(zeros({3})); })},
    .trailing_params = 1,
});
KILN_OPINFO(OpInfo{
    .name = "triu",
    .covers = {"triu"},
    .dtypes = kAllDTypes,
    .samples = triangle_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{triu(in[0], ints_of(in[1])[0])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_triangle(in[0], ints_of(in[1])[0], false)};
        },
    .errors = {expect_error<ShapeError>("0-d", "at least 2 dimensions", [] { triu(zeros({})); })},
    .trailing_params = 1,
});

// ---- repeat / flip / roll / pad ----
KILN_OPINFO(OpInfo{
    .name = "repeat",
    .covers = {"repeat"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[2, 3] x (2, 2)", {make({2, 3}, dt), params({2, 2})}},
          {"[3] x (2, 1, 2) (new leading dims)", {make({3}, dt), params({2, 1, 2})}},
          {"transposed [3, 2] x (1, 3)", {make({3, 2}, dt, Layout::Transposed), params({1, 3})}},
          {"strided [2, 2, 3] x (2, 1, 2)",
           {make({2, 2, 3}, dt, Layout::Strided), params({2, 1, 2})}},
          {"0-d x (3)", {make({}, dt), params({3})}},
          {"0-d x ()", {make({}, dt), params({})}},
          {"zero repeats", {make({2, 3}, dt), params({0, 2})}},
          {"large (threaded)", {make({100, 50}, dt), params({3, 2, 4})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{repeat(in[0], ints_of(in[1]))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          Ints reps = ints_of(in[1]);
          const int64_t lead = static_cast<int64_t>(reps.size()) - x.dim();
          Ints sizes;
          for (int64_t d = 0; d < static_cast<int64_t>(reps.size()); ++d)
            sizes.push_back(reps[d] * (d < lead ? 1 : x.sizes[d - lead]));
          Ref out = make_ref(sizes, x.dtype);
          for (int64_t i = 0; i < out.numel(); ++i) {
            Ints idx = out.unravel(i), src;
            for (int64_t d = lead; d < static_cast<int64_t>(idx.size()); ++d)
              src.push_back(idx[d] % x.sizes[d - lead]);
            out.v[i] = x.at(src);
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<ShapeError>("fewer repeats than dims", "cannot be smaller",
                                     [] {
                                       repeat(zeros({2, 3}), {2});
                                     }),
            expect_error<ValueError>("negative repeat", "non-negative",
                                     [] { repeat(zeros({2}), {-1}); }),
        },
    .trailing_params = 1,
});

KILN_OPINFO(OpInfo{
    .name = "flip",
    .covers = {"flip"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[4, 5] dim 0", {make({4, 5}, dt), params({0})}},
          {"[4, 5] dims (0, 1)", {make({4, 5}, dt), params({0, 1})}},
          {"transposed [3, 6] dim -1", {make({3, 6}, dt, Layout::Transposed), params({-1})}},
          {"strided [2, 3, 4] dims (2, 0)", {make({2, 3, 4}, dt, Layout::Strided), params({2, 0})}},
          {"no dims", {make({2, 3}, dt), params({})}},
          {"0-d", {make({}, dt), params({0})}},
          {"zero-size", {make({0, 3}, dt), params({1})}},
          {"large (threaded)", {make({300, 200}, dt), params({-1, 0})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{flip(in[0], ints_of(in[1]))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          std::vector<bool> flipped(static_cast<size_t>(x.dim()), false);
          for (int64_t d : ints_of(in[1]))
            if (x.dim() > 0) flipped[wrap(d, x.dim())] = true;
          Ref out = x;
          for (int64_t i = 0; i < x.numel(); ++i) {
            Ints idx = x.unravel(i);
            for (int64_t d = 0; d < x.dim(); ++d)
              if (flipped[d]) idx[d] = x.sizes[d] - 1 - idx[d];
            out.v[i] = x.at(idx);
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<IndexError>("repeated dim", "more than once",
                                     [] {
                                       flip(zeros({2, 3}), {1, -1});
                                     }),
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] {
                                       flip(zeros({2, 3}), {2});
                                     }),
        },
    .trailing_params = 1,
});

// Roll params: [number of shifts, shifts..., dims...].
KILN_OPINFO(OpInfo{
    .name = "roll",
    .covers = {"roll"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"[4, 5] by 2 on dim 1", {make({4, 5}, dt), params({1, 2, 1})}},
          {"[4, 5] by (-1, 7) on dims (0, 1)", {make({4, 5}, dt), params({2, -1, 7, 0, 1})}},
          {"flattened by 3", {make({3, 4}, dt, Layout::Transposed), params({1, 3})}},
          {"flattened by -13", {make({2, 5}, dt), params({1, -13})}},
          {"same dim twice", {make({6}, dt), params({2, 2, 3, 0, -1})}},
          {"strided 3-d by (1, -2) on dims (-1, 0)",
           {make({3, 2, 4}, dt, Layout::Strided), params({2, 1, -2, -1, 0})}},
          {"shift by a multiple of the size", {make({3, 4}, dt), params({1, 8, 1})}},
          {"0-d", {make({}, dt), params({1, 5})}},
          {"zero-size", {make({0, 3}, dt), params({1, 1, 0})}},
          {"large (threaded)", {make({300, 200}, dt), params({2, 100, -33, 0, 1})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          const auto ns = static_cast<size_t>(p[0]);
          return std::vector<Tensor>{roll(in[0], Ints(p.begin() + 1, p.begin() + 1 + ns),
                                          Ints(p.begin() + 1 + ns, p.end()))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          const auto ns = static_cast<size_t>(p[0]);
          Ints shifts(p.begin() + 1, p.begin() + 1 + ns), dims(p.begin() + 1 + ns, p.end());
          Ref x = in[0];
          if (dims.empty()) {  // roll the flattened values
            Ref out = x;
            const int64_t n = x.numel();
            for (int64_t i = 0; i < n; ++i) out.v[((i + shifts[0]) % n + n) % n] = x.v[i];
            return std::vector<Ref>{out};
          }
          for (size_t k = 0; k < dims.size(); ++k) {  // one dim at a time
            Ref out = x;
            const int64_t d = wrap(dims[k], x.dim());
            for (int64_t i = 0; i < x.numel(); ++i) {
              Ints idx = x.unravel(i);
              const int64_t n = x.sizes[d];
              idx[d] = ((idx[d] + shifts[k]) % n + n) % n;
              out.v[out.ravel(idx)] = x.v[i];
            }
            x = out;
          }
          return std::vector<Ref>{x};
        },
    .errors =
        {
            expect_error<ShapeError>("shifts and dims differ in length", "same (non-zero) length",
                                     [] {
                                       roll(zeros({2, 3}), {1, 2}, {0});
                                     }),
            expect_error<ShapeError>("several shifts without dims", "exactly one",
                                     [] {
                                       roll(zeros({2, 3}), {1, 2});
                                     }),
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] {
                                       roll(zeros({2, 3}), {1}, {2});
                                     }),
        },
    .trailing_params = 1,
});

// A pad's output sizes and each dim's left pad, for pads as (left, right) pairs from the last
// dim.
std::pair<Ints, Ints> padded_layout(const Ints& in, const Ints& pads) {
  Ints sizes = in, left(in.size(), 0);
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const size_t d = in.size() - 1 - i;
    left[d] = pads[2 * i];
    sizes[d] += pads[2 * i] + pads[2 * i + 1];
  }
  return {sizes, left};
}

// Pad params: [value, pads...].
KILN_OPINFO(OpInfo{
    .name = "pad",
    .covers = {"pad"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      const double v = dt == DType::Bool ? 1 : 3;
      return {
          {"last dim (1, 2)", {make({3, 4}, dt), params({0, 1, 2})}},
          {"two dims (2, 0, 1, 1) with value", {make({3, 4}, dt), params({v, 2, 0, 1, 1})}},
          {"crop (-1, -2)", {make({3, 5}, dt, Layout::Transposed), params({0, -1, -2})}},
          {"pad and crop (2, -1, -1, 3)",
           {make({4, 3}, dt, Layout::Strided), params({v, 2, -1, -1, 3})}},
          {"crop everything then pad", {make({2, 3}, dt), params({v, -3, 2})}},
          {"3-d all dims", {make({2, 3, 2}, dt), params({v, 1, 1, 0, 2, 1, 0})}},
          {"no padding", {make({2, 3}, dt), params({0})}},
          {"0-d", {make({}, dt), params({0})}},
          {"zero-size input", {make({0, 2}, dt), params({v, 1, 1, 2, 0})}},
          {"large (threaded)", {make({300, 200}, dt), params({v, 3, 5, 7, 1})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          std::vector<double> p = values_of(in[1]);
          Ints pads;
          for (size_t i = 1; i < p.size(); ++i) pads.push_back(static_cast<int64_t>(p[i]));
          return std::vector<Tensor>{pad(in[0], pads, Scalar(static_cast<int64_t>(p[0])))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const double value = cast_to(in[1].v[0], x.dtype);
          const Ints p = ints_of(in[1]);
          const Ints pads(p.begin() + 1, p.end());
          const auto [sizes, left] = padded_layout(x.sizes, pads);
          Ref out = make_ref(sizes, x.dtype);
          for (int64_t i = 0; i < out.numel(); ++i) {
            Ints idx = out.unravel(i);
            bool inside = true;
            for (int64_t d = 0; d < x.dim(); ++d) {
              idx[d] -= left[d];
              inside = inside && idx[d] >= 0 && idx[d] < x.sizes[d];
            }
            out.v[i] = inside ? x.at(idx) : value;
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<ValueError>("odd length", "divisible by 2",
                                     [] {
                                       pad(zeros({2, 3}), {1});
                                     }),
            expect_error<ValueError>("too many pads", "pads 2 dims",
                                     [] {
                                       pad(zeros({3}), {1, 1, 1, 1});
                                     }),
            expect_error<ValueError>("negative size", "negative output size",
                                     [] {
                                       pad(zeros({3}), {-2, -2});
                                     }),
        },
    .trailing_params = 1,
});

// pad's other modes (params: [mode, pads...], mode 1 reflect, 2 replicate, 3 circular): each
// output element copies the input element its mode maps it to.
KILN_OPINFO(OpInfo{
    .name = "pad_modes",
    .covers = {"index_select"},
    .dtypes = kAllDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      return {
          {"reflect last dim (2, 3)", {make({3, 4}, dt), params({1, 2, 3})}},
          {"reflect two dims", {make({2, 3, 4}, dt, Layout::Transposed), params({1, 1, 2, 2, 1})}},
          {"replicate (3, 0, 0, 4)", {make({2, 3}, dt), params({2, 3, 0, 0, 4})}},
          {"replicate a size-1 dim", {make({3, 1}, dt), params({2, 2, 2})}},
          {"circular (4, 1) of 4", {make({2, 4}, dt, Layout::Strided), params({3, 4, 1})}},
          {"circular 3 dims", {make({2, 3, 2}, dt), params({3, 1, 2, 0, 3, 2, 0})}},
      };
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          const std::vector<double> p = values_of(in[1]);
          const PadMode modes[] = {PadMode::Constant, PadMode::Reflect, PadMode::Replicate,
                                   PadMode::Circular};
          Ints pads;
          for (size_t i = 1; i < p.size(); ++i) pads.push_back(static_cast<int64_t>(p[i]));
          return std::vector<Tensor>{pad(in[0], pads, modes[static_cast<int>(p[0])])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const Ints p = ints_of(in[1]);
          const int64_t mode = p[0];
          const Ints pads(p.begin() + 1, p.end());
          const auto [sizes, left] = padded_layout(x.sizes, pads);
          Ref out = make_ref(sizes, x.dtype);
          for (int64_t i = 0; i < out.numel(); ++i) {
            Ints idx = out.unravel(i);
            for (int64_t d = 0; d < x.dim(); ++d) {
              const int64_t n = x.sizes[d], q = idx[d] - left[d];
              idx[d] = mode == 1   ? (q < 0    ? -q
                                      : q >= n ? 2 * (n - 1) - q
                                               : q)
                       : mode == 2 ? std::min(std::max<int64_t>(q, 0), n - 1)
                                   : ((q % n) + n) % n;
            }
            out.v[i] = x.at(idx);
          }
          return std::vector<Ref>{out};
        },
    .errors =
        {
            expect_error<ValueError>("reflect pad as large as the dim",
                                     "each pad must be smaller than its dim",
                                     [] {
                                       pad(zeros({2, 3}), {3, 0}, PadMode::Reflect);
                                     }),
            expect_error<ValueError>("circular pad past the dim", "each pad must be at most",
                                     [] {
                                       pad(zeros({2, 3}), {0, 4}, PadMode::Circular);
                                     }),
            expect_error<ValueError>("negative pad", "pads must be >= 0",
                                     [] {
                                       pad(zeros({2, 3}), {-1, 0}, PadMode::Replicate);
                                     }),
            expect_error<ValueError>("an empty dim", "nothing to repeat",
                                     [] {
                                       pad(zeros({2, 0}), {1, 1}, PadMode::Replicate);
                                     }),
        },
    .differentiable = true,
    .trailing_params = 1,
});

// ---- sort / argsort / topk ----
// Ordering with NaN as the largest value (as PyTorch).
bool ref_less(double a, double b) { return std::isnan(b) ? !std::isnan(a) : a < b; }

std::vector<Sample> sort_samples(DType dt) {
  std::vector<Sample> s = {
      {"ties, last dim", {with_ties({4, 9}, dt, 1), params({-1, 0})}, true},
      {"ties, dim 0 descending", {with_ties({7, 5}, dt, 2), params({0, 1})}, true},
      {"transposed dim 1 descending",
       {with_ties({5, 6}, dt, 3, Layout::Transposed), params({1, 1})},
       true},
      {"strided 3-d dim 1", {make({2, 5, 3}, dt, Layout::Strided), params({1, 0})}},
      {"0-d", {make({}, dt), params({0, 0})}},
      {"empty", {make({0, 4}, dt), params({1, 0})}},
      {"many lines (threaded)", {with_ties({2000, 40}, dt, 4), params({1, 1})}, true},
      {"one long line", {make({5000}, dt, Layout::Contiguous, 5), params({0, 0})}},
  };
  if (is_floating(dt)) {
    Tensor special =
        tensor(std::vector<double>{3, kNaN, 1, -kInf, kNaN, 3, kInf, -0.0, 0.0, 1}).to(dt);
    s.push_back({"NaN and inf ascending", {special, params({0, 0})}});
    s.push_back({"NaN and inf descending", {special, params({0, 1})}});
  }
  return s;
}
// Stable sort of each line along dim; returns (values, indices).
std::vector<Ref> ref_sort(const Ref& x, int64_t dim, bool desc, int64_t k = -1) {
  const int64_t d = wrap(dim, x.dim());
  const int64_t n = x.dim() == 0 ? 1 : x.sizes[d];
  if (k < 0) k = n;
  Ints sizes = x.sizes;
  if (x.dim() > 0) sizes[d] = k;
  Ref vals = make_ref(sizes, x.dtype), idxs = make_ref(sizes, DType::Int64);
  for (const Ints& line : lines_of(x, d)) {
    Ints order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double va = x.v[line[a]], vb = x.v[line[b]];
      return desc ? ref_less(vb, va) : ref_less(va, vb);
    });
    Ints pos = x.dim() == 0 ? Ints{} : x.unravel(line[0]);
    for (int64_t j = 0; j < k; ++j) {
      if (!pos.empty()) pos[d] = j;
      const int64_t o = pos.empty() ? 0 : vals.ravel(pos);
      vals.v[o] = x.v[line[order[j]]];
      idxs.v[o] = static_cast<double>(order[j]);
    }
  }
  return {vals, idxs};
}
KILN_OPINFO(OpInfo{
    .name = "sort",
    .covers = {"sort"},
    .dtypes = kAllDTypes,
    .samples = sort_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          auto [v, i] = sort(in[0], p[0], p[1] != 0);
          return std::vector<Tensor>{v, i};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          return ref_sort(in[0], p[0], p[1] != 0);
        },
    .errors =
        {
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] {
                                       sort(zeros({2, 3}), 2);
                                     }),
        },
});
KILN_OPINFO(OpInfo{
    .name = "argsort",
    .covers = {"sort"},
    .dtypes = kAllDTypes,
    .samples = sort_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          return std::vector<Tensor>{argsort(in[0], p[0], p[1] != 0)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          return std::vector<Ref>{ref_sort(in[0], p[0], p[1] != 0)[1]};
        },
    .errors =
        {
            expect_error<IndexError>("dim out of range", "dimension out of range",
                                     [] { argsort(zeros({}), 1); }),
        },
    .no_gradcheck = "indices only: an integer result has no gradient",
});

// Topk params: [k, dim, largest].
KILN_OPINFO(OpInfo{
    .name = "topk",
    .covers = {"topk"},
    .dtypes = kNumericDTypes,
    .samples = [](DType dt) -> std::vector<Sample> {
      std::vector<Sample> s = {
          {"k 3 of ties, largest", {with_ties({4, 9}, dt, 1), params({3, -1, 1})}, true},
          {"k 2 of ties, smallest, dim 0", {with_ties({7, 5}, dt, 2), params({2, 0, 0})}, true},
          {"transposed, k = size", {make({5, 6}, dt, Layout::Transposed), params({6, 1, 1})}},
          {"strided 3-d, k 0", {make({2, 5, 3}, dt, Layout::Strided), params({0, 1, 1})}},
          {"0-d", {make({}, dt), params({1, 0, 1})}},
          {"empty lines", {make({0, 4}, dt), params({2, 1, 0})}},
          {"many lines (threaded)", {with_ties({2000, 40}, dt, 4), params({5, 1, 1})}, true},
          {"one long line", {make({5000}, dt, Layout::Contiguous, 5), params({17, 0, 0})}},
      };
      if (is_floating(dt)) {
        Tensor special =
            tensor(std::vector<double>{3, kNaN, 1, -kInf, kNaN, 3, kInf, 0.0, 1}).to(dt);
        s.push_back({"NaN largest", {special, params({4, 0, 1})}});
        s.push_back({"NaN smallest", {special, params({8, 0, 0})}});
      }
      return s;
    },
    .fn =
        [](const std::vector<Tensor>& in) {
          Ints p = ints_of(in[1]);
          auto [v, i] = topk(in[0], p[0], p[1], p[2] != 0);
          return std::vector<Tensor>{v, i};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ints p = ints_of(in[1]);
          return ref_sort(in[0], p[1], p[2] != 0, p[0]);
        },
    .errors =
        {
            expect_error<IndexError>("k too large",
                                     "k (4) is out of range for dimension 1 with size 3",
                                     [] {
                                       topk(zeros({2, 3}), 4);
                                     }),
            expect_error<IndexError>("negative k", "out of range",
                                     [] {
                                       topk(zeros({2, 3}), -1);
                                     }),
            expect_error<DTypeError>("bool", "bool", [] { topk(zeros({3}, DType::Bool), 1); }),
        },
});

// ---- behaviour the conformance samples can't show ----
TEST(Indexing, SplitChunkUnbindReturnViews) {
  Tensor x = arange(12).view({3, 4});
  for (const Tensor& piece : split(x, 2, 1))
    EXPECT_EQ(piece.impl()->storage(), x.impl()->storage());
  for (const Tensor& piece : chunk(x, 2, 0))
    EXPECT_EQ(piece.impl()->storage(), x.impl()->storage());
  std::vector<Tensor> rows = unbind(x, 0);
  rows[1].fill_(0);
  EXPECT_EQ(x.to_vector<int64_t>()[5], 0);
}

TEST(Indexing, InPlaceFormsLeaveSelfUntouchedOnBadIndex) {
  Tensor self = arange(6).view({3, 2});
  EXPECT_THROW(scatter_(self, 0, tensor(Ints{0, 1, 2, 3}, Ints{2, 2}), ones({2, 2}, DType::Int64)),
               IndexError);
  EXPECT_THROW(scatter_add_(self, 0, tensor(Ints{0, 7}, Ints{1, 2}), ones({1, 2}, DType::Int64)),
               IndexError);
  EXPECT_THROW(index_add_(self, 0, tensor(Ints{1, 3}), ones({2, 2}, DType::Int64)), IndexError);
  EXPECT_EQ(self.to_vector<int64_t>(), (Ints{0, 1, 2, 3, 4, 5}));
}

TEST(Indexing, InPlaceFormsWriteThroughAViewOfSelf) {
  Tensor base = zeros({3, 4});
  Tensor view = base.slice(1, 1, 3);  // [3, 2], non-contiguous
  index_add_(view, 0, tensor(Ints{2, 2}), ones({2, 2}), 0.5);
  scatter_(view, 1, tensor(Ints{1}, Ints{1, 1}), full({1, 1}, 7.0));
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 0, 7, 0, 0, 0, 0, 0, 0, 1, 1, 0}));
}

TEST(Indexing, SortIsStableForTies) {
  Tensor x = tensor({2.0, 1.0, 2.0, 1.0, 2.0});
  EXPECT_EQ(sort(x).second.to_vector<int64_t>(), (Ints{1, 3, 0, 2, 4}));
  EXPECT_EQ(sort(x, 0, true).second.to_vector<int64_t>(), (Ints{0, 2, 4, 1, 3}));
}

TEST(Indexing, TopkUnsortedReturnsTheSameElements) {
  Tensor x = make_tensor_for_test({6, 50}, DType::Float32, -5, 5, Layout::Contiguous, 11);
  auto [v1, i1] = topk(x, 7, 1, true, true);
  auto [v2, i2] = topk(x, 7, 1, true, false);
  std::vector<float> a = v1.to_vector<float>(), b = v2.to_vector<float>();
  for (size_t row = 0; row < 6; ++row) {
    std::sort(a.begin() + row * 7, a.begin() + row * 7 + 7);
    std::sort(b.begin() + row * 7, b.begin() + row * 7 + 7);
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(gather(x, 1, i2).to_vector<float>(), v2.to_vector<float>());
}

TEST(Indexing, CatPromotesAndKeepsInputsUnchanged) {
  Tensor a = tensor(Ints{1, 2}).to(DType::Int32);
  Tensor b = tensor({0.5});
  Tensor c = cat({a, b});
  EXPECT_EQ(c.dtype(), DType::Float32);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 0.5f}));
  EXPECT_EQ(a.dtype(), DType::Int32);
}

}  // namespace
}  // namespace kiln::testing
