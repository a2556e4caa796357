// Logs by topic (kiln::set_logs, KILN_LOGS): which topics are on, and where lines go.
#include <atomic>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>

#include "diagnostics/diagnostics.h"

namespace kiln {

namespace diagnostics {

namespace {
std::atomic<unsigned> g_log_mask{0};
std::mutex g_log_mu;
std::function<void(const std::string&)>& log_sink() {
  static auto* s = new std::function<void(const std::string&)>();
  return *s;
}
unsigned parse_topics(const std::string& spec) {
  static const std::pair<const char*, LogTopic> names[] = {{"graph_breaks", LogTopic::GraphBreaks},
                                                           {"recompiles", LogTopic::Recompiles},
                                                           {"guards", LogTopic::Guards},
                                                           {"graphs", LogTopic::Graphs},
                                                           {"output_code", LogTopic::OutputCode},
                                                           {"fusion", LogTopic::Fusion},
                                                           {"dynamic", LogTopic::Dynamic}};
  unsigned mask = 0;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" +"));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    if (item == "all") {
      mask = ~0u;
      continue;
    }
    bool found = false;
    for (const auto& [n, t] : names)
      if (item == n) mask |= static_cast<unsigned>(t), found = true;
    KILN_CHECK(found, ValueError, "set_logs: unknown topic '", item,
               "' (topics: graph_breaks, recompiles, guards, graphs, output_code, fusion, dynamic, "
               "all)");
  }
  return mask;
}
const char* topic_name(LogTopic t) {
  switch (t) {
    case LogTopic::GraphBreaks:
      return "graph_breaks";
    case LogTopic::Recompiles:
      return "recompiles";
    case LogTopic::Guards:
      return "guards";
    case LogTopic::Graphs:
      return "graphs";
    case LogTopic::OutputCode:
      return "output_code";
    case LogTopic::Fusion:
      return "fusion";
    case LogTopic::Dynamic:
      return "dynamic";
  }
  return "?";
}
// KILN_LOGS is read once, when the library loads.
const bool g_env_logs_read = [] {
  if (const char* env = std::getenv("KILN_LOGS")) {
    try {
      g_log_mask = parse_topics(env);
    } catch (const Error& e) {
      std::cerr << "[kiln] KILN_LOGS ignored: " << e.what() << "\n";
    }
  }
  return true;
}();
}  // namespace

void log(LogTopic topic, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  // Multi-line payloads (graphs) keep the tag on the first line only.
  std::string line = std::string("[kiln:") + topic_name(topic) + "] " + text;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  if (log_sink())
    log_sink()(line);
  else
    std::cerr << line << "\n";
}

}  // namespace diagnostics

void set_logs(const std::vector<LogTopic>& topics) {
  unsigned m = 0;
  for (LogTopic t : topics) m |= static_cast<unsigned>(t);
  diagnostics::g_log_mask = m;
}
void set_logs(const std::string& spec) {
  diagnostics::g_log_mask = diagnostics::parse_topics(spec);
}
bool log_enabled(LogTopic topic) {
  return (diagnostics::g_log_mask.load(std::memory_order_relaxed) & static_cast<unsigned>(topic)) !=
         0;
}
void set_log_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(diagnostics::g_log_mu);
  diagnostics::log_sink() = std::move(sink);
}

}  // namespace kiln
