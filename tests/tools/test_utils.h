// Helpers shared by the tests of the `kiln` program.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace kiln::cli::testing {

// What one command printed, and its exit status.
struct Result {
  int status;
  std::string out;
  std::string err;
};

// Runs `kiln <args...>` in this process (run_cli), capturing its output.
inline Result run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = run_cli(args, out, err);
  return {status, out.str(), err.str()};
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace kiln::cli::testing
