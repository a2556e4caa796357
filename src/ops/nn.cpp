// Stub: these ops are not implemented yet; each throws NotImplementedError naming itself.
#include "kiln/kiln.h"

namespace kiln {

Tensor layer_norm(const Tensor& x, IntList normalized_shape, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps) {
  throw NotImplementedError("layer_norm: not implemented yet");
}
Tensor rms_norm(const Tensor& x, IntList normalized_shape, const std::optional<Tensor>& weight, std::optional<double> eps) {
  throw NotImplementedError("rms_norm: not implemented yet");
}
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing, const std::string& reduction) {
  throw NotImplementedError("cross_entropy: not implemented yet");
}
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index, const std::string& reduction) {
  throw NotImplementedError("nll_loss: not implemented yet");
}
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  throw NotImplementedError("mse_loss: not implemented yet");
}
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  throw NotImplementedError("dropout: not implemented yet");
}
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal, std::optional<double> scale, Generator* generator) {
  throw NotImplementedError("scaled_dot_product_attention: not implemented yet");
}

}  // namespace kiln
