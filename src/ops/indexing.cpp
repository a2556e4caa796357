// Stub: these ops are not implemented yet; each throws NotImplementedError naming itself.
#include "kiln/kiln.h"

namespace kiln {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  throw NotImplementedError("cat: not implemented yet");
}
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  throw NotImplementedError("stack: not implemented yet");
}
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  throw NotImplementedError("split: not implemented yet");
}
std::vector<Tensor> split(const Tensor& x, IntList split_sizes, int64_t dim) {
  throw NotImplementedError("split: not implemented yet");
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  throw NotImplementedError("chunk: not implemented yet");
}
std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  throw NotImplementedError("unbind: not implemented yet");
}
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  throw NotImplementedError("index_select: not implemented yet");
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  throw NotImplementedError("gather: not implemented yet");
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  throw NotImplementedError("scatter: not implemented yet");
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  throw NotImplementedError("scatter: not implemented yet");
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  throw NotImplementedError("scatter_add: not implemented yet");
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha) {
  throw NotImplementedError("index_add: not implemented yet");
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  throw NotImplementedError("scatter_: not implemented yet");
}
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  throw NotImplementedError("scatter_add_: not implemented yet");
}
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha) {
  throw NotImplementedError("index_add_: not implemented yet");
}
Tensor masked_select(const Tensor& x, const Tensor& mask) {
  throw NotImplementedError("masked_select: not implemented yet");
}
Tensor nonzero(const Tensor& x) {
  throw NotImplementedError("nonzero: not implemented yet");
}
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  throw NotImplementedError("embedding: not implemented yet");
}
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  throw NotImplementedError("one_hot: not implemented yet");
}
Tensor tril(const Tensor& x, int64_t diagonal) {
  throw NotImplementedError("tril: not implemented yet");
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  throw NotImplementedError("triu: not implemented yet");
}
Tensor repeat(const Tensor& x, IntList repeats) {
  throw NotImplementedError("repeat: not implemented yet");
}
Tensor flip(const Tensor& x, IntList dims) {
  throw NotImplementedError("flip: not implemented yet");
}
Tensor roll(const Tensor& x, IntList shifts, IntList dims) {
  throw NotImplementedError("roll: not implemented yet");
}
Tensor pad(const Tensor& x, IntList pad, const Scalar& value) {
  throw NotImplementedError("pad: not implemented yet");
}
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  throw NotImplementedError("sort: not implemented yet");
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  throw NotImplementedError("argsort: not implemented yet");
}
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  throw NotImplementedError("topk: not implemented yet");
}

}  // namespace kiln
