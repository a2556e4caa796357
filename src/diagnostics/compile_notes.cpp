// Compile times per phase, and what backends note about the graph being compiled.
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
std::mutex g_times_mu;
std::map<std::string, double>& times() {
  static auto* m = new std::map<std::string, double>();
  return *m;
}
}  // namespace
void reset_compile_times() {
  std::lock_guard<std::mutex> lock(g_times_mu);
  times().clear();
}
void add_compile_time(const char* phase, double seconds) {
  if (tls_compile_collector) tls_compile_collector->seconds[phase] += seconds;
  std::lock_guard<std::mutex> lock(g_times_mu);
  times()[phase] += seconds;
  times()["total"] += seconds;
}

void note_backend_count(const std::string& what, int64_t value) {
  if (tls_compile_collector) tls_compile_collector->counts[what] = value;
}

}  // namespace diagnostics

std::map<std::string, double> compile_times() {
  std::lock_guard<std::mutex> lock(diagnostics::g_times_mu);
  return diagnostics::times();
}

std::string compile_times_str() {
  std::ostringstream os;
  os << "kiln::compile times (seconds, totals since start-up or kiln::reset())\n";
  for (const auto& [phase, s] : compile_times())
    os << "  " << std::left << std::setw(18) << phase << std::fixed << std::setprecision(6) << s
       << "\n";
  return os.str();
}

}  // namespace kiln
