// OpInfos of the ops that graph capture records on its own: as_strided_scatter, the functional
// form of a write through a view.
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

// The region [3, 2] with strides [6, 2] from element 1 of a [4, 5] tensor read as contiguous.
const std::vector<int64_t> kRegion = {3, 2}, kStrides = {6, 2};
constexpr int64_t kOffset = 1;

Tensor scatter(const Tensor& self, const Tensor& src) {
  const Tensor ins[] = {self, src};
  return dispatch1(*find_op("as_strided_scatter"), ins, Attrs{kRegion, kStrides, kOffset});
}

KILN_OPINFO(OpInfo{
    .name = "as_strided_scatter",
    .covers = {"as_strided_scatter"},
    .dtypes = kAllDTypes,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{
              {"region of a [4, 5]",
               {make_tensor_for_test({4, 5}, dt),
                make_tensor_for_test({3, 2}, dt, -5, 5, Layout::Contiguous, 1)}},
              {"transposed self and src",
               {make_tensor_for_test({4, 5}, dt, -5, 5, Layout::Transposed),
                make_tensor_for_test({3, 2}, dt, -5, 5, Layout::Transposed, 2)}},
          };
        },
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{scatter(in[0], in[1])}; },
    .ref =
        [](const std::vector<Ref>& in) {
          Ref out = in[0];
          for (int64_t i = 0; i < kRegion[0]; ++i)
            for (int64_t j = 0; j < kRegion[1]; ++j)
              out.v[static_cast<size_t>(kOffset + i * kStrides[0] + j * kStrides[1])] =
                  in[1].v[static_cast<size_t>(i * kRegion[1] + j)];
          return std::vector<Ref>{out};
        },
    .errors = {expect_error<ShapeError>("src shape", "region has shape",
                                        [] {
                                          scatter(ones({4, 5}), ones({2, 2}));
                                        }),
               expect_error<IndexError>("out of bounds", "reaches element",
                                        [] {
                                          scatter(ones({2, 5}), ones({3, 2}));
                                        }),
               expect_error<DTypeError>("unsafe cast", "can't be cast",
                                        [] {
                                          scatter(ones({4, 5}, DType::Int64), ones({3, 2}));
                                        })},
    .differentiable = true,
});

}  // namespace
}  // namespace kiln::testing
