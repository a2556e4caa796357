// Whether a strided layout reaches some element through two different indices (an expanded
// dim, or overlapping windows made with as_strided). Writing into such a tensor is ill-defined:
// the result depends on the order the kernel visits elements, which differs between eager and
// generated code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/core/small_vector.h"

namespace kiln {

enum class Overlap {
  kNone,      // every index addresses its own element
  kExpanded,  // a dim of size > 1 with stride 0
  kStrided,   // other dims' strides make two indices meet (or the layout is too large to tell)
};

inline Overlap internal_overlap(IntList sizes, IntList strides) {
  struct Dim {
    int64_t size, stride;
  };
  SmallVector<Dim, 8> dims;
  for (int64_t d = 0; d < sizes.ssize(); ++d) {
    if (sizes[d] == 0) return Overlap::kNone;  // no elements
    if (sizes[d] == 1) continue;
    if (strides[d] == 0) return Overlap::kExpanded;
    dims.push_back({sizes[d], strides[d] < 0 ? -strides[d] : strides[d]});
  }
  // Sufficient: with dims in increasing stride, each stride beyond the span of the ones before.
  std::sort(dims.begin(), dims.end(),
            [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  int64_t span = 0;
  bool nested = true;
  for (const Dim& d : dims) {
    nested = nested && d.stride > span;
    span += d.stride * (d.size - 1);
  }
  if (nested) return Overlap::kNone;
  // Otherwise count: mark every element's offset (rare layouts, e.g. sizes [3, 2] strides
  // [2, 3], which do not overlap; or as_strided windows, which do).
  int64_t numel = 1;
  for (const Dim& d : dims) numel *= d.size;
  if (numel > span + 1) return Overlap::kStrided;            // more indices than offsets
  if (span >= (int64_t{1} << 26)) return Overlap::kStrided;  // too large to tell: assume so
  std::vector<bool> seen(static_cast<size_t>(span + 1));
  SmallVector<int64_t, 8> index;
  for (size_t k = 0; k < dims.size(); ++k) index.push_back(0);
  int64_t offset = 0;
  for (int64_t n = 0; n < numel; ++n) {
    if (seen[static_cast<size_t>(offset)]) return Overlap::kStrided;
    seen[static_cast<size_t>(offset)] = true;
    for (size_t k = 0; k < dims.size(); ++k) {  // the next index, smallest stride fastest
      if (++index[k] < dims[k].size) {
        offset += dims[k].stride;
        break;
      }
      offset -= dims[k].stride * (dims[k].size - 1);
      index[k] = 0;
    }
  }
  return Overlap::kNone;
}

}  // namespace kiln
