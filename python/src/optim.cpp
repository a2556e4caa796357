// The library's optimizers for kiln.optim (python/kiln/optim.py wraps them with torch's
// param_groups): each updates the very tensors the Python parameters hold, with its fused
// update op, so a step costs what it costs in C++.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/optim/lr_scheduler.h"
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

  // Learning-rate schedulers over a C++ optimizer (kept alive by the scheduler).
  using Scheduler = std::shared_ptr<optim::LRScheduler>;
  nb::class_<optim::LRScheduler>(optim, "LRScheduler")
      .def("step", &optim::LRScheduler::step)
      .def_prop_ro("last_lr", &optim::LRScheduler::last_lr)
      .def_prop_ro("last_epoch", &optim::LRScheduler::last_epoch)
      .def_prop_ro("base_lr", &optim::LRScheduler::base_lr)
      .def("lr_at", &optim::LRScheduler::lr_at);
  optim.def(
      "StepLR",
      [](optim::Optimizer& o, int64_t step_size, double gamma, int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::StepLR>(o, step_size, gamma, last_epoch);
      },
      nb::keep_alive<0, 1>());
  optim.def(
      "MultiStepLR",
      [](optim::Optimizer& o, std::vector<int64_t> milestones, double gamma,
         int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::MultiStepLR>(o, std::move(milestones), gamma, last_epoch);
      },
      nb::keep_alive<0, 1>());
  optim.def(
      "ExponentialLR",
      [](optim::Optimizer& o, double gamma, int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::ExponentialLR>(o, gamma, last_epoch);
      },
      nb::keep_alive<0, 1>());
  optim.def(
      "CosineAnnealingLR",
      [](optim::Optimizer& o, int64_t t_max, double eta_min, int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::CosineAnnealingLR>(o, t_max, eta_min, last_epoch);
      },
      nb::keep_alive<0, 1>());
  optim.def(
      "LinearLR",
      [](optim::Optimizer& o, double start_factor, double end_factor, int64_t total_iters,
         int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::LinearLR>(o, start_factor, end_factor, total_iters,
                                                 last_epoch);
      },
      nb::keep_alive<0, 1>());
  optim.def(
      "LambdaLR",
      [](optim::Optimizer& o, std::function<double(int64_t)> lambda,
         int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::LambdaLR>(o, std::move(lambda), last_epoch);
      },
      nb::keep_alive<0, 1>());
  optim.def(
      "OneCycleLR",
      [](optim::Optimizer& o, double max_lr, int64_t total_steps, int64_t epochs,
         int64_t steps_per_epoch, double pct_start, std::string anneal_strategy,
         bool cycle_momentum, double base_momentum, double max_momentum, double div_factor,
         double final_div_factor, bool three_phase, int64_t last_epoch) -> Scheduler {
        return std::make_shared<optim::OneCycleLR>(
            o, optim::OneCycleLR::Options{.max_lr = max_lr,
                                          .total_steps = total_steps,
                                          .epochs = epochs,
                                          .steps_per_epoch = steps_per_epoch,
                                          .pct_start = pct_start,
                                          .anneal_strategy = std::move(anneal_strategy),
                                          .cycle_momentum = cycle_momentum,
                                          .base_momentum = base_momentum,
                                          .max_momentum = max_momentum,
                                          .div_factor = div_factor,
                                          .final_div_factor = final_div_factor,
                                          .three_phase = three_phase,
                                          .last_epoch = last_epoch});
      },
      nb::keep_alive<0, 1>());
  nb::class_<optim::ReduceLROnPlateau>(optim, "ReduceLROnPlateau")
      .def("step", &optim::ReduceLROnPlateau::step)
      .def_prop_ro("last_lr", &optim::ReduceLROnPlateau::last_lr)
      .def_prop_ro("num_bad_epochs", &optim::ReduceLROnPlateau::num_bad_epochs)
      .def_prop_ro("best", &optim::ReduceLROnPlateau::best);
  optim.def(
      "make_reduce_lr_on_plateau",
      [](optim::Optimizer& o, std::string mode, double factor, int64_t patience, double threshold,
         std::string threshold_mode, int64_t cooldown, double min_lr, double eps) {
        return std::make_shared<optim::ReduceLROnPlateau>(
            o, optim::ReduceLROnPlateau::Options{.mode = std::move(mode),
                                                 .factor = factor,
                                                 .patience = patience,
                                                 .threshold = threshold,
                                                 .threshold_mode = std::move(threshold_mode),
                                                 .cooldown = cooldown,
                                                 .min_lr = min_lr,
                                                 .eps = eps});
      },
      nb::keep_alive<0, 1>());
}

}  // namespace kiln::python
