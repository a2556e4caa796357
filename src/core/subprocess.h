// Running other programs (the C++ compiler, addr2line) without a shell: an argument vector
// handed to posix_spawn, so no file name or path can ever be read as a command. Each program
// runs in its own process group, which is killed whole when a time limit passes.
#pragma once

#include <string>
#include <vector>

namespace kiln::detail {

struct ProcessResult {
  bool started = false;    // false: the program could not be started (see `error`)
  bool timed_out = false;  // the time limit passed; the process group was killed
  int exit_code = -1;      // the exit status when it exited normally, else -1
  int signal = 0;          // the signal that ended it, else 0
  std::string output;      // what it wrote to stdout and stderr, interleaved
  std::string error;       // why it could not be started (the errno text)

  bool succeeded() const { return started && !timed_out && exit_code == 0; }
  // "exited with status 1", "was killed by signal 9", "did not finish within 5 s", ...
  std::string describe(double timeout_seconds) const;
};

// Runs argv[0] (looked up on PATH when it holds no '/') with the arguments argv[1..], stdin
// from /dev/null, stdout and stderr captured together. timeout_seconds <= 0 means no limit.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds = 0);

// Runs several programs at once and waits for all of them (each limit counts from the start).
std::vector<ProcessResult> run_processes(const std::vector<std::vector<std::string>>& argvs,
                                         double timeout_seconds = 0);

// The full path of an executable `name` on $PATH ("" when there is none); `name` itself when it
// holds a '/' and is executable.
std::string find_executable(const std::string& name);

}  // namespace kiln::detail
