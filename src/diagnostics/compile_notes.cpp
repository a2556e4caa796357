// Compile times per phase, and what backends note about the graph being compiled.
#include <chrono>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "diagnostics/diagnostics.h"

namespace kiln {

namespace diagnostics {

thread_local const std::string* tls_compiling_function = nullptr;

thread_local GraphCompileCollector* tls_compile_collector = nullptr;
void note_backend_output(BackendOutput output) {
  if (tls_compile_collector) tls_compile_collector->outputs.push_back(std::move(output));
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The process's compile times: seconds per phase (over every phase it ran inside), the phase
// each ran inside as first seen ("" when outermost), and the wall time of outermost phases.
struct PhaseTimes {
  std::map<std::string, double> seconds;
  std::map<std::string, std::string> inside;
  double total = 0;
  int open_outermost = 0;  // outermost phases running now, over every thread
  double open_since = 0;   // when the first of those began
};
std::mutex g_times_mu;
PhaseTimes& times() {
  static auto* t = new PhaseTimes();
  return *t;
}
thread_local CompilePhase* tls_open_phase = nullptr;

// Records `seconds` of `phase`, run inside `outer` (null: outermost). Called with the lock held.
void record(const char* phase, const char* outer, double seconds) {
  if (tls_compile_collector) tls_compile_collector->seconds[phase] += seconds;
  PhaseTimes& t = times();
  t.seconds[phase] += seconds;
  t.inside.try_emplace(phase, outer ? outer : "");
}
}  // namespace

CompilePhase::CompilePhase(const char* name)
    : name_(name), outer_(tls_open_phase), start_(now_seconds()) {
  tls_open_phase = this;
  if (outer_) return;
  std::lock_guard<std::mutex> lock(g_times_mu);
  if (times().open_outermost++ == 0) times().open_since = start_;
}

void CompilePhase::finish() {
  if (done_) return;
  done_ = true;
  const double end = now_seconds();
  tls_open_phase = outer_;
  std::lock_guard<std::mutex> lock(g_times_mu);
  record(name_, outer_ ? outer_->name_ : nullptr, end - start_);
  PhaseTimes& t = times();
  if (!outer_ && --t.open_outermost == 0) t.total += end - t.open_since;
}

void reset_compile_times() {
  std::lock_guard<std::mutex> lock(g_times_mu);
  PhaseTimes& t = times();
  t.seconds.clear();
  t.inside.clear();
  t.total = 0;
  t.open_since = now_seconds();  // phases running through the reset count from it
}

void add_compile_time(const char* phase, double seconds) {
  const CompilePhase* outer = tls_open_phase;
  std::lock_guard<std::mutex> lock(g_times_mu);
  record(phase, outer ? outer->name() : nullptr, seconds);
  if (!outer) times().total += seconds;
}

void note_backend_count(const std::string& what, int64_t value) {
  if (tls_compile_collector) tls_compile_collector->counts[what] = value;
}

}  // namespace diagnostics

std::map<std::string, double> compile_times() {
  std::lock_guard<std::mutex> lock(diagnostics::g_times_mu);
  std::map<std::string, double> out = diagnostics::times().seconds;
  out["total"] = diagnostics::times().total;
  return out;
}

std::string compile_times_str() {
  diagnostics::PhaseTimes t;
  {
    std::lock_guard<std::mutex> lock(diagnostics::g_times_mu);
    t = diagnostics::times();
  }
  // Each phase under the one it ran inside, indented; parts do not add up to more than
  // their phase, and "total" is wall time, not the sum of the lines below it.
  std::map<std::string, std::vector<std::string>> parts;
  for (const auto& [phase, outer] : t.inside) parts[outer].push_back(phase);
  size_t width = std::string("total").size();
  std::vector<std::pair<std::string, double>> lines;
  auto walk = [&](auto&& self, const std::string& outer, size_t depth) -> void {
    for (const std::string& phase : parts[outer]) {
      lines.push_back({std::string(2 * depth, ' ') + phase, t.seconds[phase]});
      width = std::max(width, lines.back().first.size());
      if (phase != outer && depth < 8) self(self, phase, depth + 1);  // (a phase inside itself)
    }
  };
  walk(walk, "", 0);
  std::ostringstream os;
  os << "kiln::compile times (seconds, since start-up or kiln::reset(); a phase's parts are "
        "indented under it)\n";
  os << std::fixed << std::setprecision(6);
  os << "  " << std::left << std::setw(static_cast<int>(width)) << "total"
     << "  " << t.total << "  (wall time in compile phases)\n";
  for (const auto& [label, s] : lines)
    os << "  " << std::left << std::setw(static_cast<int>(width)) << label << "  " << s << "\n";
  return os.str();
}

}  // namespace kiln
