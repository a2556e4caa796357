// Compiling generated C++ into a loaded shared object: the system compiler, the flags, and the
// on-disk cache that lets a second process start warm.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/capture/compile.h"
#include "kiln/core/error.h"

namespace kiln::inductor {

struct LoadedModules;  // the process's table of loaded modules (cpp_compiler.cpp)

// A loaded shared object (dlclose'd when the last reference goes).
class LoadedModule {
 public:
  LoadedModule(void* handle, std::string path, std::string kernel_prefix = "kiln_")
      : handle_(handle), path_(std::move(path)), prefix_(std::move(kernel_prefix)) {}
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  // The address of `symbol`; kiln::Error naming the module if it is missing.
  void* symbol(const std::string& name) const;
  // The generated kernel `name` (its symbol: the module's prefix + name; see cpp_render.h).
  void* kernel(const std::string& name) const { return symbol(prefix_ + name); }
  const std::string& path() const { return path_; }

 private:
  std::shared_ptr<void> handle_owner_;  // set when several modules share one library
  void* handle_;
  std::string path_;
  std::string prefix_;

  friend void compile_modules_batched(const std::vector<std::string>&, int);
  friend std::shared_ptr<LoadedModule> load_batched(const std::string&, LoadedModules&);
};

// The C++ compiler generated code is built with, as its words: $CXX (a launcher such as ccache
// may come first: "ccache g++"; shell syntax is refused), else the first of c++, g++, clang++ on
// PATH; "" when there is none. It runs without a shell, as an argument vector, and under
// compile_config().compile_timeout.
std::string host_compiler();

// A compile that ran past compile_config().compile_timeout: the compiler's process group was
// killed. The inductor backend then runs the graph with the eager kernels, with one warning.
class CompileTimeoutError : public Error {
  using Error::Error;
};

// The exported symbol every module carries (after its kernel prefix): the key it was built for,
// checked right after it is loaded.
inline constexpr const char* kKeySymbol = "module_key";

// Where generated code finds the headers it includes: an installed Kiln's copy
// (<prefix>/share/kiln/runtime, with <prefix>/include), found from the loaded library's path,
// else the source tree this Kiln was built from.
struct RuntimeHeaders {
  std::string runtime_dir;  // holds backends/inductor/runtime/inductor_runtime.h
  std::string include_dir;  // holds kiln/...
  bool installed = false;
};
const RuntimeHeaders& runtime_headers();

// Where `kiln prepare` leaves the precompiled runtime header of generated code, and where it is
// looked for before the cache: <the library's folder>/kiln/precompiled ("" when that folder
// cannot be told).
std::string prepared_header_dir();

// `kiln prepare` (run by the build and by cmake --install): precompiles the runtime header of
// generated code into prepared_header_dir(), so that the first compile in a fresh cache does not
// pay for it (~4 s with GCC), and removes ones of earlier headers or compilers there. Returns a
// line saying what it did; kiln::Error when it cannot be built.
std::string prepare_runtime_header();

// Why generated code cannot be built here ("" when it can): no C++ compiler, or no runtime
// headers. The registry then warns once and runs inductor's graphs with the eager kernels.
const std::string& unavailable_reason();

// Where compiled modules are cached: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
// ~/.cache/kiln, else (no home) <temp>/kiln-<uid>; each with an "inductor" folder below it that
// only this user may write (module_cache.h).
std::string cache_dir();

struct CompileStats {
  bool cache_hit = false;
  double cxx_seconds = 0;   // the compiler run (0 on a hit)
  double load_seconds = 0;  // dlopen
  int parts = 0;            // objects the module was compiled as, at once (0 on a hit)
};

// How many compiler processes one module may use at once: $KILN_COMPILE_JOBS when set (1 turns
// parallel compilation off), else the number of cores.
int compile_jobs();

// The module built from `source`: from the in-process or on-disk cache (keyed by the source,
// the compiler's identity, the flags and the runtime headers' text), else compiled and stored
// atomically (a uniquely named temporary renamed into place, so a killed or concurrent build
// never leaves a half-written entry). Before a cached module is loaded its owner, mode and
// trailer (key, size, checksum) are checked, and after it is loaded its key symbol: an entry
// failing any check is removed, compiled again, with a warning. A cache folder that cannot be
// used falls back to a private temporary folder (module_cache.h). No lock is held while the
// compiler runs. Throws kiln::Error with the compiler's output when compilation fails, and
// CompileTimeoutError when it runs out of time.
std::shared_ptr<LoadedModule> compile_module(const std::string& source, CompileStats* stats);

// Compiles every source not cached yet in a few compiler runs (`jobs` at once, each building
// one library from many sources), so that compile_module then finds them in memory: for
// suites that compile hundreds of small graphs, where a process start and a header parse per
// graph would dominate. The libraries are cached on disk as batch-<id>.so, each module found
// through its <key>.batch index. A library's time limit is compile_config().compile_timeout
// once more per 50 modules it holds.
void compile_modules_batched(const std::vector<std::string>& sources, int jobs = 2);

// The first pass of a batched build: a backend that renders the source inductor would compile
// for each graph into `sources` (graphs it cannot lower are left to the real run to report)
// and runs the graph with the eager backend; like inductor, it is an AOT autograd backend. The
// backend refers to `sources`: use it only while the vector lives.
Backend source_collecting_backend(std::vector<std::string>& sources);

// The module `key` from a library that compile_modules_batched built (its <key>.batch index),
// or null.
std::shared_ptr<LoadedModule> load_batched(const std::string& key, LoadedModules& modules);

// Forgets the modules this process has loaded (they stay loaded while referenced), so that the
// next compile_module consults the disk cache again: for tests of that cache.
void forget_loaded_modules();

}  // namespace kiln::inductor
