// Learning-rate schedulers (torch.optim.lr_scheduler): each sets its optimizer's learning rate
// from a base lr and an epoch counter, with PyTorch's formulas. Made on an optimizer, a fresh
// scheduler takes the optimizer's lr as base_lr and sets the lr of epoch 0 at once (as
// PyTorch's constructors do); step() advances one epoch (or one batch: whatever the caller
// counts) and sets the next. Resuming (last_epoch = k, the epochs stepped before), it takes the
// optimizer's initial_lr() as base_lr and sets epoch k + 1's lr, as PyTorch does. The lr reaches a
// compiled training step as a graph input, so a schedule never recompiles it. The guide is
// docs/optim.md.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and sets the optimizer's lr for it (PyTorch: after optimizer.step()).
  void step();
  // The lr this scheduler last set (get_last_lr()).
  double last_lr() const { return last_lr_; }
  // Epochs stepped since epoch 0 (last_epoch).
  int64_t last_epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }
  // The lr of epoch `epoch` (>= 0) by the schedule's closed form.
  virtual double lr_at(int64_t epoch) const = 0;

 protected:
  // `last_epoch` -1: a fresh schedule (the lr of epoch 0 is set now); otherwise resuming a
  // schedule that had reached epoch last_epoch (the lr of epoch last_epoch + 1 is set).
  LRScheduler(Optimizer& opt, int64_t last_epoch, const char* name);
  // Sets the lr for the current epoch; called by each constructor once its fields are set.
  void start();
  // What a scheduler sets besides the lr for `epoch` (OneCycleLR: the momentum), after it.
  virtual void set_others(int64_t epoch) { (void)epoch; }
  Optimizer& opt_;
  const char* name_;

 private:
  double base_lr_;
  int64_t epoch_;
  double last_lr_ = 0;
};

// base_lr * gamma^floor(epoch / step_size).
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base_lr * gamma^(number of milestones <= epoch); milestones increasing.
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1,
              int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// base_lr * gamma^epoch.
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;

 private:
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2 (PyTorch's closed form;
// past t_max it rises again, as PyTorch's does).
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// base_lr * factor, factor going linearly from start_factor at epoch 0 to end_factor at
// total_iters and staying there.
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// base_lr * lambda(epoch).
class LambdaLR final : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t epoch)> lambda, int64_t last_epoch = -1);
  double lr_at(int64_t epoch) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

// The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR), stepped after every batch: the lr
// rises from initial = max_lr / div_factor to max_lr over the first pct_start of total_steps,
// then falls to initial / final_div_factor (three_phase: back to initial first, then down to
// it), by cosine or linearly ("cos", "linear"); with cycle_momentum, the optimizer's momentum
// (SGD's, RMSprop's; Adam's and AdamW's beta1) moves the opposite way between max_momentum and
// base_momentum. total_steps, or epochs * steps_per_epoch. Stepping more than total_steps times
// is a ValueError, as in PyTorch. (The optimizer's own lr is not used: max_lr is the schedule's.)
class OneCycleLR final : public LRScheduler {
 public:
  struct Options {
    double max_lr = 0;  // required, > 0
    int64_t total_steps = 0;
    int64_t epochs = 0, steps_per_epoch = 0;  // when total_steps is 0
    double pct_start = 0.3;
    std::string anneal_strategy = "cos";
    bool cycle_momentum = true;
    double base_momentum = 0.85;
    double max_momentum = 0.95;
    double div_factor = 25.0;
    double final_div_factor = 1e4;
    bool three_phase = false;
    int64_t last_epoch = -1;
  };
  OneCycleLR(Optimizer& opt, Options options);
  double lr_at(int64_t step) const override;
  // The momentum of step `step` (cycle_momentum).
  double momentum_at(int64_t step) const;
  int64_t total_steps() const { return total_steps_; }

 private:
  struct Phase {
    double end_step;  // PyTorch's float end steps
    double start_lr, end_lr, start_momentum, end_momentum;
  };
  // (lr, momentum) at `step`.
  std::pair<double, double> at(int64_t step) const;
  void set_others(int64_t step) override;
  Options o_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
};

// Lowers the lr by `factor` when a metric has stopped improving for `patience` epochs
// (torch.optim.lr_scheduler.ReduceLROnPlateau, same options and defaults). step(metric) once
// per epoch with the metric (a loss: mode "min"; an accuracy: "max").
class ReduceLROnPlateau {
 public:
  struct Options {
    std::string mode = "min";            // "min" or "max"
    double factor = 0.1;                 // new lr = lr * factor; in (0, 1)
    int64_t patience = 10;               // epochs without improvement tolerated
    double threshold = 1e-4;             // what counts as an improvement (see threshold_mode)
    std::string threshold_mode = "rel";  // "rel": best * (1 -/+ threshold); "abs": best -/+ it
    int64_t cooldown = 0;                // epochs after a reduction before counting again
    double min_lr = 0;
    double eps = 1e-8;  // a reduction smaller than this is not made
  };
  explicit ReduceLROnPlateau(Optimizer& opt) : ReduceLROnPlateau(opt, Options{}) {}
  ReduceLROnPlateau(Optimizer& opt, Options options);
  // One epoch's metric; lowers the lr when the plateau is long enough. A NaN metric is never an
  // improvement (as in PyTorch).
  void step(double metric);
  double last_lr() const { return opt_.lr(); }
  int64_t num_bad_epochs() const { return bad_epochs_; }
  double best() const { return best_; }

 private:
  bool better(double metric) const;
  Optimizer& opt_;
  Options o_;
  double best_;
  int64_t bad_epochs_ = 0, cooldown_left_ = 0;
};

}  // namespace kiln::optim
