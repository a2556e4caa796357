// Ref: a float64 reference tensor (row-major values + sizes + the dtype the result should
// have), and straightforward loops over it. The conformance suite checks every Kiln op against
// a reference written with these, never with Kiln's own kernels.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

struct Ref {
  std::vector<int64_t> sizes;
  std::vector<double> v;
  DType dtype = DType::Float64;
  bool wrapped = false;  // stands for a C++ number (promotes by category only)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  static Ref of(const Tensor& t) {
    return {t.sizes().vec(), t.to_vector<double>(), t.dtype(), t.impl()->is_wrapped_number()};
  }
  static Ref zeros(std::vector<int64_t> sizes, DType dtype) {
    Ref r{std::move(sizes), {}, dtype};
    r.v.assign(static_cast<size_t>(r.numel()), 0.0);
    return r;
  }
  // Row-major strides of `sizes`.
  std::vector<int64_t> strides() const {
    std::vector<int64_t> s(sizes.size(), 1);
    for (int64_t d = dim() - 2; d >= 0; --d) s[d] = s[d + 1] * sizes[d + 1];
    return s;
  }
  // Multi-index of flat position i.
  std::vector<int64_t> unravel(int64_t i) const {
    std::vector<int64_t> idx(sizes.size());
    for (int64_t d = dim() - 1; d >= 0; --d) {
      idx[d] = sizes[d] ? i % sizes[d] : 0;
      i = sizes[d] ? i / sizes[d] : 0;
    }
    return idx;
  }
  int64_t ravel(const std::vector<int64_t>& idx) const {
    int64_t off = 0;
    auto st = strides();
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
    return off;
  }
  double at(const std::vector<int64_t>& idx) const { return v[static_cast<size_t>(ravel(idx))]; }
};

// Rounds/casts a double the way storing it into `dtype` would.
inline double cast_to(double x, DType dt) {
  switch (dt) {
    case DType::Bool:
      return x != 0 ? 1.0 : 0.0;
    case DType::Int32:
      return static_cast<double>(static_cast<int32_t>(x));
    case DType::Int64:
      return static_cast<double>(static_cast<int64_t>(x));
    case DType::Float32:
      return static_cast<double>(static_cast<float>(x));
    case DType::Float64:
      return x;
  }
  return x;
}

// Broadcast shape of several shapes (assumes they broadcast).
inline std::vector<int64_t> broadcast(const std::vector<const Ref*>& ins) {
  int64_t nd = 0;
  for (auto* r : ins) nd = std::max(nd, r->dim());
  std::vector<int64_t> out(static_cast<size_t>(nd), 1);
  for (auto* r : ins)
    for (int64_t d = 0; d < r->dim(); ++d) {
      int64_t od = nd - r->dim() + d;
      if (r->sizes[d] != 1) out[od] = r->sizes[d];
    }
  return out;
}

// out[i] = f(ins[i]...) with broadcasting; the result has dtype `out_dtype`.
inline Ref zip(const std::vector<Ref>& ins, DType out_dtype,
               const std::function<double(const std::vector<double>&)>& f) {
  std::vector<const Ref*> ptrs;
  for (auto& r : ins) ptrs.push_back(&r);
  Ref out = Ref::zeros(broadcast(ptrs), out_dtype);
  std::vector<double> args(ins.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = out.unravel(i);
    for (size_t k = 0; k < ins.size(); ++k) {
      const Ref& r = ins[k];
      std::vector<int64_t> ri(static_cast<size_t>(r.dim()));
      for (int64_t d = 0; d < r.dim(); ++d)
        ri[d] = r.sizes[d] == 1 ? 0 : idx[out.dim() - r.dim() + d];
      args[k] = r.at(ri);
    }
    out.v[i] = f(args);
  }
  return out;
}
inline Ref map(const Ref& a, DType out_dtype, const std::function<double(double)>& f) {
  return zip({a}, out_dtype, [&](const std::vector<double>& x) { return f(x[0]); });
}

// Reduces `dims` (empty = all) of a: for every output element, `f` receives the values of
// the reduced slice in row-major order.
inline Ref reduce(const Ref& a, std::vector<int64_t> dims, bool keepdim, DType out_dtype,
                  const std::function<double(const std::vector<double>&)>& f) {
  const int64_t nd = a.dim();
  std::vector<bool> red(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  std::vector<int64_t> kept_sizes;  // with size 1 at reduced dims
  for (int64_t d = 0; d < nd; ++d) kept_sizes.push_back(red[d] ? 1 : a.sizes[d]);
  Ref keep = Ref::zeros(kept_sizes, out_dtype);
  std::vector<std::vector<double>> slices(static_cast<size_t>(keep.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = a.unravel(i);
    for (int64_t d = 0; d < nd; ++d)
      if (red[d]) idx[d] = 0;
    slices[static_cast<size_t>(keep.ravel(idx))].push_back(a.v[i]);
  }
  for (int64_t o = 0; o < keep.numel(); ++o) keep.v[o] = f(slices[o]);
  if (!keepdim) {
    std::vector<int64_t> s;
    for (int64_t d = 0; d < nd; ++d)
      if (!red[d]) s.push_back(a.sizes[d]);
    keep.sizes = s;
  }
  return keep;
}

}  // namespace kiln::testing
