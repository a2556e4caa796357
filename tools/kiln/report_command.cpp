// `kiln report RUN_DIR -o report.html`: the HTML compile report of a debug run (report.h).
#include <filesystem>
#include <fstream>
#include <ostream>

#include "cli.h"
#include "commands.h"
#include "report.h"
#include "run_guard.h"

namespace kiln::cli {

ArgParser report_parser() {
  ArgParser p("report",
              "Write an HTML page (self-contained: inline CSS and SVG) showing what a debug run "
              "compiled: functions, graphs drawn with Graphviz, breaks, recompiles, guards, "
              "generated code and compile times. Make a run with KILN_DEBUG_DIR=DIR.");
  p.add_positional("run", "RUN_DIR", "a run folder, DIR/run-<time>-<pid>, of a debug dump")
      .add_path("out", "FILE", "report.html", "the page to write", PathRole::kOutput)
      .add_string("dot", "PROGRAM", "dot", "the Graphviz program that draws graphs")
      .add_short('o', "out");
  return p;
}

int run_report(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  const std::string& run = args.get_string("run");
  std::error_code ec;
  if (!fs::is_directory(run, ec)) throw FileError("RUN_DIR: '" + run + "' is not a folder");
  report::Options options;
  options.dot = args.get_string("dot");
  const std::string page = report::render_html(run, options);
  const std::string& path = args.get_string("out");
  // Written beside and renamed, so an old report is never left half-overwritten.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << page;
    f.close();
    if (!f) throw FileError("--out: cannot write '" + tmp + "'");
  }
  fs::rename(tmp, path, ec);
  if (ec) throw FileError("--out: cannot write '" + path + "': " + ec.message());
  out << "wrote " << path << " (" << page.size() << " bytes)\n";
  return kExitOk;
}

}  // namespace kiln::cli
