// OpInfos for the matrix products (matmul, mm, bmm, addmm, linear, matmul_out), checked against
// float64 references written as plain triple loops.
#include <limits>

#include "ops/opinfo.h"
#include "ops/split_sum.h"

namespace kiln::testing {
namespace {

// ---- references ----
// torch.matmul on references: 1-d operands are promoted to matrices and the added dim removed;
// batch dims broadcast.
Ref ref_matmul(const Ref& a, const Ref& b, DType dtype) {
  std::vector<int64_t> as = a.sizes, bs = b.sizes;
  if (a.dim() == 1) as.insert(as.begin(), 1);
  if (b.dim() == 1) bs.push_back(1);
  const int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  const std::vector<int64_t> abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(abatch.size(), bbatch.size());
  std::vector<int64_t> batch(nb, 1);
  for (size_t d = 0; d < nb; ++d) {
    const int64_t da = static_cast<int64_t>(d + abatch.size()) - static_cast<int64_t>(nb);
    const int64_t db = static_cast<int64_t>(d + bbatch.size()) - static_cast<int64_t>(nb);
    const int64_t sa = da >= 0 ? abatch[da] : 1, sb = db >= 0 ? bbatch[db] : 1;
    batch[d] = sa == 1 ? sb : sa;
  }
  std::vector<int64_t> full = batch;
  full.push_back(n);
  full.push_back(m);
  Ref out = Ref::zeros(full, dtype);
  Ref a2{as, a.v, a.dtype}, b2{bs, b.v, b.dtype};
  for (int64_t o = 0; o < out.numel(); ++o) {
    const std::vector<int64_t> idx = out.unravel(o);
    std::vector<int64_t> ia(as.size()), ib(bs.size());
    for (size_t d = 0; d + 2 < as.size(); ++d) {
      const size_t od = d + nb - (as.size() - 2);
      ia[d] = as[d] == 1 ? 0 : idx[od];
    }
    for (size_t d = 0; d + 2 < bs.size(); ++d) {
      const size_t od = d + nb - (bs.size() - 2);
      ib[d] = bs[d] == 1 ? 0 : idx[od];
    }
    double acc = 0;
    for (int64_t p = 0; p < k; ++p) {
      ia[as.size() - 2] = idx[nb];
      ia[as.size() - 1] = p;
      ib[bs.size() - 2] = p;
      ib[bs.size() - 1] = idx[nb + 1];
      acc += a2.at(ia) * b2.at(ib);
    }
    out.v[o] = acc;
  }
  std::vector<int64_t> final_sizes = batch;
  if (a.dim() >= 2) final_sizes.push_back(n);
  if (b.dim() >= 2) final_sizes.push_back(m);
  out.sizes = final_sizes;
  return out;
}

// beta * self + alpha * (a @ b), self broadcast to the product's shape.
Ref ref_addmm(const Ref& self, const Ref& a, const Ref& b, double beta, double alpha) {
  Ref prod = ref_matmul(a, b, a.dtype);
  return zip({self, prod}, a.dtype, [&](const std::vector<double>& x) {
    return (beta == 0 ? 0.0 : beta * x[0]) + alpha * x[1];
  });
}

Tensor mk(std::vector<int64_t> sizes, DType dt, Layout layout = Layout::Contiguous,
          uint32_t seed = 0) {
  return make_tensor_for_test(std::move(sizes), dt, -1, 1, layout, seed);
}

// ---- samples ----
std::vector<Sample> matmul_samples(DType dt) {
  const auto T = Layout::Transposed, S = Layout::Strided;
  return {
      {"dot [7] @ [7]", {mk({7}, dt), mk({7}, dt, Layout::Contiguous, 1)}},
      {"dot strided [5] @ [5]", {mk({5}, dt, S), mk({5}, dt, S, 1)}},
      {"vector-matrix [4] @ [4, 3]", {mk({4}, dt), mk({4, 3}, dt)}},
      {"matrix-vector [3, 4] @ [4]", {mk({3, 4}, dt), mk({4}, dt)}},
      {"vector @ batch [4] @ [2, 4, 3]", {mk({4}, dt), mk({2, 4, 3}, dt)}},
      {"batch @ vector [2, 3, 4] @ [4]", {mk({2, 3, 4}, dt), mk({4}, dt)}},
      {"2-d [5, 7] @ [7, 6]", {mk({5, 7}, dt), mk({7, 6}, dt)}},
      {"transposed a [5, 7] @ [7, 6]", {mk({5, 7}, dt, T), mk({7, 6}, dt)}},
      {"transposed b [5, 7] @ [7, 6]", {mk({5, 7}, dt), mk({7, 6}, dt, T)}},
      {"both transposed [6, 3] @ [3, 9]", {mk({6, 3}, dt, T), mk({3, 9}, dt, T)}},
      {"strided (packed) [4, 6] @ [6, 5]", {mk({4, 6}, dt, S), mk({6, 5}, dt, S)}},
      {"expanded column [3, 4] @ [4, 5]", {mk({3, 1}, dt).expand({3, 4}), mk({4, 5}, dt)}},
      {"batched [2, 3, 4] @ [2, 4, 5]", {mk({2, 3, 4}, dt), mk({2, 4, 5}, dt)}},
      {"batched transposed [3, 4, 5] @ [3, 5, 2]", {mk({3, 4, 5}, dt, T), mk({3, 5, 2}, dt)}},
      {"batched mT [3, 4, 5] @ [3, 5, 6]", {mk({3, 5, 4}, dt).mT(), mk({3, 6, 5}, dt).mT()}},
      {"batched strided [2, 3, 4] @ [2, 4, 3]", {mk({2, 3, 4}, dt, S), mk({2, 4, 3}, dt, S)}},
      {"broadcast batch [2, 1, 3, 4] @ [5, 4, 6]", {mk({2, 1, 3, 4}, dt), mk({5, 4, 6}, dt)}},
      {"broadcast batch [3, 4, 5] @ [5, 2] (folded)", {mk({3, 4, 5}, dt), mk({5, 2}, dt)}},
      {"broadcast batch [4, 5] @ [3, 5, 2]", {mk({4, 5}, dt), mk({3, 5, 2}, dt)}},
      {"expanded batch [1, 3, 4]->[2, 3, 4] @ [2, 4, 5]",
       {mk({1, 3, 4}, dt).expand({2, 3, 4}), mk({2, 4, 5}, dt)}},
      {"non-foldable batch [2, 3, 4] sliced @ [4, 5]",
       {mk({2, 6, 4}, dt).slice(1, 0, 3), mk({4, 5}, dt)}},
      {"zero rows [0, 3] @ [3, 4]", {mk({0, 3}, dt), mk({3, 4}, dt)}},
      {"zero inner [3, 0] @ [0, 4]", {mk({3, 0}, dt), mk({0, 4}, dt)}},
      {"zero inner dot [0] @ [0]", {mk({0}, dt), mk({0}, dt)}},
      {"zero batch [2, 0, 3, 4] @ [4, 5]", {mk({2, 0, 3, 4}, dt), mk({4, 5}, dt)}},
      {"tiny kernel, row remainder [6, 5, 3] @ [6, 3, 16]",
       {mk({6, 5, 3}, dt), mk({6, 3, 16}, dt)}},
      {"tiny kernel, transposed a [3, 7, 4] @ [3, 4, 8]",
       {mk({3, 7, 4}, dt, T), mk({3, 4, 8}, dt)}},
      {"tiny kernel, wide [2, 4, 16] @ [2, 16, 64]", {mk({2, 4, 16}, dt), mk({2, 16, 64}, dt)}},
      {"tiny kernel, 32 columns [2, 9, 5] @ [2, 5, 32]", {mk({2, 9, 5}, dt), mk({2, 5, 32}, dt)}},
      {"small batch, register-blocked rows and their tails [4, 13, 40] @ [4, 40, 32]",
       {mk({4, 13, 40}, dt), mk({4, 40, 32}, dt, T)}},
      {"small batch (parallel over batch) [40, 8, 8] @ [40, 8, 8]",
       {mk({40, 8, 8}, dt), mk({40, 8, 8}, dt, T)}},
      {"large (BLAS threads) [96, 128] @ [128, 80]", {mk({96, 128}, dt), mk({128, 80}, dt, T)}},
      {"large batch [3, 70, 80] @ [3, 80, 70]", {mk({3, 70, 80}, dt), mk({3, 80, 70}, dt)}},
      {"medium batch (parallel over batch) [6, 70, 80] @ [6, 80, 70]",
       {mk({6, 70, 80}, dt), mk({6, 80, 70}, dt, T)}},
  };
}

std::vector<Sample> mm_samples(DType dt) {
  const auto T = Layout::Transposed, S = Layout::Strided;
  return {
      {"[5, 7] @ [7, 6]", {mk({5, 7}, dt), mk({7, 6}, dt)}},
      {"[1, 1] @ [1, 1]", {mk({1, 1}, dt), mk({1, 1}, dt)}},
      {"row @ column [1, 9] @ [9, 1]", {mk({1, 9}, dt), mk({9, 1}, dt)}},
      {"transposed [4, 6] @ [6, 3]", {mk({4, 6}, dt, T), mk({6, 3}, dt, T)}},
      {"strided [4, 6] @ [6, 3]", {mk({4, 6}, dt, S), mk({6, 3}, dt, S)}},
      {"column slice [4, 3] of [4, 8] @ [3, 5]", {mk({4, 8}, dt).slice(1, 2, 5), mk({3, 5}, dt)}},
      {"outer product, strided b [3, 1] @ [1, 8]", {mk({3, 1}, dt), mk({1, 8}, dt, S)}},
      {"zero [0, 3] @ [3, 0]", {mk({0, 3}, dt), mk({3, 0}, dt)}},
      {"zero inner [2, 0] @ [0, 3]", {mk({2, 0}, dt), mk({0, 3}, dt)}},
      {"large [130, 70] @ [70, 90]", {mk({130, 70}, dt), mk({70, 90}, dt)}},
  };
}

std::vector<Sample> bmm_samples(DType dt) {
  const auto T = Layout::Transposed, S = Layout::Strided;
  return {
      {"[3, 4, 5] @ [3, 5, 2]", {mk({3, 4, 5}, dt), mk({3, 5, 2}, dt)}},
      {"transposed [2, 5, 4] @ [2, 4, 3]", {mk({2, 5, 4}, dt, T), mk({2, 4, 3}, dt, T)}},
      {"mT [2, 3, 4] @ [2, 4, 6]", {mk({2, 4, 3}, dt).mT(), mk({2, 6, 4}, dt).mT()}},
      {"strided [2, 3, 4] @ [2, 4, 3]", {mk({2, 3, 4}, dt, S), mk({2, 4, 3}, dt)}},
      {"expanded [1, 3, 4]->[4, 3, 4] @ [4, 4, 2]",
       {mk({1, 3, 4}, dt).expand({4, 3, 4}), mk({4, 4, 2}, dt)}},
      {"zero batch [0, 3, 4] @ [0, 4, 2]", {mk({0, 3, 4}, dt), mk({0, 4, 2}, dt)}},
      {"zero inner [2, 3, 0] @ [2, 0, 2]", {mk({2, 3, 0}, dt), mk({2, 0, 2}, dt)}},
      {"many small [64, 4, 4] @ [64, 4, 4]", {mk({64, 4, 4}, dt), mk({64, 4, 4}, dt)}},
  };
}

std::vector<Sample> addmm_samples(DType dt) {
  const auto T = Layout::Transposed;
  return {
      {"self [3, 4]", {mk({3, 4}, dt, Layout::Contiguous, 5), mk({3, 5}, dt), mk({5, 4}, dt)}},
      {"bias [4]", {mk({4}, dt, Layout::Contiguous, 5), mk({3, 5}, dt), mk({5, 4}, dt, T)}},
      {"column [3, 1]", {mk({3, 1}, dt, Layout::Contiguous, 5), mk({3, 5}, dt, T), mk({5, 4}, dt)}},
      {"0-d self", {mk({}, dt, Layout::Contiguous, 5), mk({3, 5}, dt), mk({5, 4}, dt)}},
      {"tiny kernel [5, 8]",
       {mk({5, 8}, dt, Layout::Contiguous, 5), mk({5, 3}, dt), mk({3, 8}, dt)}},
      {"transposed self [6, 7]", {mk({6, 7}, dt, T, 5), mk({6, 8}, dt), mk({8, 7}, dt)}},
      {"zero inner [3, 0] @ [0, 4]",
       {mk({3, 4}, dt, Layout::Contiguous, 5), mk({3, 0}, dt), mk({0, 4}, dt)}},
      {"zero rows", {mk({4}, dt), mk({0, 5}, dt), mk({5, 4}, dt)}},
      {"large", {mk({90}, dt), mk({100, 80}, dt), mk({80, 90}, dt)}},
  };
}

Tensor nan_tensor(std::vector<int64_t> sizes, DType dt) {
  return full(sizes, std::numeric_limits<double>::quiet_NaN(), dt);
}

std::vector<Sample> linear_samples(DType dt, bool with_bias) {
  auto s = [&](std::string name, std::vector<int64_t> x, int64_t out, bool x_transposed = false) {
    const int64_t in = x.back();
    std::vector<Tensor> inputs = {mk(x, dt, x_transposed ? Layout::Transposed : Layout::Contiguous),
                                  mk({out, in}, dt, Layout::Contiguous, 2)};
    if (with_bias) inputs.push_back(mk({out}, dt, Layout::Contiguous, 3));
    return Sample{name, inputs};
  };
  return {
      s("1-d [5]", {5}, 3),
      s("2-d [4, 5]", {4, 5}, 3),
      s("3-d [2, 4, 5]", {2, 4, 5}, 6),
      s("3-d transposed [3, 4, 5]", {3, 4, 5}, 2, true),
      s("4-d [2, 2, 3, 6]", {2, 2, 3, 6}, 4),
      s("zero batch [0, 5]", {0, 5}, 3),
      s("zero features [3, 0]", {3, 0}, 4),
      s("zero batch 3-d [2, 0, 5]", {2, 0, 5}, 3),
      s("large [64, 128]", {64, 128}, 96),
  };
}

const std::vector<DType> kF = kFloatDTypes;

std::vector<ErrorCase> shared_product_errors(const std::string& op,
                                             std::function<Tensor(Tensor, Tensor)> f) {
  return {
      expect_error<DTypeError>("int64 operands", "floating",
                               [=] {
                                 f(ones({2, 3}, DType::Int64), ones({3, 2}, DType::Int64));
                               }),
      expect_error<DTypeError>("bool operands", "floating",
                               [=] {
                                 f(ones({2, 3}, DType::Bool), ones({3, 2}, DType::Bool));
                               }),
      expect_error<DTypeError>("mixed float32/float64", "same dtype",
                               [=] {
                                 f(ones({2, 3}), ones({3, 2}, DType::Float64));
                               }),
      expect_error<ShapeError>("inner dims differ",
                               op + ": shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)",
                               [=] {
                                 f(ones({2, 3}), ones({4, 5}));
                               }),
  };
}

KILN_OPINFO({
    .name = "matmul",
    .covers = {"matmul"},
    .dtypes = kF,
    .samples = matmul_samples,
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{matmul(in[0], in[1])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_matmul(in[0], in[1], in[0].dtype)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        [] {
          auto e = shared_product_errors("matmul", [](Tensor a, Tensor b) { return matmul(a, b); });
          e.push_back(expect_error<ShapeError>("0-d operand", "at least 1 dimension",
                                               [] { matmul(ones({}), ones({3})); }));
          e.push_back(expect_error<ShapeError>("batch dims do not broadcast",
                                               "batch dims of shapes [2, 3, 4] and [5, 4, 6]", [] {
                                                 matmul(ones({2, 3, 4}), ones({5, 4, 6}));
                                               }));
          e.push_back(expect_error<ShapeError>("vector length mismatch",
                                               "shapes [3] and [4] cannot be multiplied (3 != 4)",
                                               [] { matmul(ones({3}), ones({4})); }));
          e.push_back(expect_error<ShapeError>("matrix-vector mismatch",
                                               "shapes [2, 3] and [4] cannot be multiplied", [] {
                                                 matmul(ones({2, 3}), ones({4}));
                                               }));
          return e;
        }(),
    .second_order = true,
});

KILN_OPINFO({
    .name = "matmul_method",
    .covers = {"matmul"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{{"[2, 3] @ [3, 4]", {mk({2, 3}, dt), mk({3, 4}, dt)}}};
        },
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].matmul(in[1])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_matmul(in[0], in[1], in[0].dtype)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = {expect_error<ShapeError>("mismatch", "cannot be multiplied",
                                        [] {
                                          ones({2, 3}).matmul(ones({2, 3}));
                                        })},
    .second_order = true,
});

KILN_OPINFO({
    .name = "matmul_out",
    .covers = {"matmul"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{
              {"[3, 4] @ [4, 5]", {mk({3, 4}, dt), mk({4, 5}, dt)}},
              {"batched [2, 3, 4] @ [4]", {mk({2, 3, 4}, dt), mk({4}, dt)}},
              {"dot [6] @ [6]", {mk({6}, dt), mk({6}, dt)}},
          };
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          // Into a fresh contiguous tensor, and into a transposed one (through a temporary).
          Tensor ref = matmul(in[0], in[1]);
          Tensor out = full(ref.sizes(), 7.0, ref.dtype());
          Tensor& r = matmul_out(out, in[0], in[1]);
          EXPECT_TRUE(r.is_same(out));
          std::vector<Tensor> result{out};
          if (ref.dim() == 2) {
            Tensor t = zeros({ref.size(1), ref.size(0)}, ref.dtype()).t();
            matmul_out(t, in[0], in[1]);
            result.push_back(t);
          }
          return result;
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ref r = ref_matmul(in[0], in[1], in[0].dtype);
          std::vector<Ref> result{r};
          if (r.dim() == 2) result.push_back(r);
          return result;
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        {
            expect_error<ShapeError>("wrong out shape", "has shape [2, 2]",
                                     [] {
                                       Tensor out = zeros({2, 2});
                                       matmul_out(out, ones({2, 3}), ones({3, 4}));
                                     }),
            expect_error<DTypeError>("int out", "can't be cast",
                                     [] {
                                       Tensor out = zeros({2, 4}, DType::Int64);
                                       matmul_out(out, ones({2, 3}), ones({3, 4}));
                                     }),
        },
});

KILN_OPINFO({
    .name = "mm",
    .covers = {"mm"},
    .dtypes = kF,
    .samples = mm_samples,
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mm(in[0], in[1])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_matmul(in[0], in[1], in[0].dtype)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        [] {
          auto e = shared_product_errors("mm", [](Tensor a, Tensor b) { return mm(a, b); });
          e.push_back(expect_error<ShapeError>("3-d operand", "mm: expected 2-D tensors", [] {
            mm(ones({2, 2, 3}), ones({3, 2}));
          }));
          e.push_back(expect_error<ShapeError>("1-d operand", "mm: expected 2-D tensors", [] {
            mm(ones({3}), ones({3, 2}));
          }));
          return e;
        }(),
    .second_order = true,
});

KILN_OPINFO({
    .name = "bmm",
    .covers = {"bmm"},
    .dtypes = kF,
    .samples = bmm_samples,
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{bmm(in[0], in[1])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_matmul(in[0], in[1], in[0].dtype)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        {
            expect_error<ShapeError>("2-d operand", "bmm: expected 3-D tensors",
                                     [] {
                                       bmm(ones({2, 3}), ones({3, 2}));
                                     }),
            expect_error<ShapeError>("batch sizes differ", "does not broadcast",
                                     [] {
                                       bmm(ones({2, 2, 3}), ones({1, 3, 2}));
                                     }),
            expect_error<ShapeError>(
                "inner dims differ",
                "bmm: shapes [2, 2, 3] and [2, 4, 2] cannot be multiplied (3 != 4)",
                [] {
                  bmm(ones({2, 2, 3}), ones({2, 4, 2}));
                }),
            expect_error<DTypeError>(
                "int64", "floating",
                [] {
                  bmm(ones({1, 2, 2}, DType::Int64), ones({1, 2, 2}, DType::Int64));
                }),
        },
    .second_order = true,
});

KILN_OPINFO({
    .name = "addmm",
    .covers = {"addmm"},
    .dtypes = kF,
    .samples = addmm_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{addmm(in[0], in[1], in[2])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_addmm(in[0], in[1], in[2], 1, 1)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        {
            expect_error<ShapeError>("self does not broadcast", "addmm: self of shape [3]",
                                     [] {
                                       addmm(ones({3}), ones({2, 3}), ones({3, 4}));
                                     }),
            expect_error<ShapeError>("3-d self", "cannot be broadcast",
                                     [] {
                                       addmm(ones({1, 2, 4}), ones({2, 3}), ones({3, 4}));
                                     }),
            expect_error<ShapeError>("inner dims", "cannot be multiplied (3 != 2)",
                                     [] {
                                       addmm(ones({2, 4}), ones({2, 3}), ones({2, 4}));
                                     }),
            expect_error<DTypeError>("self dtype differs", "self has dtype float64",
                                     [] {
                                       addmm(ones({4}, DType::Float64), ones({2, 3}), ones({3, 4}));
                                     }),
            expect_error<DTypeError>("int", "floating",
                                     [] {
                                       addmm(ones({4}, DType::Int64), ones({2, 3}, DType::Int64),
                                             ones({3, 4}, DType::Int64));
                                     }),
        },
    .second_order = true,
});

KILN_OPINFO({
    .name = "addmm_scaled",
    .covers = {"addmm"},
    .dtypes = kF,
    .samples = addmm_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{addmm(in[0], in[1], in[2], 0.5, -2.0)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_addmm(in[0], in[1], in[2], 0.5, -2.0)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = {expect_error<ShapeError>("2-d required", "addmm: expected 2-D matrices",
                                        [] {
                                          addmm(ones({4}), ones({3}), ones({3, 4}), 0.5, 2);
                                        })},
    .second_order = true,
});

KILN_OPINFO({
    .name = "addmm_beta0_ignores_nan",
    .covers = {"addmm"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{
              {"NaN self [3, 4]", {nan_tensor({3, 4}, dt), mk({3, 5}, dt), mk({5, 4}, dt)}},
              {"NaN bias, zero inner", {nan_tensor({4}, dt), mk({3, 0}, dt), mk({0, 4}, dt)}},
          };
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{addmm(in[0], in[1], in[2], 0, 1.5)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_addmm(in[0], in[1], in[2], 0, 1.5)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = {expect_error<ShapeError>("self does not broadcast", "cannot be broadcast",
                                        [] {
                                          addmm(ones({5}), ones({3, 2}), ones({2, 4}), 0, 1);
                                        })},
});

Ref ref_linear(const std::vector<Ref>& in) {
  // x @ weight^T (+ bias): transpose the weight reference by hand.
  const Ref& w = in[1];
  Ref wt = Ref::zeros({w.sizes[1], w.sizes[0]}, w.dtype);
  for (int64_t i = 0; i < w.sizes[0]; ++i)
    for (int64_t j = 0; j < w.sizes[1]; ++j) wt.v[j * w.sizes[0] + i] = w.v[i * w.sizes[1] + j];
  Ref y = ref_matmul(in[0], wt, in[0].dtype);
  if (in.size() == 3)
    y = zip({y, in[2]}, y.dtype, [](const std::vector<double>& x) { return x[0] + x[1]; });
  return y;
}

std::vector<ErrorCase> linear_errors() {
  return {
      expect_error<ShapeError>("1-d weight", "linear: weight must be 2-D",
                               [] {
                                 linear(ones({2, 3}), ones({3}));
                               }),
      expect_error<ShapeError>("feature mismatch", "has 3 features but weight of shape [4, 5]",
                               [] {
                                 linear(ones({2, 3}), ones({4, 5}));
                               }),
      expect_error<ShapeError>("bias shape", "does not match out_features",
                               [] {
                                 linear(ones({2, 3}), ones({4, 3}), ones({5}));
                               }),
      expect_error<DTypeError>("int input", "floating",
                               [] {
                                 linear(ones({2, 3}, DType::Int64), ones({4, 3}, DType::Int64));
                               }),
  };
}

KILN_OPINFO({
    .name = "linear",
    .covers = {"addmm", "matmul", "add"},
    .dtypes = kF,
    .samples = [](DType dt) { return linear_samples(dt, true); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{linear(in[0], in[1], in[2])};
        },
    .ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{ref_linear(in)}; },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = linear_errors(),
});

KILN_OPINFO({
    .name = "linear_no_bias",
    .covers = {"matmul"},
    .dtypes = kF,
    .samples = [](DType dt) { return linear_samples(dt, false); },
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], in[1])}; },
    .ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{ref_linear(in)}; },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = linear_errors(),
});

// The batched product's threading must give the same answer whatever the thread count (the
// parallel-over-batch path and the sequential BLAS path split the work differently).
TEST(Linalg, BatchedProductIndependentOfThreads) {
  Tensor a = mk({33, 12, 10}, DType::Float64), b = mk({33, 10, 14}, DType::Float64);
  const int saved = get_num_threads();
  set_num_threads(1);
  std::vector<double> one = matmul(a, b).to_vector<double>();
  set_num_threads(std::max(2, saved));
  std::vector<double> many = matmul(a, b).to_vector<double>();
  set_num_threads(saved);
  EXPECT_EQ(one, many);
}

// Sets the thread count for a scope, restoring it on the way out (an ASSERT included).
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int n) : saved_(get_num_threads()) { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(saved_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int saved_;
};

// Products whose sum is at least twice as long as their output is wide or tall (a weight's
// gradient over a batch's tokens) split the sum across the threads and add the partial results
// (linalg.cpp, split_sum_threads): every layout, an uneven split, addmm's beta term on one
// part only, a NaN-filled output written with beta = 0 (matmul_out), float32 and float64,
// against plain loops in double.
TEST(Linalg, LongSumsSplitAcrossThreadsMatchPlainLoops) {
  const ThreadsGuard threads(2);
  const auto reference = [](const Tensor& a, const Tensor& b) {
    const Tensor a64 = a.to(DType::Float64).contiguous(), b64 = b.to(DType::Float64).contiguous();
    const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
    const double *pa = a64.data_ptr<double>(), *pb = b64.data_ptr<double>();
    // Each element's sum, and the sum of its terms' magnitudes (what rounding error scales with).
    std::pair<std::vector<double>, std::vector<double>> out;
    out.first.assign(static_cast<size_t>(n * m), 0.0);
    out.second.assign(static_cast<size_t>(n * m), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < m; ++j) {
          out.first[i * m + j] += pa[i * k + p] * pb[p * m + j];
          out.second[i * m + j] += std::abs(pa[i * k + p] * pb[p * m + j]);
        }
    return out;
  };
  const auto expect_close = [](const Tensor& got, const std::vector<double>& want,
                               const std::vector<double>& magnitude, double tol) {
    const std::vector<double> g = got.to(DType::Float64).contiguous().to_vector<double>();
    ASSERT_EQ(g.size(), want.size());
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], want[i], tol * (1 + magnitude[i])) << "element " << i;
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_info(dt).name);
    const double tol = dt == DType::Float32 ? 1e-5 : 1e-13;
    // [n, k] @ [k, m] with the operands stored as given, transposed, or both.
    struct Case {
      int64_t n, k, m;
      bool ta, tb;
    };
    for (const Case& c : {Case{96, 2049, 40, true, false}, Case{48, 1537, 80, false, false},
                          Case{64, 1801, 72, false, true}, Case{40, 2048, 96, true, true}}) {
      SCOPED_TRACE(std::to_string(c.n) + " x " + std::to_string(c.k) + " x " + std::to_string(c.m));
      ASSERT_EQ(ops::split_sum_threads(c.n, c.m, c.k), 2);  // (what this test is about)
      const Tensor a = c.ta ? mk({c.k, c.n}, dt, Layout::Contiguous, 1).t()
                            : mk({c.n, c.k}, dt, Layout::Contiguous, 1);
      const Tensor b = c.tb ? mk({c.m, c.k}, dt, Layout::Contiguous, 2).t()
                            : mk({c.k, c.m}, dt, Layout::Contiguous, 2);
      const auto [want, magnitude] = reference(a, b);
      expect_close(mm(a, b), want, magnitude, tol);
      // beta * self + alpha * (a @ b) with a full self: the beta term lands on one part only.
      const Tensor self = mk({c.n, c.m}, dt, Layout::Contiguous, 3);
      const std::vector<double> s = self.to(DType::Float64).to_vector<double>();
      std::vector<double> want_addmm(want.size());
      for (size_t i = 0; i < want.size(); ++i) want_addmm[i] = 0.5 * s[i] + 2.0 * want[i];
      expect_close(addmm(self, a, b, 0.5, 2.0), want_addmm, magnitude, 2 * tol);
      // Written into an output full of NaN (beta = 0: the output is not read).
      Tensor out = full({c.n, c.m}, std::numeric_limits<double>::quiet_NaN(), dt);
      matmul_out(out, a, b);
      expect_close(out, want, magnitude, tol);
    }
  }
  // Not split: sums no longer than twice the output's sides, and one thread.
  EXPECT_EQ(ops::split_sum_threads(1024, 1024, 1024), 1);
  EXPECT_EQ(ops::split_sum_threads(2048, 128, 512), 1);
  const ThreadsGuard one(1);
  EXPECT_EQ(ops::split_sum_threads(96, 40, 2049), 1);
}

}  // namespace
}  // namespace kiln::testing
