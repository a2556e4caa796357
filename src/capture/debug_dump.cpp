// Debug dumps (KILN_DEBUG_DIR, kiln::set_debug_dir): an observer that writes every compiled
// graph, its guards, its backend's output and compile times, and the run's breaks and
// recompiles into one folder per run, listed in index.jsonl. The format is in docs/debugging.md;
// `kiln report` (tools/kiln/report_command.cpp) reads it.
//
// Dumping is for people debugging, so it must never be the reason a run fails: every write
// error is caught, reported once on stderr, and turns dumping off.
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "capture/state.h"
#include "kiln/io/json.h"

namespace kiln::capture {

namespace {

namespace fs = std::filesystem;

// ---- small writers ----

// One index line: a flat JSON object with fields in the order given.
class JsonLine {
 public:
  explicit JsonLine(std::string_view event) { field("event", event); }
  JsonLine& field(std::string_view key, std::string_view value) {
    sep();
    text_ += io::json_string(key) + ":" + io::json_string(value);
    return *this;
  }
  JsonLine& field(std::string_view key, const char* value) {
    return field(key, std::string_view(value));
  }
  JsonLine& field(std::string_view key, const std::string& value) {
    return field(key, std::string_view(value));
  }
  template <class T>
  requires std::is_arithmetic_v<T> JsonLine& field(std::string_view key, T value) {
    sep();
    std::ostringstream os;
    os.precision(9);
    os << value;
    text_ += io::json_string(key) + ":" + os.str();
    return *this;
  }
  std::string str() const { return text_ + "}\n"; }

 private:
  void sep() { text_ += text_.empty() ? "{" : ","; }
  std::string text_;
};

// A file name made of the characters every file system and shell takes as they are.
std::string file_safe(const std::string& name) {
  std::string out;
  for (char c : name)
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  if (out.size() > 60) out.resize(60);
  return out;
}

// The graph as a Graphviz digraph: inputs, constants and op calls as nodes, values as edges.
std::string graph_to_dot(const ir::Graph& g) {
  auto quoted = [](const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "\"";
  };
  auto meta = [](const TensorMeta& m) { return detail::concat(m.dtype, IntList(m.sizes)); };
  std::ostringstream os;
  os << "digraph graph_ {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    std::string label, shape;
    switch (n.kind) {
      case ir::NodeKind::Placeholder:
        label = detail::concat("%", i, " input ", n.input_index, "\n", meta(n.outputs[0]));
        shape = "shape=ellipse, style=filled, fillcolor=\"#dbeafe\"";
        break;
      case ir::NodeKind::Constant:
        label = detail::concat("%", i, " constant ", n.attrs.scalar(0));
        shape = "shape=plaintext";
        break;
      case ir::NodeKind::Call: {
        label = detail::concat("%", i, " ", n.op ? n.op->name : "?");
        for (const TensorMeta& m : n.outputs) label.append("\n").append(meta(m));
        shape = "shape=box, style=\"rounded,filled\", fillcolor=\"#fef3c7\"";
        break;
      }
    }
    os << "  n" << i << " [label=" << quoted(label) << ", " << shape << "];\n";
    for (ir::ValueRef v : n.inputs) os << "  n" << v.node << " -> n" << i << ";\n";
  }
  os << "  out [label=\"return\", shape=doublecircle, fontsize=9];\n";
  for (size_t k = 0; k < g.outputs.size(); ++k)
    os << "  n" << g.outputs[k].node << " -> out [label=\"" << k << "\"];\n";
  os << "}\n";
  return os.str();
}

std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string program_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// ---- the dump ----

class DebugDump final : public Observer {
 public:
  // Starts a run folder under `dir` ("" stops dumping); failing to, warns and stays off.
  void start(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    run_dir_.clear();
    functions_.clear();
    versions_.clear();
    aot_numbers_.clear();
    breaks_seen_.clear();
    failed_ = false;
    if (dir.empty()) return;
    guarded("creating the run folder in '" + dir + "'", [&] {
      // One folder per run; a second run started in the same second gets a suffix.
      const std::string base = detail::concat("run-", utc_now("%Y%m%dT%H%M%SZ"), "-", getpid());
      fs::path run = fs::path(dir) / base;
      for (int k = 2; fs::exists(run); ++k) run = fs::path(dir) / detail::concat(base, "-", k);
      fs::create_directories(run);
      run_dir_ = run.string();
      append_index(JsonLine("run")
                       .field("format", 1)
                       .field("pid", static_cast<int64_t>(getpid()))
                       .field("started", utc_now("%Y-%m-%dT%H:%M:%SZ"))
                       .field("program", program_path()));
    });
  }

  std::string run_dir() {
    std::lock_guard<std::mutex> lock(mu_);
    return active() ? run_dir_ : std::string();
  }

  void on_compiled(const detail::CompiledState& fn, const CompiledGraphRecord& rec) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active()) return;
    guarded("writing a graph of '" + fn.name + "'", [&] {
      const std::string folder = function_folder(fn);
      const int version = versions_[{fn.id, rec.graph_index}]++;
      const std::string stem = detail::concat(folder, "/graph", rec.graph_index, "_", version);
      JsonLine line("graph");
      line.field("function", static_cast<int64_t>(fn.id))
          .field("name", fn.name)
          .field("graph", static_cast<int64_t>(rec.graph_index))
          .field("version", version)
          .field("ops", rec.graph.num_calls())
          .field("inputs", rec.graph.num_inputs())
          .field("outputs", static_cast<int64_t>(rec.graph.outputs.size()));
      write_file(stem + ".kgraph", rec.graph.serialize());
      write_file(stem + ".listing.txt", rec.graph.to_string());
      write_file(stem + ".dot", graph_to_dot(rec.graph));
      std::string guards;
      for (const std::string& g : guard_lines(rec.raw)) guards += g + "\n";
      if (rec.symbolic)
        for (const std::string& g : ir::symbolic_guard_lines(rec.raw, *rec.symbolic))
          guards += g + "\n";
      write_file(stem + ".guards.txt", guards);
      line.field("graph_file", stem + ".kgraph")
          .field("listing_file", stem + ".listing.txt")
          .field("dot_file", stem + ".dot")
          .field("guards_file", stem + ".guards.txt");
      write_backend_outputs(stem, rec.backend_outputs, rec.seconds, line);
    });
  }

  // AOT autograd's graphs of a captured one, compiled when a call first needs them:
  // graph<G>_forward<N>, graph<G>_backward<N>, graph<G>_backward_partial<N>.
  void on_aot_compiled(const detail::CompiledState& fn, const AotGraphRecord& rec) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active()) return;
    guarded("writing an AOT graph of '" + fn.name + "'", [&] {
      const std::string folder = function_folder(fn);
      const int number = aot_numbers_[{fn.id, rec.graph_index, rec.part}]++;
      const std::string stem =
          detail::concat(folder, "/graph", rec.graph_index, "_", rec.part, number);
      JsonLine line("aot_graph");
      line.field("function", static_cast<int64_t>(fn.id))
          .field("name", fn.name)
          .field("graph", static_cast<int64_t>(rec.graph_index))
          .field("part", rec.part)
          .field("number", number);
      if (!rec.missing.empty()) line.field("missing_tangents", rec.missing);
      line.field("ops", rec.graph.num_calls())
          .field("inputs", rec.graph.num_inputs())
          .field("outputs", static_cast<int64_t>(rec.graph.outputs.size()));
      write_file(stem + ".kgraph", rec.graph.serialize());
      write_file(stem + ".listing.txt", rec.graph.to_string());
      write_file(stem + ".dot", graph_to_dot(rec.graph));
      line.field("graph_file", stem + ".kgraph")
          .field("listing_file", stem + ".listing.txt")
          .field("dot_file", stem + ".dot");
      write_backend_outputs(stem, rec.backend_outputs, rec.seconds, line);
    });
  }

  void on_compile_error(const detail::CompiledState& fn, size_t graph_index, const ir::Graph& graph,
                        const std::string& what) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active()) return;
    guarded("writing a failed graph of '" + fn.name + "'", [&] {
      const std::string folder = function_folder(fn);
      const std::string stem =
          detail::concat(folder, "/graph", graph_index, "_failed", failures_++);
      write_file(stem + ".kgraph", graph.serialize());
      write_file(stem + ".listing.txt", graph.to_string());
      append_index(JsonLine("compile_error")
                       .field("function", static_cast<int64_t>(fn.id))
                       .field("name", fn.name)
                       .field("graph", static_cast<int64_t>(graph_index))
                       .field("error", what)
                       .field("graph_file", stem + ".kgraph")
                       .field("listing_file", stem + ".listing.txt"));
    });
  }

  void on_break(const detail::CompiledState& fn, size_t graph_index,
                const GraphBreak& br) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active()) return;
    // A break in a loop happens on every call: the index lists each distinct one once.
    const std::string where = br.loc.known() ? br.loc.str() : std::string();
    if (!breaks_seen_.insert(detail::concat(fn.id, "|", graph_index, "|", br.reason, "|", where))
             .second)
      return;
    guarded("writing a graph break of '" + fn.name + "'", [&] {
      function_folder(fn);
      JsonLine line("break");
      line.field("function", static_cast<int64_t>(fn.id))
          .field("name", fn.name)
          .field("after_graph", static_cast<int64_t>(graph_index))
          .field("reason", br.reason);
      if (!br.loc.file.empty()) line.field("file", br.loc.file).field("line", br.loc.line);
      if (!br.loc.function.empty()) line.field("in", br.loc.function);
      append_index(line);
    });
  }

  void on_recompile(const detail::CompiledState& fn, size_t graph_index,
                    const std::string& reason) override {
    graph_event("recompile", "writing a recompile", fn, graph_index, reason);
  }

  void on_cache_limit(const detail::CompiledState& fn, size_t graph_index, int limit,
                      const std::string& reason) override {
    graph_event("cache_limit", "writing the cache limit", fn, graph_index, reason, limit);
  }

 private:
  // An index line about one graph of `fn` and why (a recompile; a cache limit, with the limit).
  void graph_event(std::string_view event, const std::string& doing,
                   const detail::CompiledState& fn, size_t graph_index, const std::string& reason,
                   std::optional<int> limit = std::nullopt) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active()) return;
    guarded(doing + " of '" + fn.name + "'", [&] {
      function_folder(fn);
      JsonLine line(event);
      line.field("function", static_cast<int64_t>(fn.id))
          .field("name", fn.name)
          .field("graph", static_cast<int64_t>(graph_index));
      if (limit) line.field("limit", *limit);
      append_index(line.field("reason", reason));
    });
  }

  bool active() const { return !run_dir_.empty() && !failed_; }

  // A graph's backend outputs (files named stem.<kind>) and phase times into its index line,
  // which is then appended; and the process's compile times so far.
  void write_backend_outputs(const std::string& stem,
                             const std::vector<diagnostics::BackendOutput>& outputs,
                             const std::map<std::string, double>& seconds, JsonLine& line) {
    for (size_t k = 0; k < outputs.size(); ++k) {
      const diagnostics::BackendOutput& out = outputs[k];
      const std::string file = stem + "." + file_safe(out.kind);
      write_file(file, out.text);
      // The first output is "the code"; a backend rarely makes more than one.
      const std::string prefix = k == 0 ? "code" : detail::concat("code", k);
      line.field(prefix + "_file", file).field(prefix + "_kind", out.kind);
      if (!out.path.empty()) line.field(prefix + "_module", out.path);
    }
    for (const auto& [phase, s] : seconds) line.field("seconds_" + phase, s);
    append_index(line);
    write_file("compile_times.txt", compile_times_str());
  }

  // Runs `write`; any failure warns once and stops the dump (never reaches the user's code).
  template <class F>
  void guarded(const std::string& what, F&& write) {
    try {
      write();
    } catch (const std::exception& e) {
      fail(what, e.what());
    } catch (...) {
      fail(what, "unknown error");
    }
  }
  void fail(const std::string& what, const std::string& why) {
    failed_ = true;
    std::cerr << "[kiln] warning: debug dump failed " << what << ": " << why
              << "; debug dumps are off for the rest of this run\n";
  }

  // The function's folder (relative to the run folder), announced in the index the first time.
  std::string function_folder(const detail::CompiledState& fn) {
    auto it = functions_.find(fn.id);
    if (it != functions_.end()) return it->second;
    const std::string folder = detail::concat("f", fn.id, "-", file_safe(fn.name));
    fs::create_directories(fs::path(run_dir_) / folder);
    std::string backend = "(a callable)";
    if (const auto* name = std::get_if<std::string>(&fn.options.backend))
      backend = name->empty() ? "eager" : *name;
    append_index(JsonLine("function")
                     .field("function", static_cast<int64_t>(fn.id))
                     .field("name", fn.name)
                     .field("backend", backend)
                     .field("folder", folder));
    functions_.emplace(fn.id, folder);
    return folder;
  }

  // Whole files appear at once (written beside, then renamed), so a reader never sees half.
  void write_file(const std::string& relative, const std::string& text) {
    const fs::path path = fs::path(run_dir_) / relative;
    const fs::path tmp = path.string() + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << text;
      f.close();
      if (!f) throw std::runtime_error("cannot write '" + tmp.string() + "'");
    }
    fs::rename(tmp, path);
  }

  // One line per event, flushed at once, so the index is usable even if the process dies.
  void append_index(const JsonLine& line) {
    const fs::path path = fs::path(run_dir_) / "index.jsonl";
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f << line.str();
    f.close();
    if (!f) throw std::runtime_error("cannot append to '" + path.string() + "'");
  }

  std::mutex mu_;
  std::string run_dir_;
  bool failed_ = false;
  std::map<uint64_t, std::string> functions_;            // function id -> folder
  std::map<std::pair<uint64_t, size_t>, int> versions_;  // (function, graph) -> graphs written
  // (function, graph, AOT part) -> graphs written
  std::map<std::tuple<uint64_t, size_t, std::string>, int> aot_numbers_;
  std::set<std::string> breaks_seen_;
  int failures_ = 0;
};

DebugDump& dump() {
  static auto* d = new DebugDump();
  return *d;
}
std::mutex g_dump_mu;
bool g_dump_registered = false;

void set_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_dump_mu);
  dump().start(path);
  // Registered only while dumping: without observers, capture skips every notification.
  const bool want = !dump().run_dir().empty();
  if (want && !g_dump_registered) add_observer(&dump());
  if (!want && g_dump_registered) remove_observer(&dump());
  g_dump_registered = want;
}

// KILN_DEBUG_DIR is read once, at the first kiln::compile, unless set_debug_dir came first.
std::atomic<bool> g_env_read{false};

}  // namespace

void debug_dump_first_use() {
  if (g_env_read.load(std::memory_order_relaxed) || g_env_read.exchange(true)) return;
  const char* env = std::getenv("KILN_DEBUG_DIR");
  if (!env || !*env || std::string_view(env) == "0") return;
  // "1", as in TORCH_COMPILE_DEBUG=1: the working directory's kiln_debug/ folder.
  set_dir(std::string_view(env) == "1" ? "kiln_debug" : env);
}

}  // namespace kiln::capture

namespace kiln {

void set_debug_dir(const std::string& path) {
  capture::g_env_read = true;  // an explicit choice wins over KILN_DEBUG_DIR
  capture::set_dir(path);
}

std::string debug_run_dir() { return capture::dump().run_dir(); }

}  // namespace kiln
