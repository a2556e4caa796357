// `kiln fuzz`: differential fuzzing of the compile backends against eager mode.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "backends/inductor/cpp_compiler.h"
#include "cli.h"
#include "commands.h"
#include "fuzz.h"

namespace kiln::cli {

namespace {

std::vector<std::string> parse_backends(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream ss(list);
  std::vector<std::string> known = kiln::list_backends();
  for (std::string name; std::getline(ss, name, ',');) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw UsageError("--backend: unknown backend '" + name + "'");
    names.push_back(name);
  }
  if (names.empty()) throw UsageError("--backend: expects at least one backend name");
  return names;
}

struct Tally {
  int64_t passed = 0, mismatches = 0, errors = 0, skipped = 0;
  int64_t called_every_time = 0;  // pure mode: passes where no call skipped the function
  int64_t sizes_checked = 0;      // --dynamic: calls at grown sizes compared
};

void write_finding(const std::string& dir, const fuzz::Program& p, const std::string& backend,
                   const std::string& detail) {
  std::filesystem::create_directories(dir);
  std::ofstream f(dir + "/seed" + std::to_string(p.seed) + "_" + backend + ".txt");
  f << "# backend " << backend << ": " << detail << "\n" << p.text();
}

// Sets an environment variable for the life of this object, then restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs a failing program again with the repro hook on at level 4, so its graph is written as a
// repro folder and minified (kiln::repro); returns the folders written.
std::vector<std::string> write_repros(const std::string& dir, const fuzz::Program& p,
                                      const std::string& backend, fuzz::CheckMode mode) {
  const std::filesystem::path root =
      std::filesystem::path(dir) / ("seed" + std::to_string(p.seed) + "_" + backend + "_repros");
  std::filesystem::remove_all(root);
  {
    ScopedEnv after("KILN_REPRO_AFTER", "capture");
    ScopedEnv level("KILN_REPRO_LEVEL", "4");
    ScopedEnv where("KILN_REPRO_DIR", root.string());
    // The fuzzer's own threshold (it compares with rtol 1e-4), not the looser default.
    ScopedEnv tolerance("KILN_REPRO_TOLERANCE", "1e-4");
    fuzz::check(p, backend, mode);
  }
  std::vector<std::string> folders;
  if (std::filesystem::exists(root))
    for (const auto& e : std::filesystem::directory_iterator(root))
      if (e.is_directory()) folders.push_back(e.path().string());
  std::sort(folders.begin(), folders.end());
  return folders;
}

}  // namespace

ArgParser fuzz_parser() {
  ArgParser p("fuzz", "Run random programs eagerly and compiled; report any difference.");
  p.add_int("programs", "N", 100, "number of programs")
      .add_int("seed", "S", 1, "seed of the first program (program i uses seed S+i)", 0)
      .add_string("backend", "LIST", "eager,inductor", "comma-separated backends to compare")
      .add_int("ops-per-program", "K", 6, "op calls per program")
      .add_switch("print", "print every program's text before its checks")
      .add_switch("pure",
                  "compile with pure=true: forward only, inputs without grad, graph breaks left "
                  "out, three calls (programs with random or in-place steps are skipped)")
      .add_switch("dynamic",
                  "dynamic shapes: after the three calls, up to three more at larger sizes (each "
                  "input dim of 2 or more grown by 1, 2, 3) through the same compiled function")
      .add_string("out", "DIR", "",
                  "write each failing program as a text file into DIR, and its failing graph as a "
                  "minified repro folder (see kiln minify)");
  return p;
}

int run_fuzz(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const int64_t programs = args.get_int("programs");
  const auto seed = static_cast<uint64_t>(args.get_int("seed"));
  const auto ops = static_cast<int>(args.get_int("ops-per-program"));
  const std::vector<std::string> backends = parse_backends(args.get_string("backend"));
  const std::string& out_dir = args.get_string("out");
  const fuzz::CheckMode mode{.pure = args.get_switch("pure"),
                             .dynamic = args.get_switch("dynamic")};
  const std::string flags =
      std::string(mode.pure ? " --pure" : "") + (mode.dynamic ? " --dynamic" : "");
  const bool print = args.get_switch("print");
  std::map<std::string, Tally> tally;
  const auto start = std::chrono::steady_clock::now();
  // Under inductor every program compiles new graphs: a chunk of programs is captured first
  // and its modules built in a few compiler runs (a process start and a header parse per graph
  // would dominate the run).
  const bool batch = std::find(backends.begin(), backends.end(), "inductor") != backends.end() &&
                     inductor::unavailable_reason().empty();
  constexpr int64_t kChunk = 100;
  std::vector<fuzz::Program> chunk;
  for (int64_t i = 0; i < programs; ++i) {
    if (i % kChunk == 0) {
      chunk.clear();
      std::vector<std::string> sources;
      for (int64_t k = i; k < std::min(programs, i + kChunk); ++k) {
        chunk.push_back(fuzz::generate(seed + static_cast<uint64_t>(k), ops));
        if (batch) fuzz::collect_inductor_sources(chunk.back(), sources, mode);
      }
      if (batch) inductor::compile_modules_batched(sources, inductor::compile_jobs());
    }
    const fuzz::Program& p = chunk[static_cast<size_t>(i % kChunk)];
    if (print) out << "program " << i << "\n" << p.text() << "\n";
    for (const std::string& b : backends) {
      fuzz::Check c = fuzz::check(p, b, mode);
      Tally& t = tally[b];
      t.sizes_checked += c.sizes_checked;
      if (c.verdict == fuzz::Verdict::kPass || c.verdict == fuzz::Verdict::kSkipped) {
        ++(c.verdict == fuzz::Verdict::kPass ? t.passed : t.skipped);
        if (c.verdict == fuzz::Verdict::kPass && !c.detail.empty()) ++t.called_every_time;
        continue;
      }
      ++(c.verdict == fuzz::Verdict::kError ? t.errors : t.mismatches);
      out << "FINDING backend " << b << (mode.pure ? " (pure)" : "") << " program " << i
          << " (--seed " << p.seed << " --programs 1" << flags
          << "): " << (c.verdict == fuzz::Verdict::kError ? "error: " : "mismatch: ") << c.detail
          << "\n"
          << p.text() << "\n";
      if (!out_dir.empty()) {
        write_finding(out_dir, p, b, c.detail);
        const std::vector<std::string> repros = write_repros(out_dir, p, b, mode);
        for (const std::string& r : repros)
          out << "repro: " << r
              << (std::filesystem::exists(r + "/minified") ? " (minimal: " + r + "/minified)" : "")
              << "\n";
        if (repros.empty())
          out << "no repro: the difference is not inside one captured graph (see the program "
                 "text)\n";
      }
    }
    if ((i + 1) % 10 == 0 || i + 1 == programs)
      err << "[fuzz] " << i + 1 << "/" << programs << " programs\n" << std::flush;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "programs run: " << programs << " (" << seconds << " s)\n";
  bool findings = false;
  for (const std::string& b : backends) {
    const Tally& t = tally[b];
    out << b << (mode.pure ? " (pure)" : "") << ": passed " << t.passed << ", mismatches "
        << t.mismatches << ", errors " << t.errors;
    if (mode.pure)
      out << ", skipped (random or in-place steps, a result viewing an input) " << t.skipped
          << "; passes where the function ran on every call " << t.called_every_time;
    if (mode.dynamic) out << "; calls at grown sizes compared " << t.sizes_checked;
    out << "\n";
    findings = findings || t.mismatches || t.errors;
  }
  return findings ? kExitError : kExitOk;
}

}  // namespace kiln::cli
