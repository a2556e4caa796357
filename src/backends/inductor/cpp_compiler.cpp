// Building and loading generated C++ (see cpp_compiler.h).
#include "backends/inductor/cpp_compiler.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include "backends/inductor/module_cache.h"
#include "core/clock.h"
#include "core/subprocess.h"
#include "kiln/core/error.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must point at the source tree (the runtime headers of generated code)"
#endif
#ifndef KILN_GENERATED_ARCH_FLAGS
#define KILN_GENERATED_ARCH_FLAGS ""
#endif
#ifndef KILN_RUNTIME_FROM_LIB
#define KILN_RUNTIME_FROM_LIB "../share/kiln/runtime"
#endif
#ifndef KILN_INCLUDE_FROM_LIB
#define KILN_INCLUDE_FROM_LIB "../include"
#endif

namespace kiln::inductor {

namespace fs = std::filesystem;

// The header every generated source includes, relative to the runtime folder (RuntimeHeaders).
constexpr std::string_view kRuntimeHeader = "backends/inductor/runtime/inductor_runtime.h";

namespace {

using Args = std::vector<std::string>;

Args operator+(Args a, const Args& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string joined(const Args& args) {
  std::string out;
  for (const std::string& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

Args split_words(std::string_view text) {
  Args words;
  std::string word;
  for (char c : text) {
    if (c == ' ' || c == '\t') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Two FNV-1a passes with different offsets: a 128-bit key as 32 hex digits. Streaming, so the
// state after the long, fixed key context is computed once (module_key).
struct KeyHash {
  uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
  KeyHash& update(std::string_view text) {
    for (unsigned char c : text) {
      a = (a ^ c) * 0x100000001b3ULL;
      b = (b ^ c) * 0x100000001b3ULL;
      b ^= b >> 29;
    }
    return *this;
  }
  std::string hex() const {
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
    return out;
  }
};
std::string hash_key(std::string_view text) { return KeyHash().update(text).hex(); }

bool is_key(std::string_view text) {
  return text.size() == 32 && std::all_of(text.begin(), text.end(), [](char c) {
           return std::isxdigit(c) && !std::isupper(c);
         });
}

// ---- the compiler ----

// The compiler command: $CXX's words (a launcher such as ccache may come first; its first word
// resolved on PATH), else the first of c++, g++, clang++ on PATH. `problem` says why there is
// none. No shell ever reads it, so shell syntax in $CXX is refused rather than misread.
struct HostCompiler {
  Args command;
  std::string problem;
};
const HostCompiler& host() {
  static const HostCompiler found = [] {
    HostCompiler h;
    if (const char* env = std::getenv("CXX"); env && *env) {
      const std::string cxx = env;
      if (cxx.find_first_of("\"'\\$`|;&<>(){}*?[]!~#\n") != std::string::npos) {
        h.problem = "CXX = '" + cxx +
                    "' holds shell syntax, which Kiln does not interpret (it runs the compiler "
                    "without a shell): set CXX to the compiler's name or path, optionally after "
                    "a launcher such as 'ccache g++'";
        return h;
      }
      Args words = split_words(cxx);
      const std::string first = detail::find_executable(words.front());
      if (first.empty()) {
        h.problem = "CXX = '" + cxx + "' names '" + words.front() +
                    "', which is not an executable file on PATH";
        return h;
      }
      words.front() = first;
      h.command = std::move(words);
      return h;
    }
    for (const char* name : {"c++", "g++", "clang++"})
      if (std::string found = detail::find_executable(name); !found.empty()) {
        h.command = {found};
        return h;
      }
    h.problem = "no C++ compiler found ($CXX, c++, g++ or clang++ on PATH)";
    return h;
  }();
  return found;
}

// The compile time limit (compile_config().compile_timeout, 0 = none).
double compile_timeout() {
  const double t = compile_config().compile_timeout;
  KILN_CHECK(t >= 0 && std::isfinite(t), ValueError, "compile_config().compile_timeout = ", t,
             " is invalid: expected seconds >= 0 (0: no limit)");
  return t;
}

// `--version` answers at once: a compiler that does not within this is taken as broken.
constexpr double kVersionSeconds = 30;

// The compiler's `--version` text, or why it gave none.
struct CompilerVersion {
  std::string text;
  std::string problem;
};
const CompilerVersion& compiler_version() {
  static const CompilerVersion version = [] {
    CompilerVersion v;
    if (host().command.empty()) return v;
    const double limit =
        compile_timeout() > 0 ? std::min(kVersionSeconds, compile_timeout()) : kVersionSeconds;
    const detail::ProcessResult r = detail::run_process(host().command + Args{"--version"}, limit);
    if (r.succeeded())
      v.text = r.output;
    else
      v.problem = detail::concat("the C++ compiler '", joined(host().command), "' ",
                                 r.describe(limit), " when asked for --version",
                                 r.output.empty() ? "" : ": " + r.output.substr(0, 500));
    return v;
  }();
  return version;
}

bool compiler_is_gcc() {
  const std::string& v = compiler_version().text;
  return v.find("Free Software Foundation") != std::string::npos &&
         v.find("clang") == std::string::npos;
}

// Flags of every compile of generated code (the precompiled header's too: they must match).
const Args& compile_flags() {
  static const Args f = Args{"-std=c++20", "-O3"} + split_words(KILN_GENERATED_ARCH_FLAGS) +
                        Args{"-fopenmp",
                             "-fPIC",
                             "-ffp-contract=off",
                             "-w",
                             "-I" + runtime_headers().runtime_dir,
                             "-I" + runtime_headers().include_dir};
  return f;
}
const Args& shared_flags() {
  static const Args f = compile_flags() + Args{"-shared"};
  return f;
}

// The processor code is built for, when the flags say "this machine" (-march=native): its
// model and feature lines, so a cache shared between machines never hands one a module (or a
// precompiled header) built for another's instruction set.
std::string cpu_identity() {
  if (std::string_view(KILN_GENERATED_ARCH_FLAGS).find("native") == std::string_view::npos)
    return "";
  std::ifstream in("/proc/cpuinfo");
  std::string line, identity;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0) identity += line + "\n";
    if (line.empty() && !identity.empty()) break;  // the first processor is enough
  }
  return identity;
}

// What the cache key includes besides the source: the compiler's identity and the text of the
// headers generated code includes (so a changed functor never reuses an old module).
const std::string& key_context() {
  static const std::string context = [] {
    std::string headers;
    const RuntimeHeaders& where = runtime_headers();
    // KILN_RUNTIME_HEADERS: the headers installed beside the library (src/CMakeLists.txt),
    // comma-separated.
    std::string_view list = KILN_RUNTIME_HEADERS;
    while (!list.empty()) {
      const size_t comma = std::min(list.find(','), list.size());
      headers += read_file(fs::path(where.runtime_dir) / std::string(list.substr(0, comma)));
      list.remove_prefix(std::min(comma + 1, list.size()));
    }
    // (Public headers the runtime header names directly: op.h, and parallel.h's kParallelGrain.)
    headers += read_file(fs::path(where.include_dir) / "kiln/ops/op.h");
    headers += read_file(fs::path(where.include_dir) / "kiln/core/parallel.h");
    return joined(host().command) + "\n" + compiler_version().text + "\n" + joined(shared_flags()) +
           "\n" + cpu_identity() + headers;
  }();
  return context;
}

// The cache key of a module built from `source`: the hash of the key context, then the source.
std::string module_key(const std::string& source) {
  static const KeyHash after_context = KeyHash().update(key_context()).update("\n");
  return KeyHash(after_context).update(source).hex();
}

// Runs compiler commands at once under the time limit. A command that runs out of time makes
// this throw CompileTimeoutError (its process group is killed); otherwise returns "" or the
// first failing command with its output.
std::string run_compiler(const std::vector<Args>& commands) {
  const double limit = compile_timeout();
  const std::vector<detail::ProcessResult> results = detail::run_processes(commands, limit);
  for (size_t j = 0; j < results.size(); ++j)
    if (results[j].timed_out)
      throw CompileTimeoutError(detail::concat(
          "inductor: the C++ compiler did not finish within ", limit,
          " s (compile_config().compile_timeout / KILN_COMPILE_TIMEOUT) and was stopped: ",
          joined(commands[j])));
  for (size_t j = 0; j < results.size(); ++j)
    if (!results[j].succeeded())
      return detail::concat(joined(commands[j]), "\n(it ", results[j].describe(limit), ")\n",
                            results[j].output);
  return "";
}

// ---- the precompiled runtime header ----

// The runtime header of generated code, precompiled (GCC only), lives at <root>/kPchFile: GCC
// finds it before the header itself when <root> comes first on the include path. Beside it,
// kPchSum records its size and checksum, checked before it is used.
const std::string kPchFile = std::string(kRuntimeHeader) + ".gch";
const std::string kPchSum = kPchFile + ".sum";

// The root's name for this compiler, flags and header text (keyed like the modules).
std::string pch_root_name() { return "pch-" + hash_key(key_context()).substr(0, 16); }

// Opens `path` without following a link and checks who owns it; -1 with `why` set otherwise.
int open_trusted_file(const fs::path& path, bool root_may_own, std::string& why) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    why = detail::concat(path.string(), ": ", std::strerror(errno));
    return -1;
  }
  why = file_trust_problem(fd, root_may_own);
  if (why.empty()) return fd;
  why = path.string() + " " + why;
  close(fd);
  return -1;
}

// Why the precompiled header under `root` cannot be used ("" when it can): missing, owned by
// someone else, or not the bytes its checksum file records (truncated, damaged).
std::string pch_problem(const fs::path& root, bool root_may_own) {
  std::string why;
  const int sum_fd = open_trusted_file(root / kPchSum, root_may_own, why);
  if (sum_fd < 0) return why;
  char text[64] = {0};
  const ssize_t got = pread(sum_fd, text, sizeof text - 1, 0);
  close(sum_fd);
  unsigned long long size = 0, sum = 0;
  if (got <= 0 || std::sscanf(text, "%llu %llx", &size, &sum) != 2)
    return (root / kPchSum).string() + " is damaged";
  const int fd = open_trusted_file(root / kPchFile, root_may_own, why);
  if (fd < 0) return why;
  struct stat st {};
  fstat(fd, &st);
  if (static_cast<unsigned long long>(st.st_size) != size) {
    close(fd);
    return detail::concat((root / kPchFile).string(), " has ", st.st_size, " bytes, not ", size);
  }
  const uint64_t actual = file_checksum(fd, size);
  close(fd);
  if (actual != sum) return (root / kPchFile).string() + " is damaged (its checksum differs)";
  return "";
}

// Builds the precompiled header as <parent>/<name>: in a temporary folder beside it, renamed
// into place whole (an old, damaged one is moved aside first). Returns "" on success, else what
// failed. Throws CompileTimeoutError when the compiler runs out of time.
std::string build_precompiled_header(const fs::path& parent, const std::string& name) {
  const fs::path tmp_root = parent / (name + ".tmp-" + random_hex16());
  const fs::path gch = tmp_root / kPchFile;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (mkdir(tmp_root.c_str(), 0700) != 0)
    return detail::concat("cannot make ", tmp_root.string(), ": ", std::strerror(errno));
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code e;
      if (!dir.empty()) fs::remove_all(dir, e);
    }
  } cleanup{tmp_root};
  fs::create_directories(gch.parent_path(), ec);
  const std::string failure = run_compiler(
      {host().command + compile_flags() +
       Args{"-x", "c++-header", (fs::path(runtime_headers().runtime_dir) / kRuntimeHeader).string(),
            "-o", gch.string()}});
  if (!failure.empty()) return failure;
  const int fd = open(gch.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return detail::concat("cannot read ", gch.string(), ": ", std::strerror(errno));
  // Readable by every user of an installed Kiln, writable by its owner only, whatever the umask.
  fchmod(fd, 0644);
  struct stat st {};
  fstat(fd, &st);
  const uint64_t sum = file_checksum(fd, static_cast<uint64_t>(st.st_size));
  close(fd);
  {
    std::ofstream out(tmp_root / kPchSum, std::ios::binary);
    char line[64];
    std::snprintf(line, sizeof line, "%llu %016llx\n", static_cast<unsigned long long>(st.st_size),
                  static_cast<unsigned long long>(sum));
    out << line;
    if (!out.flush())
      return detail::concat("cannot write ", (tmp_root / kPchSum).string(), ": ",
                            std::strerror(errno));
  }
  fs::permissions(tmp_root / kPchSum, fs::perms(0644), ec);
  const fs::path root = parent / name;
  if (fs::exists(root, ec)) {
    const fs::path aside = parent / (name + ".tmp-" + random_hex16());
    if (rename(root.c_str(), aside.c_str()) == 0) fs::remove_all(aside, ec);
  }
  if (rename(tmp_root.c_str(), root.c_str()) != 0 && errno != ENOTEMPTY && errno != EEXIST)
    return detail::concat("cannot move ", tmp_root.string(), " to ", root.string(), ": ",
                          std::strerror(errno));
  // (ENOTEMPTY: another process put a whole one there first; ours goes.)
  return "";
}

// The folder to put first on the include path for the precompiled runtime header: the one
// `kiln prepare` left beside the library when it is whole, else one built once in the cache;
// "" when none can be built (generated code then parses the header itself).
std::string precompiled_header_dir() {
  if (!compiler_is_gcc()) return "";
  static std::mutex mu;
  static std::string dir;
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mu);
  if (tried) return dir;
  tried = true;
  std::error_code ec;
  const std::string name = pch_root_name();
  if (const std::string prepared = prepared_header_dir();
      !prepared.empty() && fs::exists(fs::path(prepared) / name, ec)) {
    std::string problem = folder_trust_problem(prepared, /*must_own=*/false);
    if (!problem.empty()) problem = prepared + " " + problem;
    if (problem.empty()) problem = pch_problem(fs::path(prepared) / name, true);
    if (problem.empty()) return dir = (fs::path(prepared) / name).string();
    std::cerr << "[kiln] warning: inductor: the precompiled runtime header beside the library "
                 "cannot be used: "
              << problem
              << ". Run `kiln prepare` to rebuild it; this process uses one in its "
                 "cache folder.\n";
  }
  const fs::path modules = ModuleFolder::instance().path();
  const fs::path cached = modules / name;
  if (fs::exists(cached, ec)) {
    const std::string problem = pch_problem(cached, false);
    if (problem.empty()) return dir = cached.string();
    std::cerr << "[kiln] warning: inductor: the precompiled runtime header in the cache cannot "
                 "be used: "
              << problem << "; rebuilding it\n";
  }
  try {
    if (build_precompiled_header(modules, name).empty()) dir = cached.string();
  } catch (const CompileTimeoutError&) {
    // Generated code then parses the header itself; its own compile has the same limit.
  }
  return dir;
}

// The compiler command that builds `out` from `source` with `how` (shared_flags() for a shared
// object, compile_flags() + "-c" for an object), using the precompiled runtime header when
// there is one.
Args compile_command(const fs::path& source, const fs::path& out, const Args& how) {
  const std::string pch = precompiled_header_dir();
  Args cmd = host().command;
  if (!pch.empty()) cmd.push_back("-I" + pch);
  return cmd + how + Args{source.string(), "-o", out.string()};
}

// How many objects to compile `source` as at once: one per core, each with at least a few
// distinct kernel bodies (every part pays a process start and the precompiled header's load,
// ~0.15 s, so a small module stays whole). The renderer states the body count.
int compile_parts(const std::string& source) {
  constexpr int kMinBodiesPerPart = 3;
  const std::string marker = "// distinct kernel bodies: ";
  const size_t at = source.rfind(marker);
  if (at == std::string::npos) return 1;
  const int bodies = std::atoi(source.c_str() + at + marker.size());
  return std::max(1, std::min(compile_jobs(), bodies / kMinBodiesPerPart));
}

// Builds the shared object `so` from `cpp`: in one compiler run, or as `parts` objects compiled
// at once and linked. Returns "" on success, else the failing command and its output.
std::string build_shared_object(const fs::path& cpp, const fs::path& so, int parts) {
  if (parts <= 1) return run_compiler({compile_command(cpp, so, shared_flags())});
  std::vector<Args> cmds;
  std::vector<fs::path> objects;
  for (int j = 0; j < parts; ++j) {
    objects.push_back(detail::concat(so.string(), ".part", j, ".o"));
    cmds.push_back(compile_command(
        cpp, objects.back(),
        compile_flags() +
            Args{"-c", detail::concat("-DKILN_PARTS=", parts), detail::concat("-DKILN_PART=", j)}));
  }
  struct Cleanup {
    const std::vector<fs::path>& files;
    ~Cleanup() {
      std::error_code ec;
      for (const fs::path& o : files) fs::remove(o, ec);
    }
  } cleanup{objects};
  std::string failure = run_compiler(cmds);
  if (!failure.empty()) return failure;
  Args link = host().command + Args{"-shared", "-fopenmp"};
  for (const fs::path& o : objects) link.push_back(o.string());
  return run_compiler({link + Args{"-o", so.string()}});
}

// The line every module's source ends with: the key it was built for, as an exported symbol
// (KILN_KERNEL gives it the module's prefix), checked right after dlopen. Only part 0 of a
// module compiled in parts defines it.
std::string key_symbol_line(const std::string& key) {
  return detail::concat(
      "\n#ifndef KILN_KERNEL\n#define KILN_KERNEL(name) kiln_##name\n#endif\n"
      "#if !defined(KILN_PART) || KILN_PART == 0\nextern \"C\" const char KILN_KERNEL(",
      kKeySymbol, ")[] = \"", key, "\";\n#endif\n");
}

// Warns that a cache entry was damaged or not this user's, and is removed (each entry once:
// it is then compiled again).
void warn_damaged(const fs::path& path, const std::string& why) {
  std::cerr << "[kiln] warning: inductor: the cached module " << path.string() << " " << why
            << "; it is not loaded, and is removed\n";
}

}  // namespace

LoadedModule::~LoadedModule() {
  if (handle_ && !handle_owner_) dlclose(handle_);  // a shared library closes with its owner
}

void* LoadedModule::symbol(const std::string& name) const {
  void* s = dlsym(handle_, name.c_str());
  KILN_CHECK(s, Error, "inductor: the compiled module ", path_, " has no symbol ", name);
  return s;
}

int compile_jobs() {
  if (const char* env = std::getenv("KILN_COMPILE_JOBS"); env && *env) {
    char* end = nullptr;
    const long jobs = std::strtol(env, &end, 10);
    KILN_CHECK(*end == '\0' && jobs >= 1 && jobs <= 256, ValueError, "KILN_COMPILE_JOBS = '", env,
               "' is invalid: expected an integer from 1 to 256");
    return static_cast<int>(jobs);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string host_compiler() { return joined(host().command); }

namespace {
// The folder of the library this code is in ("" when it cannot be told).
const fs::path& library_dir() {
  static const fs::path dir = [] {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<const void*>(&runtime_headers), &info) || !info.dli_fname)
      return fs::path();
    std::error_code ec;
    const fs::path lib = fs::canonical(info.dli_fname, ec);
    return ec ? fs::path() : lib.parent_path();
  }();
  return dir;
}
}  // namespace

const RuntimeHeaders& runtime_headers() {
  static const RuntimeHeaders where = [] {
    // The library's installed neighbours (relative paths set by CMake from the install layout,
    // so any --prefix works). A static or build-tree Kiln has none.
    const fs::path& lib_dir = library_dir();
    if (!lib_dir.empty()) {
      std::error_code ec;
      const fs::path runtime = lib_dir / KILN_RUNTIME_FROM_LIB;
      const fs::path include = lib_dir / KILN_INCLUDE_FROM_LIB;
      if (fs::exists(runtime / kRuntimeHeader, ec) && fs::exists(include / "kiln/ops/op.h", ec))
        return RuntimeHeaders{fs::weakly_canonical(runtime, ec).string(),
                              fs::weakly_canonical(include, ec).string(), true};
    }
    return RuntimeHeaders{KILN_SOURCE_DIR "/src", KILN_SOURCE_DIR "/include", false};
  }();
  return where;
}

std::string prepared_header_dir() {
  return library_dir().empty() ? "" : (library_dir() / "kiln" / "precompiled").string();
}

std::string prepare_runtime_header() {
  KILN_CHECK(unavailable_reason().empty(), Error, "kiln prepare: ", unavailable_reason());
  if (!compiler_is_gcc())
    return "nothing to prepare: " + host_compiler() + " is not GCC (no precompiled header)";
  const std::string folder = prepared_header_dir();
  KILN_CHECK(!folder.empty(), Error,
             "kiln prepare: cannot tell which folder the Kiln library was loaded from");
  const std::string name = pch_root_name();
  const fs::path root = fs::path(folder) / name;
  std::error_code ec;
  // Headers or compilers of earlier builds leave roots under other keys: nothing reads them.
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec))
    if (e.path() != root && e.path().filename().string().rfind("pch-", 0) == 0)
      fs::remove_all(e.path(), ec);
  std::string repaired;
  if (fs::exists(root, ec)) {
    repaired = pch_problem(root, true);
    if (repaired.empty()) return "up to date: " + root.string();
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string failure = build_precompiled_header(folder, name);
  KILN_CHECK(failure.empty(), Error, "kiln prepare: precompiling the runtime header of generated ",
             "code into ", root.string(), " failed:\n", failure);
  return detail::concat(
      repaired.empty() ? "precompiled" : "repaired (" + repaired + "): precompiled",
      " the runtime header of generated code into ", root.string(), " (",
      static_cast<int>(detail::seconds_since(start) * 10 + 0.5) / 10.0, " s)");
}

const std::string& unavailable_reason() {
  static const std::string why = []() -> std::string {
    if (!host().problem.empty()) return host().problem;
    if (!compiler_version().problem.empty()) return compiler_version().problem;
    const RuntimeHeaders& where = runtime_headers();
    std::error_code ec;
    if (!fs::exists(fs::path(where.runtime_dir) / kRuntimeHeader, ec))
      return detail::concat(
          "the headers generated code includes are missing (not installed beside the Kiln "
          "library, and the source tree it was built from, ",
          KILN_SOURCE_DIR, ", is gone; install Kiln with cmake --install)");
    return "";
  }();
  return why;
}

std::string cache_dir() {
  fs::path dir;
  if (const char* env = std::getenv("KILN_CACHE_DIR"); env && *env)
    dir = env;
  else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    dir = fs::path(xdg) / "kiln";
  else if (const char* home = std::getenv("HOME"); home && *home)
    dir = fs::path(home) / ".cache" / "kiln";
  else  // no home: a folder of this user's own, never one shared by every user
    dir = fs::temp_directory_path() / detail::concat("kiln-", geteuid());
  // Absolute: generated sources #include each other by path, and the compiler resolves a
  // relative include against the including file's folder, not the working directory.
  std::error_code ec;
  fs::path absolute = fs::absolute(dir, ec);
  return (ec ? dir : absolute).lexically_normal().string();
}

// The modules this process loaded, by key, and the keys being built now. The lock guards the
// tables only: compilers run without it, and a second thread wanting a module that is being
// built waits for it instead of compiling it again.
struct LoadedModules {
  std::mutex mu;
  std::condition_variable built;
  std::map<std::string, std::shared_ptr<LoadedModule>> by_key;
  std::set<std::string> building;
  std::map<std::string, std::weak_ptr<void>> batch_libraries;  // batch id -> its dlopen handle
};
LoadedModules& loaded_modules() {
  static auto* m = new LoadedModules();
  return *m;
}

namespace {
// Marks keys as being built by this thread until it goes out of scope (then wakes waiters).
class BuildingKeys {
 public:
  BuildingKeys(LoadedModules& m, std::vector<std::string> keys) : m_(m), keys_(std::move(keys)) {}
  ~BuildingKeys() {
    std::lock_guard<std::mutex> lock(m_.mu);
    for (const std::string& k : keys_) m_.building.erase(k);
    m_.built.notify_all();
  }
  BuildingKeys(const BuildingKeys&) = delete;
  BuildingKeys& operator=(const BuildingKeys&) = delete;

 private:
  LoadedModules& m_;
  std::vector<std::string> keys_;
};

// Opens module file `name` of the cache when it is this user's, whole and built for `key`, and
// loads it; null when it is missing. A damaged or foreign entry is removed, with a warning;
// `problem` then says what was wrong with it.
void* load_cached(const std::string& name, const std::string& key, std::string* loaded_path,
                  std::string* problem = nullptr) {
  ModuleFolder& folder = ModuleFolder::instance();
  const fs::path path = folder.path() / name;
  std::string why;
  const int fd = folder.open_checked(name, why);
  if (fd < 0) {
    if (!why.empty()) {
      if (problem) *problem = why;
      warn_damaged(path, why);
      folder.remove(name);
    }
    return nullptr;
  }
  struct stat st {};
  fstat(fd, &st);
  why = check_sealed_module(fd, key);
  void* handle = nullptr;
  if (why.empty()) {
    std::string error;
    handle = folder.open_library(name, error);
    if (!handle) why = "cannot be loaded (" + error + ")";
  }
  close(fd);
  if (!handle) {
    if (problem) *problem = why;
    folder.remove_if_same(name, st.st_dev, st.st_ino);
    warn_damaged(path, why);
    return nullptr;
  }
  if (loaded_path) *loaded_path = path.string();
  return handle;
}

// Checks the key symbol of a loaded module (prefix: "kiln_" or a batched module's).
bool carries_key(void* handle, const std::string& prefix, const std::string& key) {
  const auto* stored =
      static_cast<const char*>(dlsym(handle, (prefix + std::string(kKeySymbol)).c_str()));
  return stored && std::string_view(stored, strnlen(stored, 33)) == key;
}

// Compiles, seals and moves into place the module <name> of `key`; throws kiln::Error with the
// compiler's output on failure (CompileTimeoutError when it ran out of time).
void build_module(const std::string& key, const std::string& source, const std::string& name,
                  CompileStats* stats) {
  ModuleFolder& folder = ModuleFolder::instance();
  folder.revalidate();
  const std::string cpp_name = key + ".cpp";
  folder.write_atomically(cpp_name, source + key_symbol_line(key));
  const fs::path cpp = folder.path() / cpp_name;
  const fs::path tmp_so = folder.make_temporary(name);
  struct RemoveTemporary {
    fs::path p;
    ~RemoveTemporary() {
      std::error_code ec;
      if (!p.empty()) fs::remove(p, ec);
    }
  } remove_tmp{tmp_so};
  const auto tc = std::chrono::steady_clock::now();
  const int parts = compile_parts(source);
  std::string failure = build_shared_object(cpp, tmp_so, parts);
  if (stats) {
    stats->cxx_seconds = detail::seconds_since(tc);
    stats->parts = parts;
  }
  if (!failure.empty()) {
    if (failure.size() > 4000) failure = failure.substr(0, 4000) + "\n[... cut]";
    throw Error(detail::concat("inductor: compiling the generated code failed: ", failure,
                               "\nThe source is ", cpp.string()));
  }
  seal_module(tmp_so, key);
  folder.rename_into_place(tmp_so, name);
  remove_tmp.p.clear();
}
}  // namespace

void compile_modules_batched(const std::vector<std::string>& sources, int jobs) {
  KILN_CHECK(unavailable_reason().empty(), Error, "inductor: ", unavailable_reason());
  LoadedModules& modules = loaded_modules();
  ModuleFolder& folder = ModuleFolder::instance();
  // The sources still to build (not loaded, not being built, not on disk), once each.
  std::map<std::string, const std::string*> todo;
  {
    std::lock_guard<std::mutex> lock(modules.mu);
    std::error_code ec;
    for (const std::string& src : sources) {
      const std::string key = module_key(src);
      if (!modules.by_key.count(key) && !modules.building.count(key) &&
          !fs::exists(folder.path() / (key + ".so"), ec) &&
          !fs::exists(folder.path() / (key + ".batch"), ec))
        todo.emplace(key, &src);
    }
    for (const auto& [key, src] : todo) modules.building.insert(key);
  }
  std::vector<std::string> keys;
  for (const auto& [key, src] : todo) keys.push_back(key);
  BuildingKeys marking(modules, keys);
  if (todo.empty()) return;
  folder.revalidate();
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(todo.size())));
  // Library j includes every jobs-th source, each with its own kernel prefix; it is named by a
  // hash of the keys it holds, and each key's <key>.batch index holds that name (a key, never
  // a path).
  std::vector<std::string> units(static_cast<size_t>(jobs));
  std::vector<std::vector<std::string>> keys_of(static_cast<size_t>(jobs));
  for (auto& u : units) u = detail::concat("#include \"", kRuntimeHeader, "\"\n");
  size_t i = 0;
  for (const auto& [key, src] : todo) {
    folder.write_atomically(key + ".cpp", *src + key_symbol_line(key));
    const size_t j = i++ % static_cast<size_t>(jobs);
    units[j] +=
        detail::concat("#define KILN_KERNEL(name) kiln_", key, "_##name\n#include \"",
                       (folder.path() / (key + ".cpp")).string(), "\"\n#undef KILN_KERNEL\n");
    keys_of[j].push_back(key);
  }
  std::vector<Args> cmds;
  std::vector<std::string> batch_ids;
  std::vector<fs::path> unit_files, libs;
  for (size_t j = 0; j < units.size(); ++j) {
    std::string all_keys;
    for (const std::string& k : keys_of[j]) all_keys += k;
    batch_ids.push_back(hash_key(all_keys));
    unit_files.push_back(folder.make_temporary("batch-" + batch_ids.back(), ".cpp"));
    folder.write_atomically(unit_files.back().filename().string(), units[j]);
    libs.push_back(folder.make_temporary("batch-" + batch_ids.back(), ".so"));
    cmds.push_back(compile_command(unit_files.back(), libs.back(), shared_flags()));
  }
  // A library holds many modules: the limit grows with them (one more limit per 50 modules;
  // a thousand small modules take minutes on two loaded cores, well inside that).
  const size_t largest = std::max_element(keys_of.begin(), keys_of.end(), [](auto& a, auto& b) {
                           return a.size() < b.size();
                         })->size();
  const double limit = compile_timeout() * static_cast<double>(1 + largest / 50);
  const std::vector<detail::ProcessResult> results = detail::run_processes(cmds, limit);
  std::string errors;
  std::error_code ec;
  for (size_t j = 0; j < results.size(); ++j) {
    fs::remove(unit_files[j], ec);
    const std::string lib_name = "batch-" + batch_ids[j] + ".so";
    void* handle = nullptr;
    if (results[j].succeeded()) {
      try {
        seal_module(libs[j], batch_ids[j]);
        folder.rename_into_place(libs[j], lib_name);
        handle = load_cached(lib_name, batch_ids[j], nullptr);
      } catch (const Error& e) {
        errors += std::string(e.what()) + "\n";
      }
    } else {
      errors += results[j].describe(limit) + "\n" + results[j].output.substr(0, 2000);
    }
    fs::remove(libs[j], ec);
    if (!handle) continue;
    std::shared_ptr<void> owner(handle, [](void* h) { dlclose(h); });
    std::lock_guard<std::mutex> lock(modules.mu);
    modules.batch_libraries[batch_ids[j]] = owner;
    for (const std::string& key : keys_of[j]) {
      if (!carries_key(handle, "kiln_" + key + "_", key)) continue;
      auto m = std::make_shared<LoadedModule>(handle, (folder.path() / lib_name).string(),
                                              "kiln_" + key + "_");
      m->handle_owner_ = owner;
      modules.by_key[key] = std::move(m);
      try {
        folder.write_atomically(key + ".batch", batch_ids[j]);
      } catch (const Error&) {
        // Loaded for this process; a later one compiles it on its own.
      }
    }
  }
  // A library that failed leaves its sources to compile_module, which reports each error.
  if (!errors.empty())
    std::cerr << "[kiln] warning: inductor: a batched compile failed; its modules will be "
                 "compiled one by one. The compiler said:\n"
              << errors << "\n";
}

std::shared_ptr<LoadedModule> load_batched(const std::string& key, LoadedModules& modules) {
  ModuleFolder& folder = ModuleFolder::instance();
  const std::optional<std::string> index = folder.read(key + ".batch");
  if (!index) return nullptr;
  // The index names a library by its batch id: anything else (a path, a torn write) is ignored.
  if (!is_key(*index)) {
    folder.remove(key + ".batch");
    return nullptr;
  }
  const std::string& id = *index;
  const std::string lib_name = "batch-" + id + ".so";
  std::shared_ptr<void> owner;
  {
    std::lock_guard<std::mutex> lock(modules.mu);
    if (auto it = modules.batch_libraries.find(id); it != modules.batch_libraries.end())
      owner = it->second.lock();
  }
  if (!owner) {
    void* handle = load_cached(lib_name, id, nullptr);
    if (!handle) {
      folder.remove(key + ".batch");
      return nullptr;  // gone or damaged: compile this one on its own
    }
    owner = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
  }
  const std::string prefix = "kiln_" + key + "_";
  if (!carries_key(owner.get(), prefix, key)) return nullptr;
  auto m = std::make_shared<LoadedModule>(owner.get(), (folder.path() / lib_name).string(), prefix);
  m->handle_owner_ = owner;
  std::lock_guard<std::mutex> lock(modules.mu);
  modules.batch_libraries[id] = owner;
  return m;
}

void forget_loaded_modules() {
  LoadedModules& m = loaded_modules();
  std::lock_guard<std::mutex> lock(m.mu);
  m.by_key.clear();
  m.batch_libraries.clear();
}

std::shared_ptr<LoadedModule> compile_module(const std::string& source, CompileStats* stats) {
  KILN_CHECK(unavailable_reason().empty(), Error, "inductor: ", unavailable_reason());
  const std::string key = module_key(source);
  LoadedModules& modules = loaded_modules();
  {
    std::unique_lock<std::mutex> lock(modules.mu);
    for (;;) {
      if (auto it = modules.by_key.find(key); it != modules.by_key.end()) {
        if (stats) stats->cache_hit = true;
        return it->second;
      }
      if (!modules.building.count(key)) break;
      modules.built.wait(lock);  // another thread builds it (or fails, then this one tries)
    }
    modules.building.insert(key);
  }
  BuildingKeys marking(modules, {key});
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<LoadedModule> module = load_batched(key, modules);
  if (!module) {
    const std::string name = key + ".so";
    std::string path;
    void* handle = load_cached(name, key, &path);
    if (handle && !carries_key(handle, "kiln_", key)) {
      dlclose(handle);
      ModuleFolder::instance().remove(name);
      warn_damaged(path, "does not carry its key (a module stored under another's name)");
      handle = nullptr;
    }
    if (!handle) {
      // Built beside the final name and renamed: readers never see a partial file, and two
      // processes building the same module at once both end with a complete one.
      build_module(key, source, name, stats);
      std::string why;
      handle = load_cached(name, key, &path, &why);
      if (handle && !carries_key(handle, "kiln_", key)) {
        dlclose(handle);
        handle = nullptr;
        why = "it does not define its key symbol";
      }
      KILN_CHECK(handle, Error, "inductor: the module the C++ compiler (", host_compiler(),
                 ") just built for ", name,
                 " cannot be loaded: ", why.empty() ? "it is gone" : why);
    } else if (stats) {
      stats->cache_hit = true;
    }
    module = std::make_shared<LoadedModule>(handle, path);
  } else if (stats) {
    stats->cache_hit = true;
  }
  if (stats) stats->load_seconds = detail::seconds_since(t0) - (stats ? stats->cxx_seconds : 0);
  std::lock_guard<std::mutex> lock(modules.mu);
  modules.by_key[key] = module;
  return module;
}

}  // namespace kiln::inductor
