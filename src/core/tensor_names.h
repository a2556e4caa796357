// Names for tensors the user knows by a name — a module's parameters and buffers
// ("blocks.0.attn.w_q"), an optimizer's state ("Adam.state[fc1.weight].exp_avg") — so that
// diagnostics (recompile reasons) can say which tensor they mean rather than a graph input
// number. A name does not keep its tensor alive and goes away with it.
#pragma once

#include <string>

#include "kiln/core/tensor.h"

namespace kiln::detail {

struct TensorName {
  std::string kind;  // "parameter", "buffer", "optimizer state"
  std::string name;  // "fc1.weight"
  bool empty() const { return name.empty(); }
  std::string str() const { return empty() ? std::string() : kind + " '" + name + "'"; }
};

// Gives `t` a name (replacing one it had).
void set_tensor_name(const Tensor& t, std::string kind, std::string name);
// t's name; with `by_memory`, else the name of a named tensor over the same memory (an
// optimizer writes a parameter through a flat view of it; a slice of a buffer); else an empty
// one.
TensorName tensor_name(const Tensor& t, bool by_memory = false);

}  // namespace kiln::detail
