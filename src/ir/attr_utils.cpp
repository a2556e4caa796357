// Small helpers over Attrs shared by the IR and the capture layer.
#include "ir/attr_utils.h"

#include <bit>

#include "kiln/core/tensor.h"

namespace kiln::ir {

Attrs with_attr(const Attrs& attrs, size_t k, AttrValue value) {
  Attrs out;
  for (size_t a = 0; a < attrs.size(); ++a) out.push_back(a == k ? value : attrs[a]);
  return out;
}

bool same_attr(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a))
    return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  if (const Scalar* x = std::get_if<Scalar>(&a)) {
    const Scalar& y = std::get<Scalar>(b);
    if (x->dtype() != y.dtype()) return false;
    return x->is_floating()
               ? std::bit_cast<uint64_t>(x->to_double()) == std::bit_cast<uint64_t>(y.to_double())
               : x->to_int() == y.to_int();
  }
  return a == b;
}

bool as_strided_attrs_at(const Graph& g, const Node& n, std::span<const Tensor> inputs,
                         Attrs& moved) {
  static const OpDef* const as_strided = find_op("as_strided");
  if (n.op != as_strided || !n.attrs.has(2)) return false;
  const int64_t shift = inputs[0].storage_offset() - g.info(n.inputs[0]).storage_offset;
  if (shift == 0) return false;
  moved = with_attr(n.attrs, 2, n.attrs.i(2) + shift);
  return true;
}

}  // namespace kiln::ir
