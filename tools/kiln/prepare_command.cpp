// `kiln prepare`: the one-time work of the inductor backend done ahead (cpp_compiler.h).
#include <ostream>

#include "backends/inductor/cpp_compiler.h"
#include "cli.h"
#include "commands.h"

namespace kiln::cli {

ArgParser prepare_parser() {
  ArgParser p("prepare",
              "Precompile the runtime header that the inductor backend's generated code includes, "
              "into a folder beside the Kiln library, so that the first compile in a fresh cache "
              "does not pay for it. The build and cmake --install run it; run it again after "
              "changing the C++ compiler.");
  return p;
}

int run_prepare(const ParsedArgs&, std::ostream& out, std::ostream&) {
  out << "kiln prepare: " << inductor::prepare_runtime_header() << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
