// The `kiln` program as a function, so tests can run it in-process: picks the subcommand,
// parses its flags and maps errors to exit statuses.
//
// Exit statuses: 0 success; 1 an error while running (kiln::Error, e.g. a missing file);
// 2 a usage error (the message and the command's usage go to `err`); 3 a command that exists
// but is not implemented yet.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace kiln::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotImplemented = 3;

// The list of commands, printed by `kiln help` and on an unknown command.
std::string top_level_usage();

// Runs `kiln args...` (args excludes the program name).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::cli
