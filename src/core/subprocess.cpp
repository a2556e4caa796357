// Running programs without a shell (see subprocess.h).
#include "core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "kiln/core/interrupt.h"

extern char** environ;

namespace kiln::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  pid_t pid = -1;
  int out = -1;  // read end of the stdout+stderr pipe; -1 once closed
  bool reaped = false;
};

// Starts one program in a new process group; fills `result` when it cannot start.
Running start(const std::vector<std::string>& argv, ProcessResult& result) {
  Running r;
  if (argv.empty()) {
    result.error = "no program given";
    return r;
  }
  const std::string path = find_executable(argv[0]);
  if (path.empty()) {
    result.error = "'" + argv[0] + "' is not an executable file on PATH";
    return r;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    result.error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group (so a time-out kills the compiler driver's children too), default
  // signal dispositions and an empty mask whatever the caller's threads have set.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD, SIGHUP}) sigaddset(&defaults, s);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int err = posix_spawn(&r.pid, path.c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (err != 0) {
    close(pipe_fds[0]);
    r.pid = -1;
    result.error = "cannot start " + path + ": " + std::strerror(err);
    return r;
  }
  r.out = pipe_fds[0];
  result.started = true;
  return r;
}

void record_status(int status, ProcessResult& result) {
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
}

}  // namespace

std::string ProcessResult::describe(double timeout_seconds) const {
  std::ostringstream os;
  if (!started)
    os << "could not be started: " << error;
  else if (timed_out)
    os << "did not finish within " << timeout_seconds << " s and was killed";
  else if (signal)
    os << "was killed by signal " << signal << " (" << strsignal(signal) << ")";
  else
    os << "exited with status " << exit_code;
  return os.str();
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Reads every pipe until it closes (the program and everything it started have exited or
// closed their output), then reaps; returns at the deadline too. Between polls it runs the
// interrupt check, which may throw.
template <class TimeLeft>
void wait_for(std::vector<Running>& running, std::vector<ProcessResult>& results, bool limited,
              const TimeLeft& time_left_ms, std::chrono::microseconds reap_wait,
              int interrupt_poll_ms) {
  for (;;) {
    poll_interrupt("waiting for a child process");
    std::vector<pollfd> fds;
    std::vector<size_t> owner;
    for (size_t j = 0; j < running.size(); ++j)
      if (running[j].out >= 0) {
        fds.push_back({running[j].out, POLLIN, 0});
        owner.push_back(j);
      }
    bool waiting = !fds.empty();
    if (!waiting)
      for (const Running& r : running) waiting = waiting || (r.pid > 0 && !r.reaped);
    if (!waiting) break;
    if (limited && time_left_ms() == 0) break;
    if (fds.empty()) {
      // Outputs closed but a process lives on: poll its exit.
      for (size_t j = 0; j < running.size(); ++j) {
        Running& r = running[j];
        if (r.pid <= 0 || r.reaped) continue;
        int status = 0;
        const pid_t got = waitpid(r.pid, &status, WNOHANG);
        if (got == r.pid) {
          r.reaped = true;
          record_status(status, results[j]);
        } else if (got < 0 && errno == ECHILD) {
          r.reaped = true;  // reaped elsewhere (SIGCHLD ignored): its status is unknown
        }
      }
      // (Usually it has just exited: first waits are short, later ones up to 5 ms.)
      std::this_thread::sleep_for(reap_wait);
      reap_wait = std::min(reap_wait * 2, std::chrono::microseconds(5000));
      continue;
    }
    const int left = time_left_ms();
    const int ready = poll(fds.data(), fds.size(),
                           left < 0 ? interrupt_poll_ms : std::min(left, interrupt_poll_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline: checked at the top
    for (size_t f = 0; f < fds.size(); ++f) {
      if (!(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Running& r = running[owner[f]];
      char buf[8192];
      const ssize_t got = read(r.out, buf, sizeof buf);
      if (got > 0) {
        results[owner[f]].output.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(r.out);
        r.out = -1;
      }
    }
  }
}

std::vector<ProcessResult> run_processes(const std::vector<std::vector<std::string>>& argvs,
                                         double timeout_seconds) {
  poll_interrupt("starting a child process");  // nothing starts while an interrupt unwinds
  std::vector<ProcessResult> results(argvs.size());
  std::vector<Running> running(argvs.size());
  for (size_t j = 0; j < argvs.size(); ++j) running[j] = start(argvs[j], results[j]);
  const bool limited = timeout_seconds > 0;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(limited ? timeout_seconds : 0));
  auto time_left_ms = [&]() -> int {
    if (!limited) return -1;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  };
  // How long one poll waits at most: the interrupt check runs between polls (Ctrl-C).
  constexpr int kInterruptPollMs = 50;
  std::chrono::microseconds reap_wait(50);
  // Whatever is unfinished goes, its whole group (a compiler driver's cc1plus and as too).
  auto stop_unfinished = [&] {
    for (size_t j = 0; j < running.size(); ++j) {
      Running& r = running[j];
      const bool output_open = r.out >= 0;
      if (output_open) close(r.out);
      r.out = -1;
      if (r.pid <= 0) continue;
      int status = 0;
      if (!r.reaped && waitpid(r.pid, &status, WNOHANG) == r.pid) {
        r.reaped = true;
        record_status(status, results[j]);
      }
      if (!output_open && r.reaped) continue;
      kill(-r.pid, SIGKILL);
      while (!r.reaped && waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.reaped = true;
      results[j].timed_out = true;
    }
  };
  try {
    wait_for(running, results, limited, time_left_ms, reap_wait, kInterruptPollMs);
  } catch (...) {  // interrupted: nothing is left running
    stop_unfinished();
    throw;
  }
  // Here every output is closed and every process reaped, or the deadline has passed.
  stop_unfinished();
  return results;
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds) {
  return run_processes({argv}, timeout_seconds).front();
}

}  // namespace kiln::detail
