// `kiln minify REPRO_DIR`: shrinks a repro folder's failing graph (kiln::repro::minify) and
// writes the minimal case as a repro folder of the same format.
#include <filesystem>
#include <ostream>

#include "cli.h"
#include "commands.h"
#include "kiln/capture/repro.h"

namespace kiln::cli {

ArgParser minify_parser() {
  ArgParser p("minify",
              "Shrink a failing repro (KILN_REPRO_AFTER) to the fewest ops that still fail.");
  p.add_positional("repro", "REPRO_DIR", "the repro folder (KILN_REPRO_DIR/repro_<hash>)")
      .add_float("tolerance", "T", repro::kDefaultTolerance,
                 "accuracy tolerance (default: the repro's own)", FloatRange{0.0})
      .add_string("out", "DIR", "", "where to write the minimal repro (default: DIR/minified)");
  return p;
}

int run_minify(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const std::string& folder = args.get_string("repro");
  repro::ReproCase c = repro::load_repro(folder);
  if (args.was_given("tolerance")) c.tolerance = args.get_float("tolerance");
  const std::string dest = args.get_string("out").empty()
                               ? (std::filesystem::path(folder) / "minified").string()
                               : args.get_string("out");
  repro::MinifyResult r = repro::minify(c, lookup_backend(c.backend), &err);
  repro::write_repro_to(r.minimal, dest);
  out << "minified " << folder << ": " << r.ops_before << " ops -> " << r.ops_after << " ops ("
      << r.checks << " backend runs); " << repro::failure_kind_name(c.kind) << ": "
      << r.minimal.message << "\nminimal repro: " << dest << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
