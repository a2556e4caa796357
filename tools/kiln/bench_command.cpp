// `kiln bench`: times the benchmark workloads and prints a markdown table of medians, with
// each workload's step memory (the most one step allocates above what was live before it).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/kiln.h"
#include "workloads.h"

namespace kiln::cli {

namespace {

std::string format_time(double seconds) {
  std::ostringstream os;
  os << std::fixed;
  if (seconds >= 1e-3) {
    os << std::setprecision(seconds >= 0.1 ? 1 : 2) << seconds * 1e3 << " ms";
  } else {
    os << std::setprecision(seconds >= 1e-5 ? 1 : 2) << seconds * 1e6 << " us";
  }
  return os.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A workload's step as it is timed: small workloads repeat `inner` times inside each timed run,
// so that the clock's resolution does not matter.
struct TimedStep {
  std::function<void()> step;
  int64_t inner = 1;

  // Times one call (after the caller's warm-up) and chooses `inner` (runs of ~2 ms at least).
  void calibrate() {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    inner = std::max<int64_t>(1, static_cast<int64_t>(2e-3 / std::max(seconds_since(t0), 1e-9)));
  }
  // One timed run: seconds per step.
  double run() const {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < inner; ++k) step();
    return seconds_since(t0) / static_cast<double>(inner);
  }
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `--pair A,B`: both workloads set up in this process, then timed alternately run by run (A B,
// then B A, so a drift of the machine's speed falls on both), each run's ratio B / A kept. On a
// shared machine whose speed changes from minute to minute, the median of those ratios is the
// comparison to quote, not two medians measured minutes apart.
int run_pair(const kiln::bench::Workload& a, const kiln::bench::Workload& b, int64_t runs,
             int threads, std::ostream& out, std::ostream& err) {
  const kiln::bench::Workload* sides[2] = {&a, &b};
  TimedStep steps[2];
  for (int s = 0; s < 2; ++s) {
    err << "[bench] " << sides[s]->id << ": " << sides[s]->description << " (setting up)\n";
    steps[s].step = sides[s]->setup();
    steps[s].step();  // warm-up
    steps[s].calibrate();
  }
  std::vector<double> times[2], ratios;
  for (int64_t r = 0; r < runs; ++r) {
    double t[2];
    const int first = static_cast<int>(r % 2);
    t[first] = steps[first].run();
    t[1 - first] = steps[1 - first].run();
    times[0].push_back(t[0]);
    times[1].push_back(t[1]);
    ratios.push_back(t[1] / t[0]);
  }
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  const double ratio = median_of(ratios);
  out << "\nKiln, " << threads << " threads, " << runs
      << " alternating runs (reproduce: kiln bench "
      << "--threads " << threads << " --runs " << runs << " --pair " << a.id << "," << b.id
      << ")\n\n| workload | what | Kiln median |\n|---|---|---|\n";
  for (int s = 0; s < 2; ++s)
    out << "| " << sides[s]->id << " | " << sides[s]->description << " | "
        << format_time(median_of(times[s])) << " |\n";
  out << "\n"
      << b.id << " / " << a.id << " time, run by run: median " << std::fixed << std::setprecision(3)
      << ratio << " (min " << *lo << ", max " << *hi << "); " << b.id << " is "
      << std::setprecision(2) << 1.0 / ratio << "x as fast as " << a.id << "\n";
  return 0;
}

}  // namespace

ArgParser bench_parser() {
  ArgParser p("bench", "Time the benchmark workloads and print a table of medians.");
  p.add_int("threads", "N", 2, "threads for kernels and BLAS")
      .add_int("runs", "N", 15, "timed runs per workload")
      .add_string("only", "LIST", "", "comma-separated workload ids, e.g. W1,W6 (default all)")
      .add_string("pair", "A,B", "",
                  "time two workloads alternately, run by run, and print the median ratio of "
                  "their times (B / A): the comparison to trust on a noisy machine")
      .add_path("out", "FILE", "", "also write the table (markdown) to FILE", PathRole::kOutput);
  return p;
}

int run_bench(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const auto threads = static_cast<int>(args.get_int("threads"));
  const int64_t runs = args.get_int("runs");
  const std::string& out_path = args.get_string("out");
  std::vector<std::string> only;
  std::stringstream ids(args.get_string("only"));
  for (std::string id; std::getline(ids, id, ',');) only.push_back(id);

  const auto& all = kiln::bench::workloads();
  for (const std::string& id : only) {
    bool known = std::any_of(all.begin(), all.end(), [&](const auto& w) { return w.id == id; });
    if (!known) throw UsageError("--only: unknown workload '" + id + "'");
  }
  kiln::set_num_threads(threads);

  if (const std::string& pair = args.get_string("pair"); !pair.empty()) {
    const size_t comma = pair.find(',');
    const std::string first = pair.substr(0, comma);
    const std::string second = comma == std::string::npos ? "" : pair.substr(comma + 1);
    auto find = [&](const std::string& id) {
      for (const auto& w : all)
        if (w.id == id) return &w;
      throw UsageError("--pair: expects two workload ids A,B (e.g. W7,W7i), got '" + pair + "'");
    };
    if (!only.empty() || !out_path.empty())
      throw UsageError("--pair times its two workloads alone: drop --only and --out");
    return run_pair(*find(first), *find(second), runs, threads, out, err);
  }

  std::map<std::string, double> fastest;
  std::ostringstream table;
  table << "| workload | what | Kiln median | min | set-up (compiles) | step memory | "
           "PyTorch 1.13 eager (reference) |\n"
        << "|---|---|---|---|---|---|---|\n";
  for (const auto& w : all) {
    if (!only.empty() && std::find(only.begin(), only.end(), w.id) == only.end()) continue;
    err << "[bench] " << w.id << ": " << w.description << " ..." << std::flush;
    std::vector<double> times;
    double setup_seconds = 0;
    int64_t step_bytes = 0;  // the most one step allocated above what was live before it
    try {
      const auto setup_start = std::chrono::steady_clock::now();
      TimedStep timed{w.setup()};  // compiled workloads compile here (their first call)
      setup_seconds = seconds_since(setup_start);
      timed.step();  // warm-up: allocator cache, page faults, thread pool
      kiln::reset_peak_memory_stats();
      const int64_t live = kiln::memory_stats().allocated;
      timed.step();
      step_bytes = kiln::memory_stats().peak_allocated - live;
      timed.calibrate();
      for (int64_t r = 0; r < runs; ++r) times.push_back(timed.run());
    } catch (const kiln::Error& e) {
      err << " failed: " << e.what() << "\n";
      table << "| " << w.id << " | " << w.description << " | failed: " << e.what() << " | | | | "
            << w.reference << " |\n";
      continue;
    }
    const double median = median_of(times);
    fastest[w.id] = *std::min_element(times.begin(), times.end());
    err << " " << format_time(median) << "\n";
    table << "| " << w.id << " | " << w.description << " | " << format_time(median) << " | "
          << format_time(fastest[w.id]) << " | " << format_time(setup_seconds) << " | "
          << std::fixed << std::setprecision(1) << static_cast<double>(step_bytes) / (1 << 20)
          << std::defaultfloat << " MiB | " << w.reference << " |\n";
  }
  out << "\nKiln, " << threads << " threads, median of " << runs
      << " runs (reproduce: kiln bench --threads " << threads << " --runs " << runs << ")\n"
      << "BLAS: " << blas_config() << "\n\n"
      << table.str();
  // The capture overhead of a cached compiled call (compiled minus eager), split into a
  // per-call and a per-op part from the 1-op and 100-op chains. From the fastest runs: a
  // difference of two microsecond timings is what other processes on a shared machine disturb
  // most.
  if (fastest.count("W6") && fastest.count("W6c") && fastest.count("W6s") &&
      fastest.count("W6sc")) {
    const double one = fastest["W6sc"] - fastest["W6s"];
    const double hundred = fastest["W6c"] - fastest["W6"];
    const double per_op = (hundred - one) / 99;
    table << "\nCapture overhead of a cached compiled call (fastest runs of W6c - W6 for 100 ops, "
             "W6sc - W6s for 1): "
          << std::fixed << std::setprecision(2) << (one - per_op) * 1e6 << " us per call + "
          << std::setprecision(0) << per_op * 1e9 << " ns per op\n";
    out << table.str().substr(table.str().rfind("\nCapture"));
  }
  if (!out_path.empty()) {
    std::ofstream f(out_path);
    f << table.str();
    if (!f) throw FileError("--out: cannot write '" + out_path + "'");
  }
  return 0;
}

}  // namespace kiln::cli
