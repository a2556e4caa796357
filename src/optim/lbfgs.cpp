// L-BFGS with PyTorch's algorithm (torch.optim.LBFGS, including its strong-Wolfe line search and
// cubic interpolation), over the parameters as one flat vector of doubles.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim/optimizer.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace {

using Vec = std::vector<double>;

double dot(const Vec& a, const Vec& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}
double max_abs(const Vec& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}
double sum_abs(const Vec& a) {
  double s = 0;
  for (double v : a) s += std::abs(v);
  return s;
}

// The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to `bounds` (by
// default the interval between them); the middle of the bounds when the cubic has none.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [lo, hi] = bounds ? *bounds : std::pair{std::min(x1, x2), std::max(x1, x2)};
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi);
}

struct LineSearchResult {
  double f;
  Vec g;
  double t;
  int64_t evals;
};

// A step t along d satisfying the strong Wolfe conditions (c1, c2), from f, g, gtd at t = 0:
// bracketing, then zooming with cubic interpolation (PyTorch's _strong_wolfe).
template <class Objective>
LineSearchResult strong_wolfe(Objective&& obj, double t, const Vec& d, double f, const Vec& g,
                              double gtd, double tolerance_change, double c1 = 1e-4,
                              double c2 = 0.9, int64_t max_ls = 25) {
  const double d_norm = max_abs(d);
  auto [f_new, g_new] = obj(t);
  int64_t evals = 1;
  double gtd_new = dot(g_new, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Vec g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Vec> bracket_g;
  auto two = [&](double ta, double fa, const Vec& ga, double gtda, double tb, double fb,
                 const Vec& gb, double gtdb) {
    bracket = {ta, tb};
    bracket_f = {fa, fb};
    bracket_g = {ga, gb};
    bracket_gtd = {gtda, gtdb};
  };
  while (ls_iter < max_ls) {
    if (f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev)) {
      two(t_prev, f_prev, g_prev, gtd_prev, t, f_new, g_new, gtd_new);
      break;
    }
    if (std::abs(gtd_new) <= -c2 * gtd) {
      bracket = {t};
      bracket_f = {f_new};
      bracket_g = {g_new};
      bracket_gtd = {gtd_new};
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      two(t_prev, f_prev, g_prev, gtd_prev, t, f_new, g_new, gtd_new);
      break;
    }
    const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, previous = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          std::pair{min_step, max_step});
    t_prev = previous;
    f_prev = f_new;
    g_prev = g_new;
    gtd_prev = gtd_new;
    std::tie(f_new, g_new) = obj(t);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) two(0, f, g, gtd, t, f_new, g_new, gtd_new);
  // Zoom: shrink the bracket [low, high] until the conditions hold.
  bool insufficient_progress = false;
  auto order = [&] {
    return bracket_f.front() <= bracket_f.back() ? std::pair{0, 1} : std::pair{1, 0};
  };
  auto [low, high] = order();
  while (!done && ls_iter < max_ls) {
    const double b_lo = std::min(bracket[0], bracket[1]), b_hi = std::max(bracket[0], bracket[1]);
    if ((b_hi - b_lo) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                          bracket_gtd[1]);
    // Keep away from the bracket's ends unless the last tries made no progress there.
    const double eps = 0.1 * (b_hi - b_lo);
    if (std::min(b_hi - t, t - b_lo) < eps) {
      if (insufficient_progress || t >= b_hi || t <= b_lo) {
        t = std::abs(t - b_hi) < std::abs(t - b_lo) ? b_hi - eps : b_lo + eps;
        insufficient_progress = false;
      } else {
        insufficient_progress = true;
      }
    } else {
      insufficient_progress = false;
    }
    std::tie(f_new, g_new) = obj(t);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
    const auto lo = static_cast<size_t>(low), hi = static_cast<size_t>(high);
    if (f_new > f + c1 * t * gtd || f_new >= bracket_f[lo]) {
      bracket[hi] = t;
      bracket_f[hi] = f_new;
      bracket_g[hi] = g_new;
      bracket_gtd[hi] = gtd_new;
      std::tie(low, high) = order();
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[hi] - bracket[lo]) >= 0) {
        bracket[hi] = bracket[lo];
        bracket_f[hi] = bracket_f[lo];
        bracket_g[hi] = bracket_g[lo];
        bracket_gtd[hi] = bracket_gtd[lo];
      }
      bracket[lo] = t;
      bracket_f[lo] = f_new;
      bracket_g[lo] = g_new;
      bracket_gtd[lo] = gtd_new;
    }
  }
  const auto lo = static_cast<size_t>(bracket.size() == 1 ? 0 : low);
  return {bracket_f[lo], bracket_g[lo], bracket[lo], evals};
}

void check_options(const LBFGSOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.lr) && o.lr > 0, ValueError, who, ": invalid learning rate ", o.lr);
  KILN_CHECK(o.max_iter > 0 && (!o.max_eval || *o.max_eval > 0) && o.history_size > 0, ValueError,
             who, ": max_iter, max_eval and history_size must be positive");
  KILN_CHECK(o.line_search_fn.empty() || o.line_search_fn == "strong_wolfe", ValueError, who,
             ": line_search_fn must be \"\" or \"strong_wolfe\", got \"", o.line_search_fn, "\"");
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions options)
    : Optimizer(std::move(params), options.lr), o_(std::move(options)) {
  check_options(o_, "LBFGS");
}

void LBFGS::step() {
  KILN_CHECK(
      false, ValueError,
      "LBFGS.step: L-BFGS evaluates the loss several times a step; call step(closure) with "
      "a closure that zeroes the gradients, computes the loss, calls backward() and returns it");
}

Vec LBFGS::flat_grad() const {
  Vec g;
  for (const Tensor& p : params_) {
    const int64_t n = p.numel();
    if (!p.grad().defined()) {
      g.insert(g.end(), static_cast<size_t>(n), 0.0);
      continue;
    }
    const std::vector<double> v = p.grad().to_vector<double>();
    g.insert(g.end(), v.begin(), v.end());
  }
  return g;
}

Vec LBFGS::flat_params() const {
  Vec x;
  for (const Tensor& p : params_) {
    const std::vector<double> v = p.to_vector<double>();
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

void LBFGS::set_params(const Vec& x) {
  NoGradGuard no_grad;
  size_t at = 0;
  for (Tensor& p : params_) {
    const auto n = static_cast<size_t>(p.numel());
    p.copy_(tensor(Vec(x.begin() + at, x.begin() + at + n), p.sizes()).to(p.dtype()));
    at += n;
  }
}

void LBFGS::add_to_params(double t, const Vec& d) {
  Vec x = flat_params();
  for (size_t i = 0; i < x.size(); ++i) x[i] += t * d[i];
  set_params(x);
}

std::pair<double, Vec> LBFGS::evaluate_at(const std::function<Tensor()>& closure, const Vec& x,
                                          double t, const Vec& d) {
  add_to_params(t, d);
  const double loss = closure().item<double>();
  Vec g = flat_grad();
  set_params(x);
  return {loss, std::move(g)};
}

Tensor LBFGS::step(const std::function<Tensor()>& closure) {
  KILN_CHECK(closure != nullptr, ValueError, "LBFGS.step: the closure is empty");
  const int64_t max_eval = o_.max_eval.value_or(o_.max_iter * 5 / 4);
  const Tensor orig_loss = closure();
  double loss = orig_loss.item<double>();
  int64_t current_evals = 1;
  ++func_evals_;
  Vec g = flat_grad();
  if (max_abs(g) <= o_.tolerance_grad) return orig_loss;
  const double lr = lr_;
  for (int64_t n = 1; n <= o_.max_iter; ++n) {
    ++n_iter_;
    if (n_iter_ == 1) {
      d_.assign(g.size(), 0.0);
      for (size_t i = 0; i < g.size(); ++i) d_[i] = -g[i];
      old_dirs_.clear();
      old_stps_.clear();
      ro_.clear();
      h_diag_ = 1;
    } else {
      // The curvature pair of the last step, kept when y.s is positive.
      Vec y(g.size()), s(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        y[i] = g[i] - prev_flat_grad_[i];
        s[i] = d_[i] * t_;
      }
      const double ys = dot(y, s);
      if (ys > 1e-10) {
        if (static_cast<int64_t>(old_dirs_.size()) == o_.history_size) {
          old_dirs_.erase(old_dirs_.begin());
          old_stps_.erase(old_stps_.begin());
          ro_.erase(ro_.begin());
        }
        old_dirs_.push_back(y);
        old_stps_.push_back(s);
        ro_.push_back(1.0 / ys);
        h_diag_ = ys / dot(y, y);
      }
      // Two-loop recursion: d = -H g.
      const size_t m = old_dirs_.size();
      Vec q(g.size()), al(m);
      for (size_t i = 0; i < g.size(); ++i) q[i] = -g[i];
      for (size_t i = m; i-- > 0;) {
        al[i] = dot(old_stps_[i], q) * ro_[i];
        for (size_t j = 0; j < q.size(); ++j) q[j] -= al[i] * old_dirs_[i][j];
      }
      for (double& v : q) v *= h_diag_;
      for (size_t i = 0; i < m; ++i) {
        const double be = dot(old_dirs_[i], q) * ro_[i];
        for (size_t j = 0; j < q.size(); ++j) q[j] += (al[i] - be) * old_stps_[i][j];
      }
      d_ = std::move(q);
    }
    prev_flat_grad_ = g;
    prev_loss_ = loss;
    t_ = n_iter_ == 1 ? std::min(1.0, 1.0 / sum_abs(g)) * lr : lr;
    const double gtd = dot(g, d_);
    if (gtd > -o_.tolerance_change) break;  // not a descent direction any more
    int64_t ls_evals = 0;
    bool optimal = false;
    if (o_.line_search_fn == "strong_wolfe") {
      const Vec x = flat_params();
      LineSearchResult r = strong_wolfe([&](double t) { return evaluate_at(closure, x, t, d_); },
                                        t_, d_, loss, g, gtd, o_.tolerance_change);
      loss = r.f;
      g = std::move(r.g);
      t_ = r.t;
      ls_evals = r.evals;
      add_to_params(t_, d_);
      optimal = max_abs(g) <= o_.tolerance_grad;
    } else {
      add_to_params(t_, d_);
      if (n != o_.max_iter) {
        loss = closure().item<double>();
        g = flat_grad();
        optimal = max_abs(g) <= o_.tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    func_evals_ += ls_evals;
    if (n == o_.max_iter || current_evals >= max_eval || optimal) break;
    if (max_abs(d_) * std::abs(t_) <= o_.tolerance_change) break;
    if (std::abs(loss - prev_loss_) < o_.tolerance_change) break;
  }
  return orig_loss;
}

std::map<std::string, std::string> LBFGS::hyper_parameters() const {
  return {{"max_iter", std::to_string(o_.max_iter)},
          {"max_eval", o_.max_eval ? std::to_string(*o_.max_eval) : std::string("none")},
          {"tolerance_grad", detail::format_double(o_.tolerance_grad)},
          {"tolerance_change", detail::format_double(o_.tolerance_change)},
          {"history_size", std::to_string(o_.history_size)},
          {"line_search_fn", o_.line_search_fn}};
}

namespace {
int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  KILN_CHECK(it != m.end(), ValueError, "load_state_dict: no '", key, "' in the metadata");
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_CHECK(used == it->second.size() && used > 0, ValueError, "load_state_dict: metadata '", key,
             "' is not an integer: '", it->second, "'");
  return v;
}
}  // namespace

Optimizer::StagedHyperParameters LBFGS::stage_hyper_parameters(
    const std::map<std::string, std::string>& m) const {
  LBFGSOptions o;
  o.lr = lr_;
  o.max_iter = meta_int(m, "max_iter");
  const auto max_eval = m.find("max_eval");
  if (max_eval == m.end() || max_eval->second != "none") o.max_eval = meta_int(m, "max_eval");
  o.tolerance_grad = detail::meta_double(m, "tolerance_grad");
  o.tolerance_change = detail::meta_double(m, "tolerance_change");
  o.history_size = meta_int(m, "history_size");
  const auto search = m.find("line_search_fn");
  KILN_CHECK(search != m.end(), ValueError, "load_state_dict: no 'line_search_fn' in the metadata");
  o.line_search_fn = search->second;
  check_options(o, "load_state_dict");
  auto* self = const_cast<LBFGS*>(this);
  return {{}, [self, o] { self->o_ = o; }};
}

// The history as tensors: vectors of the flat parameters' length n, stacked into [h, n].
void LBFGS::save_optimizer_state(OptimizerState& s) const {
  auto vec = [&](const char* name, const Vec& v) {
    if (!v.empty()) s.tensors.emplace_back(name, tensor(v).to(DType::Float64));
  };
  auto rows = [&](const char* name, const std::vector<Vec>& vs) {
    if (vs.empty()) return;
    Vec flat;
    for (const Vec& v : vs) flat.insert(flat.end(), v.begin(), v.end());
    s.tensors.emplace_back(
        name, tensor(flat).to(DType::Float64).reshape({static_cast<int64_t>(vs.size()), -1}));
  };
  vec("optimizer.d", d_);
  vec("optimizer.prev_flat_grad", prev_flat_grad_);
  vec("optimizer.ro", ro_);
  rows("optimizer.old_dirs", old_dirs_);
  rows("optimizer.old_stps", old_stps_);
  s.metadata["optimizer.t"] = detail::format_double(t_);
  s.metadata["optimizer.h_diag"] = detail::format_double(h_diag_);
  s.metadata["optimizer.prev_loss"] = detail::format_double(prev_loss_);
  s.metadata["optimizer.func_evals"] = std::to_string(func_evals_);
  s.metadata["optimizer.n_iter"] = std::to_string(n_iter_);
}

std::function<void()> LBFGS::stage_optimizer_state(const OptimizerState& s) const {
  int64_t n = 0;
  for (const Tensor& p : params_) n += p.numel();
  std::map<std::string, Tensor> found;
  for (const auto& [name, t] : s.tensors)
    if (name.rfind("optimizer.", 0) == 0) {
      KILN_CHECK(name == "optimizer.d" || name == "optimizer.prev_flat_grad" ||
                     name == "optimizer.ro" || name == "optimizer.old_dirs" ||
                     name == "optimizer.old_stps",
                 ValueError, "load_state_dict: unexpected tensor '", name, "' for LBFGS");
      KILN_CHECK(t.defined() && t.dtype() == DType::Float64, DTypeError, "load_state_dict: '", name,
                 "' must be a float64 tensor");
      found[name] = t;
    }
  auto vec = [&](const std::string& name, int64_t length) -> Vec {
    const auto it = found.find(name);
    if (it == found.end()) return {};
    KILN_CHECK(it->second.dim() == 1 && (length < 0 || it->second.size(0) == length), ShapeError,
               "load_state_dict: '", name, "' has shape ", it->second.shape_str(), ", expected [",
               length < 0 ? std::string("h") : std::to_string(length), "]");
    return it->second.to_vector<double>();
  };
  auto rows = [&](const std::string& name) -> std::vector<Vec> {
    const auto it = found.find(name);
    if (it == found.end()) return {};
    KILN_CHECK(it->second.dim() == 2 && it->second.size(1) == n, ShapeError, "load_state_dict: '",
               name, "' has shape ", it->second.shape_str(), ", expected [h, ", n, "]");
    const Vec flat = it->second.to_vector<double>();
    std::vector<Vec> out;
    for (int64_t r = 0; r < it->second.size(0); ++r)
      out.emplace_back(flat.begin() + r * n, flat.begin() + (r + 1) * n);
    return out;
  };
  Vec d = vec("optimizer.d", n), prev = vec("optimizer.prev_flat_grad", n),
      ro = vec("optimizer.ro", -1);
  std::vector<Vec> dirs = rows("optimizer.old_dirs"), stps = rows("optimizer.old_stps");
  KILN_CHECK(dirs.size() == stps.size() && dirs.size() == ro.size(), ShapeError,
             "load_state_dict: LBFGS's history holds ", dirs.size(), " directions, ", stps.size(),
             " steps and ", ro.size(), " curvatures; they must be as many");
  const auto& md = s.metadata;
  const double t = detail::meta_double(md, "optimizer.t"),
               h_diag = detail::meta_double(md, "optimizer.h_diag"),
               prev_loss = detail::meta_double(md, "optimizer.prev_loss");
  const int64_t func_evals = meta_int(md, "optimizer.func_evals"),
                n_iter = meta_int(md, "optimizer.n_iter");
  auto* self = const_cast<LBFGS*>(this);
  return [=, d = std::move(d), prev = std::move(prev), ro = std::move(ro), dirs = std::move(dirs),
          stps = std::move(stps)] {
    self->d_ = d;
    self->prev_flat_grad_ = prev;
    self->ro_ = ro;
    self->old_dirs_ = dirs;
    self->old_stps_ = stps;
    self->t_ = t;
    self->h_diag_ = h_diag;
    self->prev_loss_ = prev_loss;
    self->func_evals_ = func_evals;
    self->n_iter_ = n_iter;
  };
}

}  // namespace kiln::optim
