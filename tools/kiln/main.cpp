// The `kiln` command-line program.
//   kiln bench [--threads N] [--runs N] [--only W1,W2] [--out FILE]   time the workloads
//   kiln version
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "workloads.h"

namespace {

constexpr const char* kUsage =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  bench     time the benchmark workloads and print a table of medians\n"
    "            --threads N   threads for kernels and BLAS (default 2)\n"
    "            --runs N      timed runs per workload (default 15)\n"
    "            --only LIST   comma-separated workload ids, e.g. W1,W6\n"
    "            --out FILE    also write the table (markdown) to FILE\n"
    "  version   print the version\n"
    "  help      print this message\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t parse_positive(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    long long v = std::stoll(value, &used);
    if (used == value.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(flag + " expects a positive integer, got '" + value + "'");
}

std::string format_time(double seconds) {
  std::ostringstream os;
  os << std::fixed;
  if (seconds >= 1e-3) {
    os << std::setprecision(seconds >= 0.1 ? 1 : 2) << seconds * 1e3 << " ms";
  } else {
    os << std::setprecision(1) << seconds * 1e6 << " us";
  }
  return os.str();
}

int run_bench(const std::vector<std::string>& args) {
  int threads = 2;
  int64_t runs = 15;
  std::vector<std::string> only;
  std::string out_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
      return args[++i];
    };
    if (a == "--threads") {
      threads = static_cast<int>(parse_positive(a, value()));
    } else if (a == "--runs") {
      runs = parse_positive(a, value());
    } else if (a == "--only") {
      std::stringstream ss(value());
      for (std::string id; std::getline(ss, id, ',');) only.push_back(id);
    } else if (a == "--out") {
      out_path = value();
    } else {
      throw UsageError("unknown option for bench: '" + a + "'");
    }
  }
  const auto& all = kiln::bench::workloads();
  for (const std::string& id : only) {
    bool known = std::any_of(all.begin(), all.end(), [&](const auto& w) { return w.id == id; });
    if (!known) throw UsageError("unknown workload '" + id + "'");
  }
  kiln::set_num_threads(threads);

  std::ostringstream table;
  table << "| workload | what | Kiln eager median | min | PyTorch 1.13 eager (reference) |\n"
        << "|---|---|---|---|---|\n";
  for (const auto& w : all) {
    if (!only.empty() && std::find(only.begin(), only.end(), w.id) == only.end()) continue;
    std::cerr << "[bench] " << w.id << ": " << w.description << " ..." << std::flush;
    std::vector<double> times;
    try {
      auto step = w.setup();
      step();  // warm-up: allocator cache, page faults, thread pool
      step();
      // Small workloads repeat inside each timed run so the clock resolution does not matter.
      auto t0 = std::chrono::steady_clock::now();
      step();
      double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      int64_t inner = std::max<int64_t>(1, static_cast<int64_t>(2e-3 / std::max(once, 1e-9)));
      for (int64_t r = 0; r < runs; ++r) {
        auto s = std::chrono::steady_clock::now();
        for (int64_t k = 0; k < inner; ++k) step();
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() /
            static_cast<double>(inner));
      }
    } catch (const kiln::Error& e) {
      std::cerr << " failed: " << e.what() << "\n";
      table << "| " << w.id << " | " << w.description << " | failed: " << e.what() << " | | "
            << w.reference << " |\n";
      continue;
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    std::cerr << " " << format_time(median) << "\n";
    table << "| " << w.id << " | " << w.description << " | " << format_time(median) << " | "
          << format_time(times.front()) << " | " << w.reference << " |\n";
  }
  std::cout << "\nKiln eager, " << threads << " threads, median of " << runs
            << " runs (reproduce: kiln bench --threads " << threads << " --runs " << runs << ")\n\n"
            << table.str();
  if (!out_path.empty()) {
    std::ofstream f(out_path);
    if (!f) throw UsageError("cannot write '" + out_path + "'");
    f << table.str();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
      std::cout << kUsage;
      return args.empty() ? 2 : 0;
    }
    const std::string cmd = args[0];
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "bench") return run_bench(rest);
    if (cmd == "version") {
      std::cout << "kiln 0.1.0\n";
      return 0;
    }
    throw UsageError("unknown command '" + cmd + "'");
  } catch (const UsageError& e) {
    std::cerr << "kiln: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
}
