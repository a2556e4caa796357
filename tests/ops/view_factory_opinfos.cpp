// Conformance OpInfos for the view ops (view_ops.cpp), the factories (factory.cpp) and the
// Tensor methods built on them. A view's reference is an index map (output multi-index ->
// input multi-index); from it the suite checks the view's values AND that it shares storage:
// values written through the view must appear in the base at the mapped positions (and,
// for the methods that copy, must not).
#include <cmath>
#include <limits>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

using Index = std::vector<int64_t>;
// Output multi-index -> input multi-index.
using IndexMap = std::function<Index(const Index&)>;

// Whether the result must share the input's storage, given the input.
using SharePredicate = std::function<bool(const Tensor&)>;
bool always(const Tensor&) { return true; }
bool never(const Tensor&) { return false; }
bool when_contiguous(const Tensor& x) { return x.is_contiguous(); }
// True when the elements, in row-major order, lie at equally spaced storage offsets: then every
// reshape of the tensor is expressible as a view.
bool evenly_spaced(const Tensor& x) {
  int64_t expect = -1;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    if (x.size(d) == 1) continue;
    if (expect >= 0 && x.stride(d) != expect) return false;
    expect = x.stride(d) * x.size(d);
  }
  return true;
}

struct ViewSpec {
  std::string name;
  std::vector<std::string> covers;
  Index in_sizes;
  Index out_sizes;
  std::function<Tensor(const Tensor&)> call;
  IndexMap src;
  SharePredicate shares = always;
  bool writable = true;                // false for views with self-overlap (expand, stride 0)
  bool contiguous_input_only = false;  // as_strided addresses storage, not logical elements
  std::vector<ErrorCase> errors = {};
  std::string no_gradcheck = {};  // see OpInfo::no_gradcheck
};

Index row_major_index(const Index& sizes, int64_t flat) {
  Index idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return idx;
}
int64_t numel_of(const Index& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}
int64_t ravel(const Index& sizes, const Index& idx) {
  int64_t flat = 0;
  for (size_t d = 0; d < idx.size(); ++d) flat = flat * sizes[d] + idx[d];
  return flat;
}

// The values written through a view: distinct per element (alternating for bool).
double written_value(int64_t j, DType dt) {
  return dt == DType::Bool ? static_cast<double>((j + 1) % 2) : 100.0 + static_cast<double>(j);
}
Tensor written_values(const Index& sizes, DType dt) {
  std::vector<double> v(static_cast<size_t>(numel_of(sizes)));
  for (size_t j = 0; j < v.size(); ++j) v[j] = written_value(static_cast<int64_t>(j), dt);
  return tensor(v, sizes).to(dt);
}

std::vector<Sample> layouts(const Index& sizes, DType dt, bool contiguous_only) {
  std::vector<Sample> s = {{"contiguous", {make_tensor_for_test(sizes, dt, -9, 9)}}};
  if (contiguous_only || sizes.empty()) return s;
  int64_t non_trivial_dims = 0;
  for (int64_t v : sizes) non_trivial_dims += v > 1;
  if (non_trivial_dims >= 2)  // (with fewer, a transposed tensor is still contiguous)
    s.push_back({"transposed", {make_tensor_for_test(sizes, dt, -9, 9, Layout::Transposed)}});
  s.push_back({"strided", {make_tensor_for_test(sizes, dt, -9, 9, Layout::Strided)}});
  return s;
}

// Output 0 is the view's values (checked against the index map); then the test writes distinct
// values through the view and checks, here, that exactly the mapped elements of the base changed
// when the view must share storage, and none when it must not.
void register_view(ViewSpec v) {
  OpInfo info;
  info.name = v.name;
  info.covers = v.covers;
  info.dtypes = kAllDTypes;
  const Index in_sizes = v.in_sizes;
  const bool contiguous_only = v.contiguous_input_only;
  info.samples = [in_sizes, contiguous_only](DType dt) {
    return layouts(in_sizes, dt, contiguous_only);
  };
  const auto call = v.call;
  const SharePredicate shares = v.shares;
  const bool writable = v.writable;
  const Index out_sizes = v.out_sizes;
  const IndexMap src = v.src;
  info.fn = [=](const std::vector<Tensor>& in) {
    Tensor base = in[0];
    const bool expect_share = shares(base);
    Tensor view = call(base);
    Tensor values = view.clone();
    if (view.numel() > 0 && base.numel() > 0) {
      EXPECT_EQ(view.impl()->storage() == base.impl()->storage(), expect_share)
          << "storage sharing of " << view.shape_str() << " with strides "
          << IntList(view.strides());
    }
    // (Writing through a view of a tensor that requires grad is not supported under recording:
    // the gradient checks call this with recorded inputs, and only read the values.)
    if (writable && view.numel() > 0 && !base.requires_grad()) {
      const DType dt = base.dtype();
      std::vector<double> expected = base.to_vector<double>();
      view.copy_(written_values(out_sizes, dt));
      if (expect_share) {
        for (int64_t j = 0; j < numel_of(out_sizes); ++j)
          expected[ravel(in_sizes, src(row_major_index(out_sizes, j)))] =
              cast_to(written_value(j, dt), dt);
      }
      EXPECT_EQ(base.to_vector<double>(), expected) << "the base after writing through the result";
    }
    return std::vector<Tensor>{values};
  };
  info.ref = [=](const std::vector<Ref>& in) {
    Ref values = Ref::zeros(out_sizes, in[0].dtype);
    for (int64_t j = 0; j < values.numel(); ++j)
      values.v[j] = in[0].at(src(row_major_index(out_sizes, j)));
    return std::vector<Ref>{values};
  };
  info.errors = v.errors;
  info.no_gradcheck = v.no_gradcheck;
  RegisterOpInfo{std::move(info)};
}

// ---- index maps ----
IndexMap identity_flat(Index in_sizes, Index out_sizes) {
  return [=](const Index& o) {
    int64_t flat = 0;
    for (size_t d = 0; d < o.size(); ++d) flat = flat * out_sizes[d] + o[d];
    return row_major_index(in_sizes, flat);
  };
}
IndexMap permuted(Index dims) {
  return [=](const Index& o) {
    Index i(o.size());
    for (size_t k = 0; k < dims.size(); ++k) i[dims[k]] = o[k];
    return i;
  };
}
IndexMap expanded(Index in_sizes, Index out_sizes) {
  return [=](const Index& o) {
    const size_t off = out_sizes.size() - in_sizes.size();
    Index i(in_sizes.size());
    for (size_t d = 0; d < in_sizes.size(); ++d) i[d] = in_sizes[d] == 1 ? 0 : o[d + off];
    return i;
  };
}
IndexMap sliced(int64_t dim, int64_t start, int64_t step) {
  return [=](const Index& o) {
    Index i = o;
    i[dim] = start + o[dim] * step;
    return i;
  };
}
IndexMap selected(int64_t dim, int64_t index) {
  return [=](const Index& o) {
    Index i = o;
    i.insert(i.begin() + dim, index);
    return i;
  };
}
// Drops output dims at `added` (size-1 dims a view inserted) and inserts 0 at `removed` (size-1
// input dims it dropped).
IndexMap reshaped_ones(std::vector<int64_t> added, std::vector<int64_t> removed) {
  return [=](const Index& o) {
    Index i;
    for (int64_t d = 0; d < static_cast<int64_t>(o.size()); ++d)
      if (std::find(added.begin(), added.end(), d) == added.end()) i.push_back(o[d]);
    for (int64_t d : removed) i.insert(i.begin() + d, 0);
    return i;
  };
}
IndexMap diag(int64_t offset, int64_t d1, int64_t d2, int64_t ndim) {
  return [=](const Index& o) {
    Index i(static_cast<size_t>(ndim));
    size_t k = 0;
    for (int64_t d = 0; d < ndim; ++d)
      if (d != d1 && d != d2) i[d] = o[k++];
    const int64_t t = o.back();
    i[d1] = t + (offset < 0 ? -offset : 0);
    i[d2] = t + (offset > 0 ? offset : 0);
    return i;
  };
}

const bool kViewsRegistered = [] {
  std::vector<ViewSpec> v;
  // ---- view / reshape ----
  v.push_back({"view",
               {"view"},
               {3, 4},
               {2, 6},
               [](const Tensor& x) {
                 return x.contiguous().view({2, 6});
               },
               identity_flat({3, 4}, {2, 6}),
               when_contiguous,
               true,
               false,
               {expect_error<ShapeError>("view of a transposed tensor", "not compatible",
                                         [] {
                                           ones({3, 4}).t().view({12});
                                         }),
                expect_error<ShapeError>("size mismatch", "invalid for input of size",
                                         [] {
                                           ones({3, 4}).view({5});
                                         }),
                expect_error<ShapeError>("two inferred dims", "only one dimension",
                                         [] {
                                           ones({4}).view({-1, -1});
                                         }),
                expect_error<ShapeError>("negative size", "invalid size", [] {
                  ones({4}).view({-2, -2});
                })}});
  v.push_back({"view_infer",
               {"view"},
               {2, 3, 4},
               {4, 6},
               [](const Tensor& x) {
                 return x.contiguous().view({-1, 6});
               },
               identity_flat({2, 3, 4}, {4, 6}),
               when_contiguous,
               true,
               false,
               {expect_error<ShapeError>("inferred dim that doesn't divide", "invalid", [] {
                 ones({7}).view({-1, 2});
               })}});
  v.push_back({"view_contiguous_input",
               {"view"},
               {2, 3, 4},
               {6, 2, 2},
               [](const Tensor& x) {
                 return x.view({6, 2, 2});
               },
               identity_flat({2, 3, 4}, {6, 2, 2}),
               always,
               true,
               true,
               {expect_error<ShapeError>("zero-size to nonzero", "invalid", [] {
                 ones({0, 3}).view({1});
               })}});
  // A view that merges only the dims a non-contiguous tensor keeps contiguous: [4, 6] sliced to
  // every other row, then [2, 2, 6] -> [2, 12] is possible without a copy ([2, 2] rows are not).
  v.push_back({"view_noncontiguous_compatible",
               {"view", "slice"},
               {2, 3, 8},
               {2, 3, 2, 2},
               [](const Tensor& x) {
                 return x.slice(2, 0, 4).view({2, 3, 2, 2});
               },
               [](const Index& o) {
                 return Index{o[0], o[1], o[2] * 2 + o[3]};
               },
               always,
               true,
               true,
               {expect_error<ShapeError>("merge across a gap", "not compatible", [] {
                 ones({2, 8}).slice(1, 0, 4).view({8});
               })}});
  v.push_back({"view_0d",
               {"view"},
               {},
               {1, 1},
               [](const Tensor& x) {
                 return x.view({1, 1});
               },
               [](const Index&) { return Index{}; },
               always,
               true,
               true,
               {expect_error<ShapeError>("0-d as two elements", "invalid",
                                         [] { scalar_tensor(1).view({2}); })}});
  v.push_back(
      {"view_to_0d",
       {"view"},
       {1, 1},
       {},
       [](const Tensor& x) { return x.view({}); },
       [](const Index&) {
         return Index{0, 0};
       },
       always,
       true,
       false,
       {expect_error<ShapeError>("2 elements as 0-d", "invalid", [] { ones({2}).view({}); })}});
  v.push_back({"reshape",
               {"view"},
               {3, 4},
               {2, 2, 3},
               [](const Tensor& x) {
                 return x.reshape({2, -1, 3});
               },
               identity_flat({3, 4}, {2, 2, 3}),
               evenly_spaced,
               true,
               false,
               {expect_error<ShapeError>("size mismatch", "invalid for input of size", [] {
                 ones({3, 4}).t().reshape({5});
               })}});
  v.push_back({"reshape_copies",
               {"view", "copy"},
               {3, 4},
               {12},
               [](const Tensor& x) { return x.t().reshape({12}); },
               [](const Index& o) {
                 return Index{o[0] % 3, o[0] / 3};
               },
               [](const Tensor& x) { return evenly_spaced(x.t()); },
               true,
               false,
               {expect_error<ShapeError>("two inferred dims", "only one dimension", [] {
                 ones({4}).reshape({-1, -1});
               })}});
  v.push_back({"flatten",
               {"view"},
               {2, 3, 4},
               {2, 12},
               [](const Tensor& x) { return x.flatten(1); },
               identity_flat({2, 3, 4}, {2, 12}),
               evenly_spaced,
               true,
               false,
               {expect_error<ValueError>("start after end", "cannot come after",
                                         [] {
                                           ones({2, 3, 4}).flatten(2, 1);
                                         }),
                expect_error<IndexError>("dim out of range", "out of range", [] {
                  ones({2, 3}).flatten(0, 2);
                })}});
  v.push_back({"flatten_all",
               {"view"},
               {2, 3, 4},
               {24},
               [](const Tensor& x) { return x.flatten(); },
               identity_flat({2, 3, 4}, {24}),
               evenly_spaced,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range",
                                         [] { ones({2}).flatten(-3); })}});
  v.push_back({"flatten_0d",
               {"view"},
               {},
               {1},
               [](const Tensor& x) { return x.flatten(); },
               [](const Index&) { return Index{}; },
               always,
               true,
               true,
               {expect_error<IndexError>("0-d dim out of range", "out of range",
                                         [] { scalar_tensor(1).flatten(0, 1); })}});
  v.push_back({"unflatten",
               {"view"},
               {2, 12},
               {2, 3, 4},
               [](const Tensor& x) {
                 return x.unflatten(1, {3, -1});
               },
               identity_flat({2, 12}, {2, 3, 4}),
               always,
               true,
               false,
               {expect_error<ShapeError>("sizes that don't multiply up", "don't multiply",
                                         [] {
                                           ones({2, 12}).unflatten(1, {5, 2});
                                         }),
                expect_error<ShapeError>("empty sizes", "non-empty", [] {
                  ones({2, 12}).unflatten(1, {});
                })}});
  // ---- permute, transpose, t, mT ----
  v.push_back({"permute",
               {"permute"},
               {2, 3, 4},
               {4, 2, 3},
               [](const Tensor& x) {
                 return x.permute({2, 0, 1});
               },
               permuted({2, 0, 1}),
               always,
               true,
               false,
               {expect_error<ShapeError>("too few dims", "doesn't match",
                                         [] {
                                           ones({2, 3}).permute({0});
                                         }),
                expect_error<IndexError>("repeated dim", "repeats",
                                         [] {
                                           ones({2, 3}).permute({1, 1});
                                         }),
                expect_error<IndexError>("dim out of range", "out of range", [] {
                  ones({2, 3}).permute({0, 2});
                })}});
  v.push_back({"permute_negative",
               {"permute"},
               {2, 3, 4},
               {3, 4, 2},
               [](const Tensor& x) {
                 return x.permute({-2, -1, 0});
               },
               permuted({1, 2, 0}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({2, 3}).permute({-3, 0});
               })}});
  v.push_back({"transpose",
               {"permute"},
               {2, 3, 4},
               {4, 3, 2},
               [](const Tensor& x) { return x.transpose(0, -1); },
               permuted({2, 1, 0}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({2, 3}).transpose(0, 2);
               })}});
  v.push_back({"t",
               {"permute"},
               {3, 5},
               {5, 3},
               [](const Tensor& x) { return x.t(); },
               permuted({1, 0}),
               always,
               true,
               false,
               {expect_error<ShapeError>("3-d", "<= 2 dimensions", [] {
                 ones({2, 3, 4}).t();
               })}});
  v.push_back({"t_1d",
               {"permute"},
               {5},
               {5},
               [](const Tensor& x) { return x.t(); },
               permuted({0}),
               always,
               true,
               false,
               {expect_error<ShapeError>("4-d", "<= 2 dimensions", [] {
                 ones({1, 2, 3, 4}).t();
               })}});
  v.push_back({"mT",
               {"permute"},
               {2, 3, 4},
               {2, 4, 3},
               [](const Tensor& x) { return x.mT(); },
               permuted({0, 2, 1}),
               always,
               true,
               false,
               {expect_error<ShapeError>("1-d", ">= 2 dimensions", [] { ones({3}).mT(); })}});
  // ---- expand ----
  v.push_back(
      {"expand",
       {"expand"},
       {3, 1},
       {2, 3, 4},
       [](const Tensor& x) {
         return x.expand({2, -1, 4});
       },
       expanded({3, 1}, {2, 3, 4}),
       always,
       false,
       false,
       {expect_error<ShapeError>("non-singleton mismatch", "must match",
                                 [] {
                                   ones({3, 1}).expand({4, 4});
                                 }),
        expect_error<ShapeError>("fewer sizes than dims", "greater or equal",
                                 [] {
                                   ones({3, 1}).expand({3});
                                 }),
        expect_error<ShapeError>("-1 in a new leading dim", "not allowed",
                                 [] {
                                   ones({3}).expand({-1, 3});
                                 }),
        expect_error<ShapeError>("negative size", "size", [] { ones({1}).expand({-2}); })}});
  v.push_back({"expand_as",
               {"expand"},
               {4},
               {3, 4},
               [](const Tensor& x) {
                 return x.expand_as(zeros({3, 4}));
               },
               expanded({4}, {3, 4}),
               always,
               false,
               false,
               {expect_error<ShapeError>("mismatch", "must match", [] {
                 ones({4}).expand_as(zeros({4, 3}));
               })}});
  v.push_back({"expand_0d",
               {"expand"},
               {},
               {2, 3},
               [](const Tensor& x) {
                 return x.expand({2, 3});
               },
               [](const Index&) { return Index{}; },
               always,
               false,
               false,
               {expect_error<ShapeError>("expand to zero from 2", "must match",
                                         [] { ones({2}).expand({0}); })}});
  // ---- slice, narrow, select, operator[] ----
  v.push_back({"slice",
               {"slice"},
               {5, 6},
               {5, 2},
               [](const Tensor& x) { return x.slice(1, 1, 5, 2); },
               sliced(1, 1, 2),
               always,
               true,
               false,
               {expect_error<ValueError>("zero step", "step must be positive",
                                         [] { ones({4}).slice(0, 0, 4, 0); }),
                expect_error<IndexError>("dim out of range", "out of range",
                                         [] { ones({4}).slice(1, 0, 4); }),
                expect_error<IndexError>("0-d", "0-d", [] { scalar_tensor(1).slice(0, 0, 1); })}});
  v.push_back({"slice_negative_bounds",
               {"slice"},
               {7, 3},
               {2, 3},
               [](const Tensor& x) { return x.slice(0, -5, -1, 2); },
               sliced(0, 2, 2),
               always,
               true,
               false,
               {expect_error<ValueError>("negative step", "step must be positive",
                                         [] { ones({4}).slice(0, 0, 4, -1); })}});
  v.push_back({"slice_clamped_bounds",
               {"slice"},
               {4, 3},
               {4, 3},
               [](const Tensor& x) { return x.slice(0, -100, 100); },
               sliced(0, 0, 1),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range",
                                         [] { ones({4}).slice(-2); })}});
  v.push_back(
      {"slice_empty",
       {"slice"},
       {4, 3},
       {0, 3},
       [](const Tensor& x) { return x.slice(0, 3, 1); },
       sliced(0, 0, 1),
       always,
       true,
       false,
       {expect_error<IndexError>("dim out of range", "out of range", [] { ones({4}).slice(3); })}});
  v.push_back(
      {"narrow",
       {"slice"},
       {4, 6},
       {4, 3},
       [](const Tensor& x) { return x.narrow(-1, 2, 3); },
       sliced(1, 2, 1),
       always,
       true,
       false,
       {expect_error<IndexError>("past the end", "exceeds", [] { ones({4}).narrow(0, 2, 3); }),
        expect_error<IndexError>("start out of range", "out of range",
                                 [] { ones({4}).narrow(0, 5, 0); }),
        expect_error<IndexError>("0-d", "0-d", [] { scalar_tensor(1).narrow(0, 0, 1); })}});
  v.push_back({"narrow_negative_start",
               {"slice"},
               {6},
               {2},
               [](const Tensor& x) { return x.narrow(0, -3, 2); },
               sliced(0, 3, 1),
               always,
               true,
               false,
               {expect_error<IndexError>("negative length", "must be non-negative",
                                         [] { ones({4}).narrow(0, 0, -1); })}});
  v.push_back({"select",
               {"select"},
               {3, 4, 5},
               {3, 5},
               [](const Tensor& x) { return x.select(1, 2); },
               selected(1, 2),
               always,
               true,
               false,
               {expect_error<IndexError>("index out of range", "out of bounds",
                                         [] {
                                           ones({3, 4}).select(1, 4);
                                         }),
                expect_error<IndexError>("negative index out of range", "out of bounds",
                                         [] {
                                           ones({3, 4}).select(0, -4);
                                         }),
                expect_error<IndexError>("0-d", "0-d", [] { scalar_tensor(1).select(0, 0); }),
                expect_error<IndexError>("dim out of range", "out of range",
                                         [] { ones({3}).select(1, 0); })}});
  v.push_back({"select_negative",
               {"select"},
               {3, 4},
               {3},
               [](const Tensor& x) { return x.select(-1, -1); },
               selected(1, 3),
               always,
               true,
               false,
               {expect_error<IndexError>("index out of range", "out of bounds", [] {
                 ones({3, 4}).select(-1, 4);
               })}});
  v.push_back({"index_operator",
               {"select"},
               {3, 4},
               {4},
               [](const Tensor& x) { return x[1]; },
               selected(0, 1),
               always,
               true,
               false,
               {expect_error<IndexError>("index out of range", "out of bounds", [] {
                 ones({3, 4})[3];
               })}});
  // ---- squeeze, unsqueeze ----
  v.push_back({"squeeze",
               {"squeeze"},
               {1, 3, 1, 4},
               {3, 4},
               [](const Tensor& x) { return x.squeeze(); },
               reshaped_ones({}, {0, 2}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({1, 3}).squeeze(2);
               })}});
  v.push_back({"squeeze_dim",
               {"squeeze"},
               {1, 3, 1, 4},
               {1, 3, 4},
               [](const Tensor& x) { return x.squeeze(-2); },
               reshaped_ones({}, {2}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({1, 3}).squeeze(-3);
               })}});
  v.push_back({"squeeze_non_singleton",
               {"squeeze"},
               {2, 3},
               {2, 3},
               [](const Tensor& x) { return x.squeeze(1); },
               reshaped_ones({}, {}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({2, 3}).squeeze(5);
               })}});
  v.push_back({"unsqueeze",
               {"unsqueeze"},
               {3, 4},
               {3, 1, 4},
               [](const Tensor& x) { return x.unsqueeze(1); },
               reshaped_ones({1}, {}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({3, 4}).unsqueeze(3);
               })}});
  v.push_back({"unsqueeze_last",
               {"unsqueeze"},
               {3, 4},
               {3, 4, 1},
               [](const Tensor& x) { return x.unsqueeze(-1); },
               reshaped_ones({2}, {}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({3, 4}).unsqueeze(-4);
               })}});
  v.push_back({"unsqueeze_0d",
               {"unsqueeze"},
               {},
               {1},
               [](const Tensor& x) { return x.unsqueeze(0); },
               reshaped_ones({0}, {}),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range",
                                         [] { scalar_tensor(1).unsqueeze(2); })}});
  // ---- as_strided (storage-relative: contiguous inputs) ----
  v.push_back(
      {"as_strided",
       {"as_strided"},
       {4, 5},
       {3, 2},
       [](const Tensor& x) {
         return x.as_strided({3, 2}, {6, 2}, 1);
       },
       [](const Index& o) {
         return row_major_index({4, 5}, 1 + o[0] * 6 + o[1] * 2);
       },
       always,
       true,
       true,
       {expect_error<IndexError>("out of bounds", "out of bounds",
                                 [] {
                                   ones({4, 5}).as_strided({4, 5}, {5, 1}, 1);
                                 }),
        expect_error<ValueError>("negative size", "negative size",
                                 [] { ones({4}).as_strided({-1}, {1}); }),
        expect_error<ValueError>("negative stride", "negative stride",
                                 [] { ones({4}).as_strided({2}, {-1}); }),
        expect_error<ShapeError>("length mismatch", "same length",
                                 [] {
                                   ones({4}).as_strided({2}, {1, 1});
                                 }),
        expect_error<IndexError>(
            "stride overflowing int64", "out of bounds",
            [] { ones({4}).as_strided({3}, {std::numeric_limits<int64_t>::max() / 2 + 1}); }),
        expect_error<IndexError>(
            "size overflowing int64", "out of bounds",
            [] {
              ones({4}).as_strided({std::numeric_limits<int64_t>::max(), 2}, {1, 2});
            }),
        expect_error<ValueError>("negative offset", "negative storage offset",
                                 [] { ones({4}).as_strided({2}, {1}, -1); })}});
  v.push_back({"as_strided_overlapping",
               {"as_strided"},
               {6},
               {3, 3},
               [](const Tensor& x) {
                 return x.as_strided({3, 3}, {1, 1});
               },
               [](const Index& o) { return Index{o[0] + o[1]}; },
               always,
               false,
               true,
               {expect_error<IndexError>("past the end", "out of bounds", [] {
                 ones({6}).as_strided({3, 3}, {2, 1});
               })}});
  v.push_back({"as_strided_keeps_offset",
               {"as_strided", "slice"},
               {10},
               {2, 2},
               [](const Tensor& x) {
                 return x.slice(0, 3).as_strided({2, 2}, {3, 1});
               },
               [](const Index& o) { return Index{3 + o[0] * 3 + o[1]}; },
               always,
               true,
               true,
               {expect_error<IndexError>("offset past the end", "out of bounds",
                                         [] { ones({4}).as_strided({1}, {1}, 4); })}});
  v.push_back({"as_strided_empty",
               {"as_strided"},
               {4},
               {0, 3},
               [](const Tensor& x) {
                 return x.as_strided({0, 3}, {100, 100});
               },
               [](const Index& o) { return o; },
               always,
               true,
               true,
               {expect_error<IndexError>("out of bounds", "out of bounds",
                                         [] { ones({4}).as_strided({2}, {4}); })}});
  // ---- diagonal ----
  v.push_back({"diagonal",
               {"diagonal"},
               {4, 5},
               {4},
               [](const Tensor& x) { return x.diagonal(); },
               diag(0, 0, 1, 2),
               always,
               true,
               false,
               {expect_error<ShapeError>("1-d", "at least 2 dims", [] { ones({3}).diagonal(); }),
                expect_error<ValueError>("same dims", "cannot be the same", [] {
                  ones({3, 3}).diagonal(0, 1, 1);
                })}});
  v.push_back({"diagonal_offset",
               {"diagonal"},
               {4, 5},
               {3},
               [](const Tensor& x) { return x.diagonal(2); },
               diag(2, 0, 1, 2),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({3, 3}).diagonal(0, 0, 2);
               })}});
  v.push_back(
      {"diagonal_negative_offset",
       {"diagonal"},
       {4, 5},
       {3},
       [](const Tensor& x) { return x.diagonal(-1); },
       diag(-1, 0, 1, 2),
       always,
       true,
       false,
       {expect_error<ShapeError>("0-d", "at least 2 dims", [] { scalar_tensor(1).diagonal(); })}});
  v.push_back({"diagonal_offset_past_end",
               {"diagonal"},
               {4, 5},
               {0},
               [](const Tensor& x) { return x.diagonal(7); },
               diag(7, 0, 1, 2),
               always,
               true,
               false,
               {expect_error<ValueError>("same dims (negative)", "cannot be the same", [] {
                 ones({3, 3}).diagonal(0, -1, 1);
               })}});
  v.push_back({"diagonal_batched",
               {"diagonal"},
               {3, 2, 4},
               {2, 3},
               [](const Tensor& x) { return x.diagonal(0, 2, 0); },
               diag(0, 2, 0, 3),
               always,
               true,
               false,
               {expect_error<IndexError>("dim out of range", "out of range", [] {
                 ones({3, 3}).diagonal(0, 0, -3);
               })}});
  // ---- contiguous / clone ----
  v.push_back({"contiguous",
               {"copy"},
               {3, 4},
               {3, 4},
               [](const Tensor& x) {
                 Tensor c = x.contiguous();
                 EXPECT_TRUE(c.is_contiguous());
                 if (x.is_contiguous()) {
                   EXPECT_TRUE(c.is_same(x));
                 }
                 return c;
               },
               [](const Index& o) { return o; },
               when_contiguous,
               true,
               false,
               {expect_error<ShapeError>("contiguous copy then a bad view", "invalid", [] {
                 zeros({2, 3}).t().contiguous().view({7});
               })}});
  v.push_back({"clone",
               {"to_copy"},
               {3, 4},
               {3, 4},
               [](const Tensor& x) {
                 Tensor c = x.clone();
                 EXPECT_TRUE(c.is_contiguous());
                 EXPECT_FALSE(c.is_same(x));
                 return c;
               },
               [](const Index& o) { return o; },
               never,
               true,
               false,
               {expect_error<Error>("undefined tensor", "undefined", [] { Tensor().clone(); })}});
  v.push_back({"detach",
               {"view"},
               {3, 4},
               {3, 4},
               [](const Tensor& x) { return x.detach(); },
               [](const Index& o) { return o; },
               always,
               true,
               false,
               {expect_error<ShapeError>("detach then bad view", "invalid",
                                         [] { ones({3}).detach().view({2}); })},
               "detach cuts the graph: its result has no gradient by design"});
  for (ViewSpec& s : v) register_view(std::move(s));
  return true;
}();

// Tensor::clone / contiguous / undefined tensors go through dispatch, which must reject an
// undefined input; that case needs the dispatch's own message.
const bool kToDtypeRegistered = [] {
  OpInfo info;
  info.name = "to_dtype";
  info.covers = {"to_copy"};
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) {
    auto s = layouts({3, 4}, dt, false);
    s.push_back(
        {"special",
         {tensor(std::vector<double>{0.0, -0.0, 0.5, -0.5, 1.75, -1.75, 3.0, 1e9}).to(dt)}});
    s.push_back({"0-d", {make_tensor_for_test({}, dt, -9, 9)}});
    s.push_back({"empty", {make_tensor_for_test({0, 2}, dt)}});
    return s;
  };
  info.fn = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> out;
    for (DType d : kAllDTypes) {
      Tensor t = in[0].to(d);
      if (d == in[0].dtype()) {
        EXPECT_TRUE(t.is_same(in[0])) << "to() of the same dtype returns the tensor itself";
      } else {
        EXPECT_TRUE(t.is_contiguous());
      }
      out.push_back(t);
      out.push_back(to_dtype(in[0], d));
    }
    return out;
  };
  info.ref = [](const std::vector<Ref>& in) {
    std::vector<Ref> out;
    for (DType d : kAllDTypes) {
      Ref r = map(in[0], d, [d](double x) { return cast_to(x, d); });
      out.push_back(r);
      out.push_back(r);
    }
    return out;
  };
  info.errors.push_back(
      expect_error<Error>("undefined tensor", "undefined", [] { Tensor().to(DType::Int32); }));
  RegisterOpInfo{std::move(info)};
  return true;
}();

// ================================ factories ================================
// The factories take no tensor input: each sample passes a 0-d "dtype carrier" tensor whose
// dtype is the one to create.

Tensor carrier(DType dt) { return zeros({}, dt); }

struct FactoryCase {
  std::function<Tensor(DType)> make;
  Index sizes;
  std::function<double(int64_t)> value;       // element i (row-major) before the cast to the dtype
  std::optional<DType> dtype = std::nullopt;  // when the factory picks its own dtype
};

void register_factory(std::string name, std::string covers, std::vector<DType> dtypes,
                      std::vector<FactoryCase> cases, std::vector<ErrorCase> errors) {
  OpInfo info;
  info.name = name;
  info.covers = {covers};
  info.dtypes = dtypes;
  info.samples = [](DType dt) {
    return std::vector<Sample>{{"dtype " + std::string(dtype_name(dt)), {carrier(dt)}}};
  };
  info.fn = [cases](const std::vector<Tensor>& in) {
    std::vector<Tensor> out;
    for (const FactoryCase& c : cases) {
      Tensor t = c.make(in[0].dtype());
      EXPECT_TRUE(t.is_contiguous());
      out.push_back(t);
    }
    return out;
  };
  info.ref = [cases](const std::vector<Ref>& in) {
    std::vector<Ref> out;
    for (const FactoryCase& c : cases) {
      const DType dt = c.dtype.value_or(in[0].dtype);
      Ref r = Ref::zeros(c.sizes, dt);
      for (int64_t i = 0; i < r.numel(); ++i) r.v[i] = cast_to(c.value(i), dt);
      out.push_back(r);
    }
    return out;
  };
  info.errors = std::move(errors);
  RegisterOpInfo{std::move(info)};
}

const bool kFactoriesRegistered = [] {
  auto constant = [](double v) { return [v](int64_t) { return v; }; };
  register_factory(
      "full", "full", kAllDTypes,
      {
          {[](DType d) {
             return zeros({2, 3}, d);
           },
           {2, 3},
           constant(0)},
          {[](DType d) { return ones({4}, d); }, {4}, constant(1)},
          {[](DType d) { return ones({}, d); }, {}, constant(1)},
          {[](DType d) {
             return zeros({3, 0, 2}, d);
           },
           {3, 0, 2},
           constant(0)},
          {[](DType d) {
             return full({2, 2}, -7.5, d);
           },
           {2, 2},
           constant(-7.5)},
          {[](DType d) { return full({3}, 42, d); }, {3}, constant(42)},
          {[](DType d) { return full({3}, true, d); }, {3}, constant(1)},
          {[](DType d) {
             return full({500, 300}, 3, d);
           },
           {500, 300},
           constant(3)},
          {[](DType d) {
             return zeros_like(zeros({2, 5}, d));
           },
           {2, 5},
           constant(0)},
          {[](DType d) {
             return ones_like(zeros({2, 5}).t(), d);
           },
           {5, 2},
           constant(1)},
          {[](DType d) { return full_like(zeros({3}, DType::Float64), 2.5, d); },
           {3},
           constant(2.5)},
          {[](DType d) { return scalar_tensor(-3, d); }, {}, constant(-3)},
          // dtype inferred from the value: float -> float32, int -> int64, bool -> bool
          {[](DType) { return full({2}, 1.5); }, {2}, constant(1.5), DType::Float32},
          {[](DType) { return full({2}, 3); }, {2}, constant(3), DType::Int64},
          {[](DType) { return full({2}, false); }, {2}, constant(0), DType::Bool},
          {[](DType) { return zeros({2}); }, {2}, constant(0), DType::Float32},
          {[](DType) { return scalar_tensor(2.5); }, {}, constant(2.5), DType::Float32},
          {[](DType) { return full_like(zeros({2}, DType::Int32), 7); },
           {2},
           constant(7),
           DType::Int32},
      },
      {expect_error<ValueError>("negative size", "non-negative",
                                [] {
                                  zeros({2, -1});
                                }),
       expect_error<ValueError>("negative size (full)", "non-negative", [] { full({-3}, 1.0); }),
       expect_error<ValueError>("overflowing numel", "overflows", [] {
         zeros({int64_t{1} << 40, int64_t{1} << 40});
       })});

  register_factory(
      "arange", "arange", kNumericDTypes,
      {
          {[](DType d) { return arange(5, d); }, {5}, [](int64_t i) { return double(i); }},
          {[](DType d) { return arange(1, 10, 3, d); }, {3}, [](int64_t i) { return 1.0 + 3 * i; }},
          {[](DType d) { return arange(10, 0, -3, d); },
           {4},
           [](int64_t i) { return 10.0 - 3 * i; }},
          {[](DType d) { return arange(-4, 4, 1, d); }, {8}, [](int64_t i) { return -4.0 + i; }},
          {[](DType d) { return arange(5, 5, 1, d); }, {0}, [](int64_t i) { return 0.0; }},
          {[](DType d) { return arange(0, 1000, 1, d); },
           {1000},
           [](int64_t i) { return double(i); }},
          // Integer dtypes get the float values truncated.
          {[](DType d) { return arange(-1.5, 2.5, 0.5, d); },
           {8},
           [](int64_t i) { return -1.5 + 0.5 * i; }},
          {[](DType) { return arange(5); }, {5}, [](int64_t i) { return double(i); }, DType::Int64},
          {[](DType) { return arange(1, 4); },
           {3},
           [](int64_t i) { return 1.0 + i; },
           DType::Int64},
          {[](DType) { return arange(0, 1, 0.1); },
           {10},
           [](int64_t i) { return 0.1 * i; },
           DType::Float32},
          {[](DType) { return arange(0.0, 1.0, 0.3); },
           {4},
           [](int64_t i) { return 0.3 * i; },
           DType::Float32},
          {[](DType) { return arange(2.5); },
           {3},
           [](int64_t i) { return double(i); },
           DType::Float32},
          {[](DType) { return arange(1, 2, 0.25, DType::Float64); },
           {4},
           [](int64_t i) { return 1 + 0.25 * i; },
           DType::Float64},
      },
      {expect_error<ValueError>("zero step", "step must be nonzero", [] { arange(0, 5, 0); }),
       expect_error<ValueError>("step away from end", "inconsistent", [] { arange(0, 5, -1); }),
       expect_error<ValueError>("infinite end", "finite",
                                [] { arange(0.0, std::numeric_limits<double>::infinity()); }),
       expect_error<DTypeError>("bool dtype", "bool", [] { arange(3, DType::Bool); })});

  register_factory(
      "linspace", "linspace", kNumericDTypes,
      {
          {[](DType d) { return linspace(0, 10, 6, d); }, {6}, [](int64_t i) { return 2.0 * i; }},
          {[](DType d) { return linspace(-4, 4, 9, d); }, {9}, [](int64_t i) { return -4.0 + i; }},
          {[](DType d) { return linspace(5, -5, 3, d); },
           {3},
           [](int64_t i) { return 5.0 - 5 * i; }},
          {[](DType d) { return linspace(3, 7, 1, d); }, {1}, [](int64_t) { return 3.0; }},
          {[](DType d) { return linspace(3, 7, 0, d); }, {0}, [](int64_t) { return 0.0; }},
          {[](DType) { return linspace(0, 1, 7); },
           {7},
           [](int64_t i) { return i / 6.0; },
           DType::Float32},
          {[](DType) { return linspace(-2.5, 1.25, 1001, DType::Float64); },
           {1001},
           [](int64_t i) { return -2.5 + 3.75 * i / 1000.0; },
           DType::Float64},
      },
      {expect_error<ValueError>("negative steps", "non-negative", [] { linspace(0, 1, -1); }),
       expect_error<DTypeError>("bool dtype", "bool", [] { linspace(0, 1, 3, DType::Bool); })});

  auto eye_value = [](int64_t n, int64_t m) {
    return [m](int64_t i) { return i / m == i % m ? 1.0 : 0.0; };
  };
  register_factory(
      "eye", "eye", kAllDTypes,
      {
          {[](DType d) { return eye(3, std::nullopt, d); }, {3, 3}, eye_value(3, 3)},
          {[](DType d) { return eye(2, 4, d); }, {2, 4}, eye_value(2, 4)},
          {[](DType d) { return eye(4, 2, d); }, {4, 2}, eye_value(4, 2)},
          {[](DType d) { return eye(0, std::nullopt, d); }, {0, 0}, eye_value(0, 1)},
          {[](DType d) { return eye(3, 0, d); }, {3, 0}, eye_value(3, 1)},
          {[](DType d) { return eye(300, std::nullopt, d); }, {300, 300}, eye_value(300, 300)},
          {[](DType) { return eye(2); }, {2, 2}, eye_value(2, 2), DType::Float32},
      },
      {expect_error<ValueError>("negative n", "non-negative", [] { eye(-1); }),
       expect_error<ValueError>("negative m", "non-negative", [] { eye(2, -2); })});
  return true;
}();

// tensor() / from_blob copy host data; checked through the factories' values.
const bool kHostDataRegistered = [] {
  OpInfo info;
  info.name = "tensor_from_host_data";
  info.covers = {"copy"};
  info.no_gradcheck = "the input only picks the dtype: the outputs are constants";
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) { return std::vector<Sample>{{"carrier", {carrier(dt)}}}; };
  info.fn = [](const std::vector<Tensor>& in) {
    const DType dt = in[0].dtype();
    std::vector<double> host = {1, 0, -2, 3.5};
    Tensor a = tensor(host, {2, 2}).to(dt);
    host[0] = 99;  // the tensor holds a copy
    Tensor b = tensor({1.0, 2.0, 3.0}, dt);
    Tensor c = tensor({4, -5, 6}, dt);
    return std::vector<Tensor>{a, b, c};
  };
  info.ref = [](const std::vector<Ref>& in) {
    const DType dt = in[0].dtype;
    auto r = [dt](std::vector<int64_t> s, std::vector<double> v) {
      Ref x{s, v, dt};
      for (double& e : x.v) e = cast_to(e, dt);
      return x;
    };
    return std::vector<Ref>{r({2, 2}, {1, 0, -2, 3.5}), r({3}, {1, 2, 3}), r({3}, {4, -5, 6})};
  };
  info.errors.push_back(
      expect_error<ShapeError>("values that don't fill the shape", "cannot fill", [] {
        tensor(std::vector<float>{1, 2, 3}, {2, 2});
      }));
  info.errors.push_back(expect_error<ValueError>("null data", "null",
                                                 [] { from_blob(nullptr, {2}, DType::Float32); }));
  RegisterOpInfo{std::move(info)};
  return true;
}();

}  // namespace
}  // namespace kiln::testing
