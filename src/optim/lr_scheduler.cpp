// Learning-rate schedulers: PyTorch's closed forms (see kiln/optim/lr_scheduler.h).
#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::optim {

LRScheduler::LRScheduler(Optimizer& opt, int64_t last_epoch, const char* name)
    : opt_(opt),
      name_(name),
      base_lr_(last_epoch < 0 ? opt.lr() : opt.initial_lr()),
      epoch_(last_epoch + 1) {
  KILN_CHECK(last_epoch >= -1, ValueError, name, ": last_epoch must be >= -1, got ", last_epoch);
}

void LRScheduler::start() {
  last_lr_ = lr_at(epoch_);
  opt_.set_lr(last_lr_);
  set_others(epoch_);
}

void LRScheduler::step() {
  last_lr_ = lr_at(epoch_ + 1);  // (checked before anything changes)
  ++epoch_;
  opt_.set_lr(last_lr_);
  set_others(epoch_);
}

namespace {
void check_epoch(int64_t epoch, const char* name) {
  KILN_CHECK(epoch >= 0, ValueError, name, "::lr_at: epoch must be >= 0, got ", epoch);
}
void check_gamma(double gamma, const char* name) {
  KILN_CHECK(std::isfinite(gamma) && gamma > 0, ValueError, name,
             ": gamma must be finite and > 0, got ", gamma);
}
}  // namespace

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(opt, last_epoch, "StepLR"), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, ValueError, "StepLR: step_size must be > 0, got ", step_size);
  check_gamma(gamma, name_);
  start();
}
double StepLR::lr_at(int64_t epoch) const {
  check_epoch(epoch, name_);
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma,
                         int64_t last_epoch)
    : LRScheduler(opt, last_epoch, "MultiStepLR"),
      milestones_(std::move(milestones)),
      gamma_(gamma) {
  KILN_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), ValueError,
             "MultiStepLR: milestones must be increasing");
  check_gamma(gamma, name_);
  start();
}
double MultiStepLR::lr_at(int64_t epoch) const {
  check_epoch(epoch, name_);
  // (A milestone listed twice counts twice, as PyTorch's Counter of milestones does.)
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch);
  return base_lr() * std::pow(gamma_, static_cast<double>(passed - milestones_.begin()));
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma, int64_t last_epoch)
    : LRScheduler(opt, last_epoch, "ExponentialLR"), gamma_(gamma) {
  check_gamma(gamma, name_);
  start();
}
double ExponentialLR::lr_at(int64_t epoch) const {
  check_epoch(epoch, name_);
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min,
                                     int64_t last_epoch)
    : LRScheduler(opt, last_epoch, "CosineAnnealingLR"), t_max_(t_max), eta_min_(eta_min) {
  KILN_CHECK(t_max > 0, ValueError, "CosineAnnealingLR: t_max must be > 0, got ", t_max);
  KILN_CHECK(std::isfinite(eta_min) && eta_min >= 0, ValueError,
             "CosineAnnealingLR: eta_min must be finite and >= 0, got ", eta_min);
  start();
}
double CosineAnnealingLR::lr_at(int64_t epoch) const {
  check_epoch(epoch, name_);
  const double progress = static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr() - eta_min_) * (1 + std::cos(std::numbers::pi * progress)) / 2;
}

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters,
                   int64_t last_epoch)
    : LRScheduler(opt, last_epoch, "LinearLR"),
      start_(start_factor),
      end_(end_factor),
      total_(total_iters) {
  KILN_CHECK(start_factor > 0 && start_factor <= 1, ValueError,
             "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  KILN_CHECK(end_factor >= 0 && end_factor <= 1, ValueError,
             "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  KILN_CHECK(total_iters > 0, ValueError, "LinearLR: total_iters must be > 0, got ", total_iters);
  start();
}
double LinearLR::lr_at(int64_t epoch) const {
  check_epoch(epoch, name_);
  const double done = static_cast<double>(std::min(epoch, total_)) / static_cast<double>(total_);
  return base_lr() * (start_ + (end_ - start_) * done);
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda, int64_t last_epoch)
    : LRScheduler(opt, last_epoch, "LambdaLR"), lambda_(std::move(lambda)) {
  KILN_CHECK(lambda_, ValueError, "LambdaLR: the lambda is empty");
  start();
}
double LambdaLR::lr_at(int64_t epoch) const {
  check_epoch(epoch, name_);
  return base_lr() * lambda_(epoch);
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, Options options)
    : opt_(opt), o_(std::move(options)) {
  KILN_CHECK(o_.mode == "min" || o_.mode == "max", ValueError,
             "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"", o_.mode, "\"");
  KILN_CHECK(o_.threshold_mode == "rel" || o_.threshold_mode == "abs", ValueError,
             "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got \"",
             o_.threshold_mode, "\"");
  KILN_CHECK(o_.factor > 0 && o_.factor < 1, ValueError,
             "ReduceLROnPlateau: factor must be in (0, 1), got ", o_.factor);
  KILN_CHECK(o_.patience >= 0 && o_.cooldown >= 0, ValueError,
             "ReduceLROnPlateau: patience and cooldown must be >= 0");
  KILN_CHECK(o_.min_lr >= 0, ValueError, "ReduceLROnPlateau: min_lr must be >= 0, got ", o_.min_lr);
  best_ = o_.mode == "min" ? std::numeric_limits<double>::infinity()
                           : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double metric) const {
  const bool rel = o_.threshold_mode == "rel";
  if (o_.mode == "min") return metric < (rel ? best_ * (1 - o_.threshold) : best_ - o_.threshold);
  return metric > (rel ? best_ * (1 + o_.threshold) : best_ + o_.threshold);
}

void ReduceLROnPlateau::step(double metric) {
  if (better(metric)) {
    best_ = metric;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_epochs_ = 0;  // epochs in cooldown do not count
  }
  if (bad_epochs_ > o_.patience) {
    const double old_lr = opt_.lr();
    const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
    if (old_lr - new_lr > o_.eps) opt_.set_lr(new_lr);
    cooldown_left_ = o_.cooldown;
    bad_epochs_ = 0;
  }
}

OneCycleLR::OneCycleLR(Optimizer& opt, Options options)
    : LRScheduler(opt, options.last_epoch, "OneCycleLR"), o_(std::move(options)) {
  KILN_CHECK(std::isfinite(o_.max_lr) && o_.max_lr > 0, ValueError,
             "OneCycleLR: max_lr must be finite and > 0, got ", o_.max_lr);
  if (o_.total_steps != 0) {
    KILN_CHECK(o_.total_steps > 0, ValueError, "OneCycleLR: expected a positive total_steps, got ",
               o_.total_steps);
    total_steps_ = o_.total_steps;
  } else {
    KILN_CHECK(o_.epochs > 0 && o_.steps_per_epoch > 0, ValueError,
               "OneCycleLR: give total_steps, or positive epochs and steps_per_epoch (got ",
               o_.epochs, " and ", o_.steps_per_epoch, ")");
    total_steps_ = o_.epochs * o_.steps_per_epoch;
  }
  KILN_CHECK(o_.pct_start >= 0 && o_.pct_start <= 1, ValueError,
             "OneCycleLR: expected a pct_start in [0, 1], got ", o_.pct_start);
  KILN_CHECK(o_.anneal_strategy == "cos" || o_.anneal_strategy == "linear", ValueError,
             "OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got \"",
             o_.anneal_strategy, "\"");
  KILN_CHECK(o_.div_factor > 0 && o_.final_div_factor > 0, ValueError,
             "OneCycleLR: div_factor and final_div_factor must be > 0");
  KILN_CHECK(!o_.cycle_momentum || opt.momentum(), ValueError, "OneCycleLR: ", opt.kind(),
             " has no momentum or beta1 to cycle; pass cycle_momentum = false");
  const double initial = o_.max_lr / o_.div_factor, min_lr = initial / o_.final_div_factor;
  const double total = static_cast<double>(total_steps_);
  const double up_end = o_.pct_start * total - 1;
  const double lo = o_.base_momentum, hi = o_.max_momentum;
  if (o_.three_phase)
    phases_ = {{up_end, initial, o_.max_lr, hi, lo},
               {2 * o_.pct_start * total - 2, o_.max_lr, initial, lo, hi},
               {total - 1, initial, min_lr, hi, hi}};
  else
    phases_ = {{up_end, initial, o_.max_lr, hi, lo}, {total - 1, o_.max_lr, min_lr, lo, hi}};
  start();
}

std::pair<double, double> OneCycleLR::at(int64_t step) const {
  check_epoch(step, name_);
  KILN_CHECK(step <= total_steps_, ValueError, "OneCycleLR: tried to step ", step,
             " times; the specified number of total steps is ", total_steps_);
  auto anneal = [&](double from, double to, double pct) {
    return o_.anneal_strategy == "cos"
               ? to + (from - to) / 2 * (std::cos(std::numbers::pi * pct) + 1)
               : (to - from) * pct + from;
  };
  double start_step = 0;
  const auto s = static_cast<double>(step);
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (s <= ph.end_step || i + 1 == phases_.size()) {
      const double pct = (s - start_step) / (ph.end_step - start_step);
      return {anneal(ph.start_lr, ph.end_lr, pct), anneal(ph.start_momentum, ph.end_momentum, pct)};
    }
    start_step = ph.end_step;
  }
  return {0, 0};  // (not reached: the last phase always answers)
}

double OneCycleLR::lr_at(int64_t step) const { return at(step).first; }
double OneCycleLR::momentum_at(int64_t step) const { return at(step).second; }

void OneCycleLR::set_others(int64_t step) {
  if (o_.cycle_momentum) opt_.set_momentum(momentum_at(step));
}

}  // namespace kiln::optim
