// Grad mode for kiln.no_grad / enable_grad / set_grad_enabled (python/kiln/autograd.py builds
// the context managers and decorators on these).
#include "kiln/autograd/autograd.h"
#include "bindings.h"

namespace kiln::python {

void bind_autograd(nb::module_& m) {
  m.def("is_grad_enabled", &is_grad_enabled,
        "Whether ops record gradients on this thread (torch.is_grad_enabled).");
  m.def("_set_grad_enabled", &set_grad_enabled, nb::arg("enabled"));
}

}  // namespace kiln::python
