// KILN_INDUCTOR_PROFILE: per-step times of compiled graphs (see step_profile.h).
#include "backends/inductor/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>

#include "diagnostics/diagnostics.h"
#include "kiln/core/error.h"

namespace kiln::inductor {

namespace {

std::atomic<int> g_profiling{-1};   // -1: the environment not read yet
std::atomic<size_t> g_slowest{15};  // how many of the slowest steps a report lists

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<GraphProfile>> graphs;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: the report runs at exit
  return *r;
}

void print_at_exit() {
  if (!step_profiling()) return;  // switched off since (a test that reads the report itself)
  const std::string text = step_profile_report();
  if (!text.empty()) std::fputs(text.c_str(), stderr);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
std::string pad_left(std::string s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

}  // namespace

bool step_profiling() {
  int on = g_profiling.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* env = std::getenv("KILN_INDUCTOR_PROFILE");
    on = env && *env && std::string(env) != "0" ? 1 : 0;
    // A number above 1 is how many of the slowest steps to list.
    if (on && std::atoi(env) > 1) g_slowest.store(static_cast<size_t>(std::atoi(env)));
    g_profiling.store(on, std::memory_order_relaxed);
  }
  return on == 1;
}
void set_step_profiling(bool on) { g_profiling.store(on ? 1 : 0, std::memory_order_relaxed); }

GraphProfile::GraphProfile(std::string title, std::vector<StepInfo> steps)
    : title_(std::move(title)),
      steps_(std::move(steps)),
      step_ns_(new std::atomic<int64_t>[steps_.size()]) {
  for (size_t k = 0; k < steps_.size(); ++k) step_ns_[k].store(0, std::memory_order_relaxed);
}

std::string GraphProfile::report(size_t slowest) const {
  const int64_t runs = runs_.load(std::memory_order_relaxed);
  if (runs == 0) return "";
  const double run_ms = static_cast<double>(run_ns_.load()) / 1e6 / static_cast<double>(runs);
  std::vector<double> ms(steps_.size());
  for (size_t k = 0; k < steps_.size(); ++k)
    ms[k] = static_cast<double>(step_ns_[k].load()) / 1e6 / static_cast<double>(runs);
  const double in_steps = std::accumulate(ms.begin(), ms.end(), 0.0);
  auto percent = [&](double v) {
    return pad_left(fixed(run_ms > 0 ? 100.0 * v / run_ms : 0.0, 1), 5) + "%";
  };
  size_t kernels = 0;
  std::map<std::string, std::pair<double, int>> by_kind;
  for (size_t k = 0; k < steps_.size(); ++k) {
    auto& [t, n] = by_kind[steps_[k].kind];
    t += ms[k];
    ++n;
    kernels += steps_[k].kind == "generated kernels" ? 1 : 0;
  }
  std::string out = detail::concat("kiln inductor profile: ", title_, " (", kernels, " kernels, ",
                                   steps_.size() - kernels, " extern calls), ", runs, " runs, ",
                                   fixed(run_ms, 3), " ms a run\n");
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto& [kind, tn] : by_kind)
    kinds.emplace_back(tn.first, detail::concat(kind, " (", tn.second, ")"));
  kinds.emplace_back(std::max(0.0, run_ms - in_steps),
                     "between steps (buffers, views, bookkeeping)");
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a > b; });
  out += "  ms a run      %  by kind\n";
  for (const auto& [t, what] : kinds)
    out += detail::concat("  ", pad_left(fixed(t, 3), 9), " ", percent(t), "  ", what, "\n");
  std::vector<size_t> order(steps_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] > ms[b]; });
  order.resize(std::min(order.size(), slowest));
  out += "  ms a run      %  slowest steps (step number: what it runs)\n";
  for (size_t k : order)
    out += detail::concat("  ", pad_left(fixed(ms[k], 3), 9), " ", percent(ms[k]), "  ", k, ": ",
                          steps_[k].label, "\n");
  return out;
}

std::shared_ptr<GraphProfile> register_graph_profile(std::string title,
                                                     std::vector<GraphProfile::StepInfo> steps) {
  auto profile = std::make_shared<GraphProfile>(std::move(title), std::move(steps));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.graphs.empty()) std::atexit(print_at_exit);
  r.graphs.push_back(profile);
  return profile;
}

std::string step_profile_report() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string out;
  for (const auto& g : r.graphs) out += g->report(g_slowest.load());
  return out;
}

// The profile of a graph compiled as `schedule`: a label per step, its kind, and the title
// naming the compiled function being compiled on this thread.
std::shared_ptr<GraphProfile> profile_graph(const ir::Graph& graph, const Schedule& schedule) {
  static std::atomic<int> graphs{0};
  const std::string* fn = diagnostics::tls_compiling_function;
  const std::string title =
      detail::concat("'", fn ? *fn : std::string("?"), "', graph ", ++graphs, " compiled");
  std::vector<GraphProfile::StepInfo> steps;
  for (const Step& st : schedule.steps) {
    if (st.kind == Step::Kind::Kernel) {
      const Kernel& k = schedule.kernels[static_cast<size_t>(st.index)];
      std::string ops;
      int64_t count = 0;  // nodes (a layer_norm's statistics are ops of their own)
      for (const KernelOp& op : k.ops) {
        if (op.output != 0) continue;
        if (count < 4) ops += detail::concat(count ? ", " : "", op.op->name);
        ++count;
      }
      if (count > 4) ops += ", …";
      steps.push_back(
          {detail::concat(k.name, ": ", ops, " (", count, " ops) over ", IntList(k.ranges)),
           "generated kernels"});
    } else {
      const ir::Node& n = graph.nodes[static_cast<size_t>(st.index)];
      steps.push_back({detail::concat("extern ", n.op->name, " %", st.index, " -> ",
                                      n.outputs[0].dtype, IntList(n.outputs[0].sizes)),
                       detail::concat("extern ", n.op->name)});
    }
  }
  return register_graph_profile(title, std::move(steps));
}

}  // namespace kiln::inductor
