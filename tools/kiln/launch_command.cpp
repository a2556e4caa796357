// `kiln launch`: starts the processes of a data-parallel run on this machine (torchrun's job):
// each gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and its share of the cores;
// their output comes back prefixed with the rank; SIGINT/SIGTERM are forwarded; when one rank
// fails, the others are stopped and the launcher exits non-zero naming it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <ostream>
#include <random>
#include <thread>

#include "cli.h"
#include "commands.h"

namespace kiln::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd[2] = {-1, -1};  // its stdout and stderr (read ends)
  bool at_line_start[2] = {true, true};
  bool exited = false;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}
int shell_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Copies what a child wrote on stream `which` (0 stdout, 1 stderr) to `out`, each line prefixed
// with its rank (a carriage return starts a line too, so a redrawn progress line keeps its
// prefix). False at end of file.
bool relay(Child& c, int which, std::ostream& out) {
  char buf[4096];
  const ssize_t n = ::read(c.fd[which], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) return false;
  std::string text;
  const std::string prefix = "[rank " + std::to_string(c.rank) + "] ";
  for (ssize_t i = 0; i < n; ++i) {
    if (c.at_line_start[which]) text += prefix;
    text += buf[i];
    c.at_line_start[which] = buf[i] == '\n' || buf[i] == '\r';
  }
  out << text << std::flush;
  return true;
}

std::string random_run_id() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "run-%08x%08x", rd(), rd());
  return buf;
}

}  // namespace

ArgParser launch_parser() {
  ArgParser p("launch",
              "Start the processes of a data-parallel run (kiln::distributed): "
              "--nproc-per-node copies of PROGRAM on this machine, each with RANK, LOCAL_RANK, "
              "WORLD_SIZE, MASTER_ADDR, MASTER_PORT and OMP_NUM_THREADS set (torchrun's "
              "variables). Output lines come back prefixed with the rank. When one process "
              "fails, the others are stopped and kiln launch exits with its status.");
  p.add_int("nproc-per-node", "N", 1, "processes on this machine");
  p.add_int("nnodes", "M", 1, "machines taking part (each runs kiln launch)");
  p.add_int("node-rank", "R", 0, "this machine's number, 0 to M-1", 0);
  p.add_string("master-addr", "ADDR", "127.0.0.1",
               "rank 0's machine; with several machines, redis-server listens there on "
               "--master-port (docs/distributed.md)");
  p.add_int("master-port", "PORT", 29500, "the port of the rendezvous on --master-addr");
  p.add_string("run-id", "ID", "",
               "names this run's keys in the rendezvous store; with several machines, give every "
               "machine the same one (default: a fresh one on one machine, 'kiln' on several)");
  p.add_int("threads", "T", 0,
            "OMP_NUM_THREADS of each process (default: this machine's cores / N, at least 1; "
            "an OMP_NUM_THREADS already set wins)",
            0);
  p.add_float("grace", "SECONDS", 10,
              "after a process fails or a signal arrives, how long the others get to end after "
              "SIGTERM before SIGKILL",
              FloatRange::positive());
  p.add_rest("PROGRAM ARGS...", "the program each process runs, and its arguments");
  return p;
}

int run_launch(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const std::vector<std::string>& program = args.rest();
  if (program.empty())
    throw UsageError(
        "no program to launch: write it after --, e.g. kiln launch "
        "--nproc-per-node 2 -- ./train --steps 100");
  const int nproc = static_cast<int>(args.get_int("nproc-per-node"));
  const int nnodes = static_cast<int>(args.get_int("nnodes"));
  const int node_rank = static_cast<int>(args.get_int("node-rank"));
  if (node_rank >= nnodes)
    throw UsageError("--node-rank " + std::to_string(node_rank) + " is not below --nnodes " +
                     std::to_string(nnodes));
  const int world = nproc * nnodes;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int threads = static_cast<int>(args.get_int("threads"));
  if (threads == 0) threads = std::max(1, static_cast<int>(cores) / nproc);
  std::string run_id = args.get_string("run-id");
  if (run_id.empty()) run_id = nnodes == 1 ? random_run_id() : "kiln";

  // One machine: a fresh rendezvous folder for this run (removed at the end).
  std::string folder;
  if (nnodes == 1) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-launch-XXXXXX").string();
    KILN_CHECK(::mkdtemp(tmpl.data()) != nullptr, Error,
               "cannot make a rendezvous folder: ", std::strerror(errno));
    folder = tmpl;
  }
  struct FolderRemover {
    std::string path;
    ~FolderRemover() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } remover{folder};

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_signal = 0;

  std::vector<Child> children(static_cast<size_t>(nproc));
  for (int local = 0; local < nproc; ++local) {
    Child& c = children[static_cast<size_t>(local)];
    c.rank = node_rank * nproc + local;
    int out_pipe[2], err_pipe[2];
    KILN_CHECK(::pipe(out_pipe) == 0 && ::pipe(err_pipe) == 0, Error,
               "pipe: ", std::strerror(errno));
    std::map<std::string, std::string> env = {
        {"RANK", std::to_string(c.rank)},
        {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
        {"GROUP_RANK", std::to_string(node_rank)},
        {"MASTER_ADDR", args.get_string("master-addr")},
        {"MASTER_PORT", std::to_string(args.get_int("master-port"))},
        {"KILN_RUN_ID", run_id},
    };
    if (!folder.empty()) env["KILN_RENDEZVOUS_DIR"] = folder;
    out << std::flush;
    err << std::flush;
    const pid_t pid = ::fork();
    KILN_CHECK(pid >= 0, Error, "fork: ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);  // signals reach it through the launcher only
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 0);
      std::vector<char*> argv;
      for (const std::string& a : program) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "kiln launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    c.pid = pid;
    c.fd[0] = out_pipe[0];
    c.fd[1] = err_pipe[0];
    for (int fd : c.fd) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  // Watch: relay output, reap children, forward signals, stop the rest after a failure.
  const Child* failed = nullptr;
  int forwarded = 0;
  std::chrono::steady_clock::time_point stop_sent{};
  bool killed = false;
  auto signal_all = [&](int sig) {
    for (const Child& c : children)
      if (!c.exited) ::kill(c.pid, sig);
  };
  for (;;) {
    if (g_signal != 0 && forwarded == 0) {
      forwarded = g_signal;
      signal_all(forwarded);
      stop_sent = std::chrono::steady_clock::now();
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, int>> owners;
    for (Child& c : children)
      for (int which = 0; which < 2; ++which)
        if (c.fd[which] >= 0) {
          fds.push_back({c.fd[which], POLLIN, 0});
          owners.push_back({&c, which});
        }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        auto [c, which] = owners[i];
        if (!relay(*c, which, which == 0 ? out : err)) {
          ::close(c->fd[which]);
          c->fd[which] = -1;
        }
      }
    bool all_done = true;
    for (Child& c : children) {
      if (!c.exited) {
        int status = 0;
        if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
          c.exited = true;
          c.status = status;
          if (shell_status(status) != 0 && failed == nullptr && forwarded == 0) {
            failed = &c;
            err << "kiln launch: rank " << c.rank << " (pid " << c.pid << ") "
                << describe_status(status) << "; stopping the other ranks\n";
            signal_all(SIGTERM);
            stop_sent = std::chrono::steady_clock::now();
          }
        }
      }
      all_done = all_done && c.exited && c.fd[0] < 0 && c.fd[1] < 0;
    }
    if (all_done) break;
    if ((failed || forwarded) && !killed &&
        std::chrono::steady_clock::now() - stop_sent >
            std::chrono::duration<double>(args.get_float("grace"))) {
      for (const Child& c : children)
        if (!c.exited)
          err << "kiln launch: rank " << c.rank << " did not end within " << args.get_float("grace")
              << " s of SIGTERM; sending SIGKILL\n";
      signal_all(SIGKILL);
      killed = true;
    }
    if (fds.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  if (failed) return shell_status(failed->status);
  if (forwarded) {
    err << "kiln launch: stopped by signal " << forwarded << "\n";
    for (const Child& c : children)
      if (shell_status(c.status) != 0) return shell_status(c.status);
    return 128 + forwarded;
  }
  for (const Child& c : children)
    if (shell_status(c.status) != 0) {
      err << "kiln launch: rank " << c.rank << " " << describe_status(c.status) << "\n";
      return shell_status(c.status);
    }
  return kExitOk;
}

}  // namespace kiln::cli
