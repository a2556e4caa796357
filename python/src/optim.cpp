// The library's optimizers for kiln.optim (python/kiln/optim.py wraps them with torch's
// param_groups): each updates the very tensors the Python parameters hold, with its fused
// update op, so a step costs what it costs in C++.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/optim/optimizer.h"

namespace kiln::python {

namespace {

std::vector<Tensor> params_of(nb::handle params) {
  std::vector<Tensor> out;
  for (nb::handle p : nb::iter(params)) {
    const Tensor* t = as_tensor(p);
    if (!t)
      throw nb::type_error(
          ("optimizer params must be tensors, not " + std::string(Py_TYPE(p.ptr())->tp_name))
              .c_str());
    out.push_back(*t);
  }
  return out;
}

std::pair<double, double> betas_of(nb::handle betas) {
  const std::vector<double> b = nb::cast<std::vector<double>>(betas);
  KILN_CHECK(b.size() == 2, ValueError, "betas must be two numbers, got ", b.size());
  return {b[0], b[1]};
}

}  // namespace

void bind_optim(nb::module_& m) {
  nb::module_ optim = m.def_submodule("optim", "The C++ optimizers kiln.optim wraps.");
  nb::class_<optim::Optimizer>(optim, "Optimizer")
      .def("step",
           [](optim::Optimizer& o) {
             nb::gil_scoped_release unlocked;
             o.step();
           })
      .def("zero_grad", &optim::Optimizer::zero_grad, nb::arg("set_to_none") = true)
      .def_prop_ro("lr", &optim::Optimizer::lr)
      .def("set_lr", &optim::Optimizer::set_lr)
      .def_prop_ro("momentum", &optim::Optimizer::momentum)
      .def("set_momentum", &optim::Optimizer::set_momentum)
      .def_prop_ro("kind", &optim::Optimizer::kind);
  optim.def("SGD", [](nb::handle params, double lr, double momentum, double dampening,
                      double weight_decay, bool nesterov, bool maximize) {
    return std::shared_ptr<optim::Optimizer>(std::make_shared<optim::SGD>(
        params_of(params),
        optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov, maximize}));
  });
  optim.def("Adam", [](nb::handle params, double lr, nb::handle betas, double eps,
                       double weight_decay, bool amsgrad, bool maximize, bool decoupled) {
    if (decoupled)
      return std::shared_ptr<optim::Optimizer>(std::make_shared<optim::AdamW>(
          params_of(params),
          optim::AdamWOptions{lr, betas_of(betas), eps, weight_decay, amsgrad, maximize}));
    return std::shared_ptr<optim::Optimizer>(std::make_shared<optim::Adam>(
        params_of(params),
        optim::AdamOptions{lr, betas_of(betas), eps, weight_decay, amsgrad, maximize}));
  });
  optim.def("Adagrad", [](nb::handle params, double lr, double lr_decay, double weight_decay,
                          double initial_accumulator_value, double eps, bool maximize) {
    return std::shared_ptr<optim::Optimizer>(std::make_shared<optim::Adagrad>(
        params_of(params), optim::AdagradOptions{lr, lr_decay, weight_decay,
                                                 initial_accumulator_value, eps, maximize}));
  });
  optim.def("RMSprop", [](nb::handle params, double lr, double alpha, double eps,
                          double weight_decay, double momentum, bool centered, bool maximize) {
    return std::shared_ptr<optim::Optimizer>(std::make_shared<optim::RMSprop>(
        params_of(params),
        optim::RMSpropOptions{lr, alpha, eps, weight_decay, momentum, centered, maximize}));
  });
  optim.def("Adadelta", [](nb::handle params, double lr, double rho, double eps,
                           double weight_decay, bool maximize) {
    return std::shared_ptr<optim::Optimizer>(std::make_shared<optim::Adadelta>(
        params_of(params), optim::AdadeltaOptions{lr, rho, eps, weight_decay, maximize}));
  });
}

}  // namespace kiln::python
