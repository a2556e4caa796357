// The HTML compile report: reads a debug run's index.jsonl and the files it names, draws each
// graph with Graphviz, and writes one page with everything inline (no network, no scripts).
#include "report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/io/json.h"

extern char** environ;

namespace kiln::cli::report {

namespace fs = std::filesystem;

// ---- index lines ----

Event parse_event(const std::string& line) {
  io::JsonReader json(line, "index line", "the line");
  Event e;
  json.read_object("the line", [&](const std::string& key) {
    // Numbers and booleans are kept as written: the page shows them as text.
    e[key] = json.peek() == '"' ? json.read_string("field '" + key + "'")
                                : json.read_literal("field '" + key + "'");
  });
  if (!json.at_end()) json.syntax_error("text after the object");
  return e;
}

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---- the page ----

namespace {

std::string get(const Event& e, const std::string& key) {
  auto it = e.find(key);
  return it == e.end() ? std::string() : it->second;
}

// A file of the run, or nullopt-like "" with ok=false when it cannot be read.
bool read_file(const fs::path& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

// A path from the index, kept inside the run folder (the index is data, not trusted to point
// anywhere else).
fs::path inside(const fs::path& run, const std::string& relative) {
  const fs::path rel(relative);
  if (relative.empty() || rel.is_absolute()) return {};
  for (const fs::path& part : rel)
    if (part == "..") return {};
  return run / rel;
}

// Where a source file named by a break is. Compilers record the path they were given, often
// relative to the build folder: try it as is, then against the folders above the program that
// made the run (programs usually live in or below their build folder).
fs::path find_source(const std::string& file, const std::string& program) {
  std::error_code ec;
  if (file.empty()) return {};
  if (fs::path(file).is_absolute() || program.empty())
    return fs::is_regular_file(file, ec) ? fs::path(file) : fs::path();
  if (fs::is_regular_file(file, ec)) return file;
  for (fs::path dir = fs::path(program).parent_path(); !dir.empty() && dir != dir.root_path();
       dir = dir.parent_path())
    if (fs::is_regular_file(dir / file, ec)) return dir / file;
  return {};
}

// The source line `line` of `file` (1-based), trimmed; "" when unreadable.
std::string source_line(const std::string& file, const std::string& line_text,
                        const std::string& program) {
  int line = 0;
  try {
    line = std::stoi(line_text);
  } catch (...) {
    return "";
  }
  const fs::path path = find_source(file, program);
  if (path.empty()) return "";
  std::ifstream f(path);
  std::string text;
  for (int i = 1; i <= line && std::getline(f, text); ++i)
    if (i == line) {
      const size_t b = text.find_first_not_of(" \t");
      return b == std::string::npos ? "" : text.substr(b);
    }
  return "";
}

struct DotResult {
  bool ran = false;  // the program could be started
  int status = -1;   // its exit status
  std::string svg;   // its standard output
};

// Runs `dot -Tsvg file` without a shell (paths may hold any character).
DotResult run_dot(const std::string& dot, const fs::path& file) {
  DotResult r;
  int out[2];
  if (pipe(out) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const std::string path = file.string();
  std::vector<char*> argv = {const_cast<char*>(dot.c_str()), const_cast<char*>("-Tsvg"),
                             const_cast<char*>(path.c_str()), nullptr};
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, dot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (err != 0) {
    close(out[0]);
    return r;
  }
  char buf[65536];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.svg.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  // 127: the shell-less spawn found no program (some libcs report it this way).
  r.ran = r.status != 127;
  return r;
}

// A captured graph's (`graph` event) or one AOT autograd made of it (`aot_graph`).
bool is_aot(const Event& g) { return get(g, "event") == "aot_graph"; }
std::string anchor(const Event& g) {
  if (is_aot(g))
    return "aot-f" + get(g, "function") + "-g" + get(g, "graph") + "-" + get(g, "part") +
           get(g, "number");
  return "graph-f" + get(g, "function") + "-g" + get(g, "graph") + "-v" + get(g, "version");
}
// How a graph is named in links and tables: "0.1" (graph 0, recompile 1), "0 backward0".
std::string label(const Event& g) {
  if (is_aot(g)) return get(g, "graph") + " " + get(g, "part") + get(g, "number");
  return get(g, "graph") + "." + get(g, "version");
}

std::string seconds_text(double s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(s < 0.01 ? 6 : 3) << s << " s";
  return os.str();
}

double to_double(const std::string& s) {
  try {
    return s.empty() ? 0 : std::stod(s);
  } catch (...) {
    return 0;
  }
}

const char* kStyle = R"CSS(
:root { --ink:#1f2937; --muted:#6b7280; --line:#e5e7eb; --accent:#b45309; --bg:#fafaf9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
       color: var(--ink); background: var(--bg); }
header, section { max-width: 1200px; margin: 0 auto; padding: 12px 24px; }
header { border-bottom: 3px solid var(--accent); background: #fff; max-width: none; }
h1 { margin: 4px 0; font-size: 22px; } h1 span { color: var(--accent); }
h2 { border-bottom: 1px solid var(--line); padding-bottom: 4px; margin-top: 28px; }
h3 { margin: 0 0 6px; font-size: 15px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; font-weight: 600; }
.meta { color: var(--muted); font-size: 13px; }
.stats { display: flex; flex-wrap: wrap; gap: 10px; list-style: none; padding: 0; }
.stats li { background: #fff7ed; border: 1px solid #fed7aa; border-radius: 6px;
            padding: 6px 12px; } .stats b { font-size: 18px; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f4; }
code, pre { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { background: #fff; border: 1px solid var(--line); padding: 8px; overflow-x: auto;
      white-space: pre; margin: 4px 0; }
.graph { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px;
         margin: 14px 0; }
.picture { overflow: auto; max-height: 720px; border: 1px dashed var(--line); padding: 6px;
           text-align: center; }
.picture svg { max-width: 100%; height: auto; }
.note { background: #fef9c3; border: 1px solid #fde047; padding: 6px 10px; border-radius: 4px; }
.error { background: #fee2e2; border-color: #fca5a5; }
.src { color: #065f46; }
summary { cursor: pointer; font-weight: 600; margin-top: 6px; }
.empty { color: var(--muted); font-style: italic; }
)CSS";

class Page {
 public:
  Page(fs::path run, Options options) : run_(std::move(run)), options_(std::move(options)) {}

  std::string render() {
    read_index();
    std::ostringstream os;
    os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<title>Kiln compile report: " << html_escape(run_.filename().string())
       << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
    summary(os);
    functions(os);
    breaks(os);
    recompiles(os);
    compile_errors(os);
    graphs(os);
    compile_times(os);
    os << "</body>\n</html>\n";
    return os.str();
  }

 private:
  void read_index() {
    std::ifstream f(run_ / "index.jsonl");
    if (!f)
      throw Error("kiln report: '" + run_.string() +
                  "' is not a debug run folder (no readable index.jsonl); pass a run-... folder "
                  "made by KILN_DEBUG_DIR or kiln::set_debug_dir");
    int number = 0;
    for (std::string line; std::getline(f, line);) {
      ++number;
      if (line.empty()) continue;
      try {
        Event e = parse_event(line);
        const std::string kind = get(e, "event");
        if (kind == "run")
          run_event_ = e;
        else if (kind == "function")
          functions_.push_back(e);
        else if (kind == "graph")
          graphs_.push_back(e);
        else if (kind == "aot_graph")
          aot_graphs_.push_back(e);
        else if (kind == "break")
          breaks_.push_back(e);
        else if (kind == "recompile")
          recompiles_.push_back(e);
        else if (kind == "compile_error")
          errors_.push_back(e);
        else if (kind == "cache_limit")
          limits_.push_back(e);
      } catch (const Error& e) {
        // A process killed mid-write leaves a partial last line: show the rest.
        problems_.push_back("index.jsonl line " + std::to_string(number) + ": " + e.what());
      }
    }
  }

  int64_t count(const std::vector<Event>& events, const std::string& function) const {
    int64_t n = 0;
    for (const Event& e : events) n += get(e, "function") == function;
    return n;
  }
  // The graph's compile time: the passes and the backend (inductor's own phases, codegen,
  // compiler and load, are parts of the backend's time).
  static double graph_seconds(const Event& g) {
    return to_double(get(g, "seconds_passes")) + to_double(get(g, "seconds_backend_compile"));
  }
  std::string function_name(const std::string& id) const {
    for (const Event& f : functions_)
      if (get(f, "function") == id) return get(f, "name");
    return "function " + id;
  }

  void summary(std::ostream& os) {
    double total = 0;
    for (const Event& g : graphs_) total += graph_seconds(g);
    for (const Event& g : aot_graphs_) total += graph_seconds(g);
    os << "<header id=\"summary\">\n<h1><span>Kiln</span> compile report</h1>\n"
       << "<p class=\"meta\">run <code>" << html_escape(run_.string()) << "</code>";
    if (!get(run_event_, "program").empty())
      os << " &middot; program <code>" << html_escape(get(run_event_, "program")) << "</code>";
    if (!get(run_event_, "pid").empty())
      os << " &middot; pid " << html_escape(get(run_event_, "pid"));
    if (!get(run_event_, "started").empty())
      os << " &middot; started " << html_escape(get(run_event_, "started"));
    os << "</p>\n<ul class=\"stats\">"
       << "<li><b>" << functions_.size() << "</b> compiled functions</li>"
       << "<li><b>" << graphs_.size() << "</b> graphs</li>"
       << (aot_graphs_.empty()
               ? std::string()
               : "<li><b>" + std::to_string(aot_graphs_.size()) + "</b> AOT autograd graphs</li>")
       << "<li><b>" << breaks_.size() << "</b> graph breaks</li>"
       << "<li><b>" << recompiles_.size() << "</b> recompiles</li>"
       << "<li><b>" << errors_.size() << "</b> compile errors</li>"
       << (limits_.empty()
               ? std::string()
               : "<li><b>" + std::to_string(limits_.size()) + "</b> cache limits hit</li>")
       << "<li><b>" << seconds_text(total) << "</b> compiling</li></ul>\n"
       << "<nav><a href=\"#functions\">Functions</a><a href=\"#breaks\">Graph breaks</a>"
       << "<a href=\"#recompiles\">Recompiles</a><a href=\"#graphs\">Graphs</a>"
       << "<a href=\"#compile-times\">Compile times</a></nav>\n";
    for (const std::string& p : problems_)
      os << "<p class=\"note error\">" << html_escape(p) << "</p>\n";
    os << "</header>\n";
  }

  void functions(std::ostream& os) {
    os << "<section id=\"functions\">\n<h2>Compiled functions</h2>\n";
    if (functions_.empty()) {
      os << "<p class=\"empty\">No function was compiled in this run.</p>\n</section>\n";
      return;
    }
    os << "<table>\n<tr><th>#</th><th>name</th><th>backend</th><th>graphs</th><th>breaks</th>"
       << "<th>recompiles</th><th>compile time</th></tr>\n";
    for (const Event& f : functions_) {
      const std::string id = get(f, "function");
      double seconds = 0;
      std::string links;
      for (const std::vector<Event>* events : {&graphs_, &aot_graphs_})
        for (const Event& g : *events)
          if (get(g, "function") == id) {
            seconds += graph_seconds(g);
            links +=
                " <a href=\"#" + html_escape(anchor(g)) + "\">" + html_escape(label(g)) + "</a>";
          }
      os << "<tr class=\"function\" id=\"function-" << html_escape(id) << "\"><td>"
         << html_escape(id) << "</td><td><code>" << html_escape(get(f, "name"))
         << "</code></td><td>" << html_escape(get(f, "backend")) << "</td><td>"
         << count(graphs_, id) << links << "</td><td>" << count(breaks_, id) << "</td><td>"
         << count(recompiles_, id) << "</td><td>" << seconds_text(seconds) << "</td></tr>\n";
    }
    os << "</table>\n</section>\n";
  }

  void breaks(std::ostream& os) {
    os << "<section id=\"breaks\">\n<h2>Graph breaks</h2>\n"
       << "<p class=\"meta\">Each distinct break once (a break in a loop happens on every "
          "call).</p>\n";
    if (breaks_.empty()) {
      os << "<p class=\"empty\">No graph breaks.</p>\n</section>\n";
      return;
    }
    os << "<table>\n<tr><th>function</th><th>after graph</th><th>reason</th><th>where</th></tr>\n";
    for (const Event& b : breaks_) {
      std::string where = get(b, "file");
      if (!get(b, "line").empty()) where.append(":").append(get(b, "line"));
      if (!get(b, "in").empty()) where.append(where.empty() ? "in " : " in ").append(get(b, "in"));
      os << "<tr class=\"break\"><td><code>" << html_escape(get(b, "name")) << "</code></td><td>"
         << html_escape(get(b, "after_graph")) << "</td><td>" << html_escape(get(b, "reason"))
         << "</td><td>"
         << (where.empty() ? "<span class=\"empty\">unknown</span>"
                           : "<code>" + html_escape(where) + "</code>");
      const std::string src =
          source_line(get(b, "file"), get(b, "line"), get(run_event_, "program"));
      if (!src.empty()) os << "<pre class=\"src\">" << html_escape(src) << "</pre>";
      os << "</td></tr>\n";
    }
    os << "</table>\n</section>\n";
  }

  void recompiles(std::ostream& os) {
    os << "<section id=\"recompiles\">\n<h2>Recompiles</h2>\n";
    if (recompiles_.empty() && limits_.empty()) {
      os << "<p class=\"empty\">No recompiles.</p>\n</section>\n";
      return;
    }
    os << "<table>\n<tr><th>function</th><th>graph</th><th>reason</th></tr>\n";
    for (const Event& r : recompiles_)
      os << "<tr class=\"recompile\"><td><code>" << html_escape(get(r, "name"))
         << "</code></td><td>" << html_escape(get(r, "graph")) << "</td><td>"
         << html_escape(get(r, "reason")) << "</td></tr>\n";
    for (const Event& r : limits_)
      os << "<tr class=\"cache-limit\"><td><code>" << html_escape(get(r, "name"))
         << "</code></td><td>" << html_escape(get(r, "graph")) << "</td><td><b>hit "
         << "cache_size_limit (" << html_escape(get(r, "limit"))
         << "): runs eagerly from now on.</b> Last reason: " << html_escape(get(r, "reason"))
         << "</td></tr>\n";
    os << "</table>\n</section>\n";
  }

  void compile_errors(std::ostream& os) {
    if (errors_.empty()) return;
    os << "<section id=\"compile-errors\">\n<h2>Compile errors</h2>\n";
    for (const Event& e : errors_) {
      os << "<div class=\"graph\"><h3><code>" << html_escape(get(e, "name")) << "</code> graph "
         << html_escape(get(e, "graph")) << "</h3><p class=\"note error\">"
         << html_escape(get(e, "error")) << "</p>";
      file_block(os, "Listing", get(e, "listing_file"), "listing", true);
      os << "</div>\n";
    }
    os << "</section>\n";
  }

  // A <details> with a file of the run as preformatted text (or a note if it is missing).
  void file_block(std::ostream& os, const std::string& title, const std::string& file,
                  const std::string& css, bool open, const std::string& extra = "") {
    std::string text;
    const fs::path path = inside(run_, file);
    os << "<details class=\"" << css << "\"" << (open ? " open" : "") << "><summary>"
       << html_escape(title) << "</summary>" << extra;
    if (!path.empty() && read_file(path, text))
      os << "<pre>" << html_escape(text) << "</pre>";
    else
      os << "<p class=\"note\">" << html_escape(file.empty() ? "not written" : file + ": missing")
         << "</p>";
    os << "</details>\n";
  }

  void picture(std::ostream& os, const Event& g) {
    os << "<div class=\"picture\">";
    const fs::path dot_file = inside(run_, get(g, "dot_file"));
    const auto nodes = static_cast<size_t>(to_double(get(g, "ops")) + to_double(get(g, "inputs")));
    if (dot_file.empty() || !fs::exists(dot_file)) {
      os << "<p class=\"note\">No Graphviz file was written for this graph.</p>";
    } else if (nodes > options_.max_picture_nodes) {
      os << "<p class=\"note\">" << nodes << " nodes: too large to draw (the limit is "
         << options_.max_picture_nodes << "); see the listing.</p>";
    } else {
      DotResult r;
      if (!dot_missing_) r = run_dot(options_.dot, dot_file);  // missing once: missing for all
      const size_t svg = r.svg.find("<svg");
      if (!r.ran) {
        dot_missing_ = true;
        os << "<p class=\"note dot-missing\">Graphviz's <code>" << html_escape(options_.dot)
           << "</code> was not found, so graphs are shown as listings only. Install "
              "Graphviz (Debian: <code>apt-get install graphviz</code>) and run "
              "<code>kiln report</code> again for pictures.</p>";
      } else if (r.status != 0 || svg == std::string::npos) {
        os << "<p class=\"note\"><code>" << html_escape(options_.dot) << " -Tsvg</code> failed"
           << " (exit status " << r.status << "); see the listing.</p>";
      } else {
        os << r.svg.substr(svg);  // drop the XML prolog and DOCTYPE: inline SVG needs neither
      }
    }
    os << "</div>\n";
  }

  void graphs(std::ostream& os) {
    os << "<section id=\"graphs\">\n<h2>Graphs</h2>\n";
    if (graphs_.empty()) os << "<p class=\"empty\">No graphs were compiled.</p>\n";
    for (const Event& g : graphs_) graph_article(os, g);
    // What AOT autograd made of them for training, compiled when a call first needed it.
    for (const Event& g : aot_graphs_) graph_article(os, g);
    os << "</section>\n";
  }

  void graph_article(std::ostream& os, const Event& g) {
    std::string title = "graph " + get(g, "graph");
    if (is_aot(g)) {
      title += ", AOT autograd's " + get(g, "part") + " " + get(g, "number");
      if (!get(g, "missing_tangents").empty())
        title += " (without tangents " + get(g, "missing_tangents") + ")";
    } else if (get(g, "version") != "0") {
      title += " (recompile " + get(g, "version") + ")";
    }
    os << "<article class=\"graph" << (is_aot(g) ? " aot" : "") << "\" id=\""
       << html_escape(anchor(g)) << "\">\n<h3><code>" << html_escape(get(g, "name"))
       << "</code> &middot; " << html_escape(title) << "</h3>\n<p class=\"meta\">"
       << html_escape(get(g, "ops")) << " ops, " << html_escape(get(g, "inputs")) << " inputs, "
       << html_escape(get(g, "outputs")) << " outputs &middot; compile "
       << seconds_text(graph_seconds(g)) << " &middot; text form <code>"
       << html_escape(get(g, "graph_file")) << "</code></p>\n";
    picture(os, g);
    file_block(os, "Listing", get(g, "listing_file"), "listing", true);
    if (!is_aot(g)) file_block(os, "Guards", get(g, "guards_file"), "guards", false);
    for (const std::string prefix : {"code", "code1", "code2"}) {
      if (get(g, prefix + "_file").empty()) continue;
      const std::string module = get(g, prefix + "_module");
      file_block(os, "Backend output (" + get(g, prefix + "_kind") + ")", get(g, prefix + "_file"),
                 "code", false,
                 module.empty()
                     ? ""
                     : "<p class=\"meta\">module <code>" + html_escape(module) + "</code></p>");
    }
    os << "</article>\n";
  }

  void compile_times(std::ostream& os) {
    os << "<section id=\"compile-times\">\n<h2>Compile times</h2>\n";
    if (!graphs_.empty()) {
      os << "<table>\n<tr><th>graph</th><th>phase</th><th>seconds</th></tr>\n";
      for (const std::vector<Event>* events : {&graphs_, &aot_graphs_})
        for (const Event& g : *events)
          for (const auto& [key, value] : g)
            if (key.rfind("seconds_", 0) == 0)
              os << "<tr><td><a href=\"#" << html_escape(anchor(g)) << "\"><code>"
                 << html_escape(get(g, "name")) << "</code> " << html_escape(label(g))
                 << "</a></td><td>" << html_escape(key.substr(8)) << "</td><td>"
                 << html_escape(value) << "</td></tr>\n";
      os << "</table>\n";
    }
    std::string totals;
    if (read_file(run_ / "compile_times.txt", totals))
      os << "<pre id=\"compile-times-totals\">" << html_escape(totals) << "</pre>\n";
    os << "</section>\n";
  }

  fs::path run_;
  Options options_;
  Event run_event_;
  std::vector<Event> functions_, graphs_, aot_graphs_, breaks_, recompiles_, errors_, limits_;
  std::vector<std::string> problems_;
  bool dot_missing_ = false;
};

}  // namespace

std::string render_html(const std::string& run_dir, const Options& options) {
  return Page(run_dir, options).render();
}

}  // namespace kiln::cli::report
