// Stub: these ops are not implemented yet; each throws NotImplementedError naming itself.
#include "kiln/kiln.h"

namespace kiln {

Tensor softmax(const Tensor& x, int64_t dim) {
  throw NotImplementedError("softmax: not implemented yet");
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  throw NotImplementedError("log_softmax: not implemented yet");
}

}  // namespace kiln
