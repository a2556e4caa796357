// Building and loading generated C++ (see cpp_compiler.h).
#include "backends/inductor/cpp_compiler.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

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

// Runs a shell command; returns its exit status and fills `output` with stdout + stderr.
int run_command(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, got);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct CommandResult {
  int status = -1;
  std::string output;  // stdout + stderr
};
// Runs shell commands at once (each its own process) and waits for all of them.
std::vector<CommandResult> run_commands_at_once(const std::vector<std::string>& cmds) {
  std::vector<FILE*> running;
  for (const std::string& cmd : cmds) running.push_back(popen((cmd + " 2>&1").c_str(), "r"));
  std::vector<CommandResult> results(cmds.size());
  for (size_t j = 0; j < running.size(); ++j) {
    if (!running[j]) continue;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, running[j])) > 0) results[j].output.append(buf, got);
    const int st = pclose(running[j]);
    results[j].status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  return results;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool on_path(const std::string& name, std::string& found) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (access(candidate.c_str(), X_OK) == 0) {
      found = candidate.string();
      return true;
    }
  }
  return false;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Two FNV-1a passes with different offsets: a 128-bit key as 32 hex digits.
std::string hash_key(const std::string& text) {
  uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : text) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b ^ c) * 0x100000001b3ULL;
    b ^= b >> 29;
  }
  char out[33];
  std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return out;
}

// Flags of every compile of generated code (the precompiled header's too: they must match).
const std::string& compile_flags() {
  static const std::string f = detail::concat(
      "-std=c++20 -O3 ", KILN_GENERATED_ARCH_FLAGS, " -fopenmp -fPIC -ffp-contract=off -w -I",
      quote(runtime_headers().runtime_dir), " -I", quote(runtime_headers().include_dir));
  return f;
}
const std::string& flags() {
  static const std::string f = compile_flags() + " -shared";
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
    std::string version;
    run_command(quote(host_compiler()) + " --version", version);
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
    headers += read_file(fs::path(where.include_dir) / "kiln/ops/op.h");
    return host_compiler() + "\n" + version + "\n" + flags() + "\n" + cpu_identity() + headers;
  }();
  return context;
}

bool writable_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  return !ec && access(dir.c_str(), W_OK) == 0;
}

// The folder modules are written to: the cache, or a private temporary one if it is not
// writable (modules then live for this process only).
const fs::path& module_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::path(cache_dir()) / "inductor";
    if (writable_dir(d)) return d;
    char tmpl[] = "/tmp/kiln-inductor-XXXXXX";
    const char* made = mkdtemp(tmpl);
    KILN_CHECK(made, Error, "inductor: the cache folder ", d.string(),
               " is not writable and no temporary folder could be made");
    return fs::path(made);
  }();
  return dir;
}

bool compiler_is_gcc() {
  static const bool gcc = [] {
    std::string version;
    run_command(quote(host_compiler()) + " --version", version);
    return version.find("Free Software Foundation") != std::string::npos &&
           version.find("clang") == std::string::npos;
  }();
  return gcc;
}

// The runtime header of generated code, precompiled (GCC only), lives at <root>/kPchFile: GCC
// finds it before the header itself when <root> comes first on the include path.
const std::string kPchFile = std::string(kRuntimeHeader) + ".gch";

// The root for this compiler, flags and header text below `parent` (keyed like the modules).
fs::path pch_root(const fs::path& parent) {
  return parent / ("pch-" + hash_key(key_context()).substr(0, 16));
}

// Builds <root>/kPchFile atomically (a temp file renamed into place). Returns "" on success,
// else the failing command's output.
std::string build_precompiled_header(const fs::path& root) {
  const fs::path gch = root / kPchFile;
  std::error_code ec;
  fs::create_directories(gch.parent_path(), ec);
  const fs::path tmp = gch.string() + ".tmp." + std::to_string(getpid());
  std::string output;
  const int status = run_command(
      detail::concat(quote(host_compiler()), " ", compile_flags(), " -x c++-header ",
                     quote((fs::path(runtime_headers().runtime_dir) / kRuntimeHeader).string()),
                     " -o ", quote(tmp)),
      output);
  if (status == 0) fs::rename(tmp, gch, ec);
  if (status != 0 || ec) {
    fs::remove(tmp, ec);
    return output.empty() ? "cannot write " + gch.string() : output;
  }
  return "";
}

// The folder to put first on the include path for the precompiled runtime header: the one
// `kiln prepare` left beside the library when it matches, else one built once in the cache;
// "" when none can be built (generated code then parses the header itself).
std::string precompiled_header_dir(const fs::path& modules) {
  if (!compiler_is_gcc()) return "";
  static std::string dir;
  static bool tried = false;
  if (tried) return dir;
  tried = true;
  std::error_code ec;
  const std::string prepared = prepared_header_dir();
  if (!prepared.empty() && fs::exists(pch_root(prepared) / kPchFile, ec))
    return dir = pch_root(prepared).string();
  const fs::path cached = pch_root(modules);
  if (fs::exists(cached / kPchFile, ec) || build_precompiled_header(cached).empty())
    dir = cached.string();
  return dir;
}

// The compiler command that builds `out` from `source` with `how` (flags() for a shared object,
// compile_flags() + " -c" for an object), using the precompiled runtime header when there is one.
std::string compile_command(const fs::path& source, const fs::path& out, const std::string& how) {
  const std::string pch = precompiled_header_dir(module_dir());
  return detail::concat(quote(host_compiler()), pch.empty() ? "" : " -I" + quote(pch), " ", how,
                        " ", quote(source), " -o ", quote(out));
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
// at once and linked. Returns the failing command and its output, or "" on success.
std::string build_shared_object(const fs::path& cpp, const fs::path& so, int parts) {
  if (parts <= 1) {
    const std::string cmd = compile_command(cpp, so, flags());
    std::string output;
    return run_command(cmd, output) == 0 ? "" : cmd + "\n" + output;
  }
  std::vector<std::string> cmds;
  std::vector<fs::path> objects;
  for (int j = 0; j < parts; ++j) {
    objects.push_back(detail::concat(so.string(), ".part", j, ".o"));
    cmds.push_back(compile_command(
        cpp, objects.back(),
        detail::concat(compile_flags(), " -c -DKILN_PARTS=", parts, " -DKILN_PART=", j)));
  }
  const std::vector<CommandResult> results = run_commands_at_once(cmds);
  std::string failure;
  for (size_t j = 0; j < results.size() && failure.empty(); ++j)
    if (results[j].status != 0) failure = cmds[j] + "\n" + results[j].output;
  if (failure.empty()) {
    std::string link = detail::concat(quote(host_compiler()), " -shared -fopenmp");
    // (detail::concat: GCC 12 warns -Wrestrict, falsely, on " " + std::string.)
    for (const fs::path& o : objects) link += detail::concat(" ", quote(o));
    link += detail::concat(" -o ", quote(so));
    std::string output;
    if (run_command(link, output) != 0) failure = link + "\n" + output;
  }
  std::error_code ec;
  for (const fs::path& o : objects) fs::remove(o, ec);
  return failure;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void* open_module(const fs::path& so) { return dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL); }

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

const std::string& host_compiler() {
  static const std::string cxx = [] {
    if (const char* env = std::getenv("CXX"); env && *env) {
      std::string found;
      if (std::string(env).find('/') != std::string::npos) return std::string(env);
      if (on_path(env, found)) return found;
    }
    std::string found;
    for (const char* name : {"c++", "g++", "clang++"})
      if (on_path(name, found)) return found;
    return std::string();
  }();
  return cxx;
}

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
  const fs::path root = pch_root(folder);
  std::error_code ec;
  // Headers or compilers of earlier builds leave roots under other keys: nothing reads them.
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec))
    if (e.path() != root && e.path().filename().string().rfind("pch-", 0) == 0)
      fs::remove_all(e.path(), ec);
  if (fs::exists(root / kPchFile, ec)) return "up to date: " + root.string();
  const auto start = std::chrono::steady_clock::now();
  const std::string failure = build_precompiled_header(root);
  KILN_CHECK(failure.empty(), Error, "kiln prepare: precompiling the runtime header of generated ",
             "code into ", root.string(), " failed:\n", failure);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return detail::concat("precompiled the runtime header of generated code into ", root.string(),
                        " (", static_cast<int>(seconds * 10 + 0.5) / 10.0, " s)");
}

const std::string& unavailable_reason() {
  static const std::string why = []() -> std::string {
    if (host_compiler().empty()) return "no C++ compiler found ($CXX, c++, g++ or clang++ on PATH)";
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
  else
    dir = fs::temp_directory_path() / "kiln-cache";
  // Absolute: generated sources #include each other by path, and the compiler resolves a
  // relative include against the including file's folder, not the working directory.
  std::error_code ec;
  fs::path absolute = fs::absolute(dir, ec);
  return (ec ? dir : absolute).lexically_normal().string();
}

// The modules this process loaded, by key. Compiles are serialised by the lock: a second
// thread wanting the same module waits for the first instead of compiling it again.
struct LoadedModules {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<LoadedModule>> by_key;
};
LoadedModules& loaded_modules() {
  static auto* m = new LoadedModules();
  return *m;
}

void compile_modules_batched(const std::vector<std::string>& sources, int jobs) {
  KILN_CHECK(!host_compiler().empty(), Error,
             "inductor: no C++ compiler found (set $CXX or install g++)");
  LoadedModules& modules = loaded_modules();
  std::lock_guard<std::mutex> lock(modules.mu);
  // The sources still to build (not loaded, not on disk), once each.
  std::map<std::string, const std::string*> todo;
  for (const std::string& src : sources) {
    const std::string key = hash_key(key_context() + "\n" + src);
    if (!modules.by_key.count(key) && !fs::exists(module_dir() / (key + ".so")) &&
        !fs::exists(module_dir() / (key + ".batch")))
      todo.emplace(key, &src);
  }
  if (todo.empty()) return;
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(todo.size())));
  // Library j includes every jobs-th source, each with its own kernel prefix.
  const std::string stem =
      detail::concat("batch.", getpid(), ".", todo.begin()->first.substr(0, 8));
  std::vector<std::string> prefixes(todo.size());
  std::vector<std::string> units(static_cast<size_t>(jobs));
  std::vector<std::vector<std::string>> keys_of(static_cast<size_t>(jobs));
  for (auto& u : units) u = detail::concat("#include \"", kRuntimeHeader, "\"\n");
  size_t i = 0;
  for (const auto& [key, src] : todo) {
    const fs::path cpp = module_dir() / (key + ".cpp");
    {
      std::ofstream out(cpp, std::ios::binary);
      out << *src;
      KILN_CHECK(out.good(), Error, "inductor: cannot write ", cpp.string());
    }
    const size_t j = i++ % static_cast<size_t>(jobs);
    units[j] += detail::concat("#define KILN_KERNEL(name) kiln_", key, "_##name\n#include \"",
                               cpp.string(), "\"\n#undef KILN_KERNEL\n");
    keys_of[j].push_back(key);
  }
  std::vector<std::string> cmds;
  std::vector<fs::path> libs;
  for (size_t j = 0; j < units.size(); ++j) {
    const fs::path unit = module_dir() / detail::concat(stem, ".", j, ".cpp");
    const fs::path lib = module_dir() / detail::concat(stem, ".", j, ".so");
    std::ofstream(unit, std::ios::binary) << units[j];
    cmds.push_back(compile_command(unit, lib, flags()));
    libs.push_back(lib);
  }
  const std::vector<CommandResult> results = run_commands_at_once(cmds);
  std::string errors;
  for (size_t j = 0; j < results.size(); ++j) {
    std::error_code ec;
    fs::remove(module_dir() / detail::concat(stem, ".", j, ".cpp"), ec);
    void* handle =
        results[j].status == 0 ? dlopen(libs[j].c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!handle) {
      errors += results[j].output.substr(0, 2000);
      continue;
    }
    std::shared_ptr<void> owner(handle, [](void* h) { dlclose(h); });
    for (const std::string& key : keys_of[j]) {
      auto m = std::make_shared<LoadedModule>(handle, libs[j].string(), "kiln_" + key + "_");
      m->handle_owner_ = owner;
      modules.by_key[key] = std::move(m);
      // On disk: <key>.batch names the library holding it (written whole, then renamed).
      const fs::path index = module_dir() / (key + ".batch");
      const fs::path tmp = index.string() + ".tmp." + std::to_string(getpid());
      std::ofstream(tmp, std::ios::binary) << libs[j].filename().string();
      fs::rename(tmp, index, ec);
    }
  }
  // A library that failed leaves its sources to compile_module, which reports each error.
  if (!errors.empty())
    std::cerr << "[kiln] warning: inductor: a batched compile failed; its modules will be "
                 "compiled one by one. The compiler said:\n"
              << errors << "\n";
}

std::shared_ptr<LoadedModule> load_batched(const std::string& key, LoadedModules& modules) {
  const fs::path index = module_dir() / (key + ".batch");
  if (!fs::exists(index)) return nullptr;
  const fs::path lib = module_dir() / read_file(index);
  // The library's other modules share its handle: find one already loaded.
  std::shared_ptr<void> owner;
  void* handle = nullptr;
  for (const auto& [k, m] : modules.by_key)
    if (m->handle_owner_ && m->path_ == lib.string()) {
      owner = m->handle_owner_;
      handle = m->handle_;
      break;
    }
  if (!handle) {
    handle = open_module(lib);
    if (!handle) return nullptr;  // gone or corrupt: compile this one on its own
    owner = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
  }
  auto m = std::make_shared<LoadedModule>(handle, lib.string(), "kiln_" + key + "_");
  m->handle_owner_ = std::move(owner);
  if (!dlsym(handle, (m->prefix_ + "kernel_0").c_str())) return nullptr;
  modules.by_key[key] = m;
  return m;
}

void forget_loaded_modules() {
  LoadedModules& m = loaded_modules();
  std::lock_guard<std::mutex> lock(m.mu);
  m.by_key.clear();
}

std::shared_ptr<LoadedModule> compile_module(const std::string& source, CompileStats* stats) {
  KILN_CHECK(!host_compiler().empty(), Error,
             "inductor: no C++ compiler found (set $CXX or install g++)");
  const std::string key = hash_key(key_context() + "\n" + source);
  LoadedModules& modules = loaded_modules();
  std::lock_guard<std::mutex> lock(modules.mu);
  auto& loaded = modules.by_key;
  if (auto it = loaded.find(key); it != loaded.end()) {
    if (stats) stats->cache_hit = true;
    return it->second;
  }
  const fs::path so = module_dir() / (key + ".so");
  auto t0 = std::chrono::steady_clock::now();
  if (auto batched = load_batched(key, modules)) {
    if (stats) {
      stats->cache_hit = true;
      stats->load_seconds = seconds_since(t0);
    }
    return batched;
  }
  void* handle = fs::exists(so) ? open_module(so) : nullptr;
  if (handle) {
    if (stats) stats->cache_hit = true;
  } else {
    // Build beside the final path, then rename: readers never see a partial file, and two
    // processes building the same module at once both end with a complete one.
    const std::string tmp_stem = detail::concat(key, ".tmp.", getpid());
    const fs::path cpp = module_dir() / (key + ".cpp");
    const fs::path tmp_cpp = module_dir() / (tmp_stem + ".cpp");
    const fs::path tmp_so = module_dir() / (tmp_stem + ".so");
    {
      std::ofstream out(tmp_cpp, std::ios::binary);
      out << source;
      KILN_CHECK(out.good(), Error, "inductor: cannot write ", tmp_cpp.string());
    }
    std::error_code ec;
    fs::rename(tmp_cpp, cpp, ec);
    auto tc = std::chrono::steady_clock::now();
    const int parts = compile_parts(source);
    std::string failure = build_shared_object(cpp, tmp_so, parts);
    if (stats) {
      stats->cxx_seconds = seconds_since(tc);
      stats->parts = parts;
    }
    if (!failure.empty()) {
      fs::remove(tmp_so, ec);
      if (failure.size() > 4000) failure = failure.substr(0, 4000) + "\n[... cut]";
      throw Error(detail::concat("inductor: compiling the generated code failed: ", failure,
                                 "\nThe source is ", cpp.string()));
    }
    fs::rename(tmp_so, so, ec);
    KILN_CHECK(!ec, Error, "inductor: cannot move the compiled module into ", so.string(), ": ",
               ec.message());
    t0 = std::chrono::steady_clock::now();
    handle = open_module(so);
    KILN_CHECK(handle, Error, "inductor: loading ", so.string(), " failed: ", dlerror());
  }
  if (stats) stats->load_seconds = seconds_since(t0);
  auto module = std::make_shared<LoadedModule>(handle, so.string());
  loaded[key] = module;
  return module;
}

}  // namespace kiln::inductor
