// Memory estimates and limits, output-file checks, signal handling and --save-every.
#include "run_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "cli_args.h"

namespace kiln::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// The cgroup path of this process for the v2 hierarchy ("0::/x") or the v1 memory controller
// ("N:...memory...:/x"); empty when absent.
std::string cgroup_path(const std::string& proc_self_cgroup, bool v2) {
  std::istringstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (v2 ? (line.compare(0, a, "0") == 0 && controllers.empty())
           : (("," + controllers + ",").find(",memory,") != std::string::npos))
      return line.substr(b + 1);
  }
  return "";
}

// Room left under a cgroup limit: limit - usage, or -1 without a limit.
double cgroup_room(const std::string& limit_file, const std::string& usage_file) {
  const double limit = parse_cgroup_bytes(read_text(limit_file));
  if (limit < 0 || limit >= std::ldexp(1.0, 60)) return -1;  // v1 writes ~2^63 for "none"
  const double usage = parse_cgroup_bytes(read_text(usage_file));
  return std::max(0.0, limit - std::max(0.0, usage));
}

std::atomic<int> g_pending{0};
struct sigaction g_old_int, g_old_term;
std::atomic<bool> g_installed{false};

void on_signal(int sig) {
  int expected = 0;
  if (!g_pending.compare_exchange_strong(expected, sig)) {
    // A second signal: give up waiting for the loop; die the default way.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

// ---- memory ---------------------------------------------------------------------------------

double parse_meminfo_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 13, "MemAvailable:") != 0) continue;
    std::istringstream fields(line.substr(13));
    double kb = -1;
    std::string unit;
    if (fields >> kb && kb >= 0) return kb * 1024.0;  // the unit is always kB
  }
  return -1;
}

double parse_cgroup_bytes(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\t");
  if (end == std::string::npos) return -1;
  const std::string s = text.substr(0, end + 1);
  if (s == "max" || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::strtod(s.c_str(), nullptr);
}

AvailableMemory available_memory() {
  AvailableMemory a{std::numeric_limits<double>::infinity(), "unknown"};
  const double meminfo = parse_meminfo_available(read_text("/proc/meminfo"));
  if (meminfo >= 0) a = {meminfo, "MemAvailable in /proc/meminfo"};
  const std::string cg = read_text("/proc/self/cgroup");
  const std::string v2 = cgroup_path(cg, true), v1 = cgroup_path(cg, false);
  auto consider = [&](double room, const std::string& what) {
    if (room >= 0 && room < a.bytes) a = {room, what};
  };
  if (!v2.empty()) {
    for (const std::string& dir : {"/sys/fs/cgroup" + v2, std::string("/sys/fs/cgroup")}) {
      const double room = cgroup_room(dir + "/memory.max", dir + "/memory.current");
      if (room >= 0) {
        consider(room, "the cgroup v2 limit in " + dir + "/memory.max, less what is in use");
        break;
      }
    }
  }
  if (!v1.empty()) {
    for (const std::string& dir :
         {"/sys/fs/cgroup/memory" + v1, std::string("/sys/fs/cgroup/memory")}) {
      const double room =
          cgroup_room(dir + "/memory.limit_in_bytes", dir + "/memory.usage_in_bytes");
      if (room >= 0) {
        consider(room, "the cgroup v1 limit in " + dir + "/memory.limit_in_bytes, less usage");
        break;
      }
    }
  }
  return a;
}

namespace {
double parameter_count(const nn::GPTConfig& c) {
  const double V = static_cast<double>(c.vocab_size), T = static_cast<double>(c.block_size),
               L = static_cast<double>(c.n_layer), E = static_cast<double>(c.n_embd);
  return V * E + T * E + L * (12 * E * E + 13 * E) + 2 * E + (c.tied_head ? 0 : E * V);
}
}  // namespace

double estimate_train_bytes(const nn::GPTConfig& c, int64_t batch) {
  const double B = static_cast<double>(batch), T = static_cast<double>(c.block_size),
               L = static_cast<double>(c.n_layer), E = static_cast<double>(c.n_embd),
               H = static_cast<double>(c.n_head), V = static_cast<double>(c.vocab_size);
  const double state = 16.0 * parameter_count(c);  // parameter, gradient, AdamW m and v
  const double activations =
      4.0 * (L * (16 * B * T * E + 2 * B * H * T * T) + 3 * B * T * V) + 16.0 * B * T;
  return state + activations;
}

double estimate_generate_bytes(const nn::GPTConfig& c) {
  const double T = static_cast<double>(c.block_size), E = static_cast<double>(c.n_embd),
               H = static_cast<double>(c.n_head), V = static_cast<double>(c.vocab_size);
  return 4.0 * parameter_count(c) + 4.0 * (8 * T * E + 2 * H * T * T + T * V);
}

std::string format_bytes(double bytes) {
  std::ostringstream os;
  if (bytes >= 1e12 * 1000) {
    os << std::setprecision(2) << bytes / 1e9 << " GB";
  } else if (bytes >= 1e9) {
    os << std::fixed << std::setprecision(1) << bytes / 1e9 << " GB";
  } else {
    os << std::fixed << std::setprecision(0) << bytes / 1e6 << " MB";
  }
  return os.str();
}

void check_fits(double need, const AvailableMemory& avail, const std::string& what,
                const std::string& advice) {
  if (!(need > avail.bytes)) return;
  throw ResourceError(what + " needs about " + format_bytes(need) + ", but only " +
                      format_bytes(avail.bytes) + " is available (" + avail.source + "); " +
                      advice);
}

// ---- the output file ------------------------------------------------------------------------

void check_output_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a folder"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    throw FileError(flag + ": '" + path + "' exists and is " + kind +
                    ", not a regular file; refusing to replace it (name a file)");
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw FileError(flag + ": folder '" + dir + "' does not exist (for '" + path + "')");
  // Creating a file is the only reliable test of writability (root ignores permissions,
  // read-only mounts ignore them the other way).
  const std::string probe = dir + "/.kiln-write-probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST) {
    throw FileError(flag + ": cannot create files in folder '" + dir + "' (for '" + path +
                    "'): " + std::strerror(errno));
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

// ---- interruption ---------------------------------------------------------------------------

InterruptGuard::InterruptGuard() {
  if (g_installed.exchange(true)) throw std::logic_error("InterruptGuard: one at a time");
  g_pending.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_pending.store(0);
  g_installed.store(false);
}

int InterruptGuard::pending() const { return g_pending.load(); }

const char* InterruptGuard::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

// ---- --save-every ---------------------------------------------------------------------------

SaveEvery parse_save_every(const std::string& text) {
  auto bad = [&] {
    return UsageError("--save-every expects a number of steps (e.g. 100), a time (e.g. 10m, "
                      "90s, 2h) or 'off', got '" +
                      text + "'");
  };
  SaveEvery s;
  if (text == "off" || text == "0") return s;
  if (text.empty()) throw bad();
  size_t digits = text.find_first_not_of("0123456789");
  if (digits == 0) throw bad();
  const std::string number = text.substr(0, digits);
  if (number.size() > 12) throw bad();
  const int64_t n = std::stoll(number);
  if (n <= 0) throw bad();
  if (digits == std::string::npos) {
    s.steps = n;
    return s;
  }
  const std::string unit = text.substr(digits);
  if (unit == "s") {
    s.seconds = static_cast<double>(n);
  } else if (unit == "m" || unit == "min") {
    s.seconds = 60.0 * static_cast<double>(n);
  } else if (unit == "h") {
    s.seconds = 3600.0 * static_cast<double>(n);
  } else {
    throw bad();
  }
  return s;
}

}  // namespace kiln::cli
