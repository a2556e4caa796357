// A program the cache fault tests (tests/backends/cache_fault_test.cpp) run as another process,
// with the environment (cache folder, compiler, time limit) each test sets up:
//   kiln_cache_client probe FILE...   compiles each C++ file as a module (compile_module) and
//                                     prints "probe=<kiln_cache_probe()>" for each
//   kiln_cache_client rmcache         removes the whole cache folder (between other steps)
//   kiln_cache_client graph [K]       compiles two functions with inductor (K, default 2, is a
//                                     constant in them: another K, other modules) and compares
//                                     them with eager: prints "graph ok"
//   kiln_cache_client break           a compiled function with a graph break at bool(Tensor)
// Steps run in order; the first failure prints "error: ..." and exits 1.
#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "backends/inductor/cpp_compiler.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void probe(const std::string& file) {
  inductor::CompileStats stats;
  auto module = inductor::compile_module(read_file(file), &stats);
  auto fn = reinterpret_cast<int (*)()>(module->symbol("kiln_cache_probe"));
  std::cout << "probe=" << fn() << (stats.cache_hit ? " (cached)" : " (compiled)") << std::endl;
}

double k = 2;
Tensor pointwise(const Tensor& x, const Tensor& y) { return tanh(x * k + y) * sigmoid(y - 1); }
Tensor reduction(const Tensor& x) { return softmax(x * (k + 1), -1).sum({1}) + x.mean({1}); }

void graph() {
  manual_seed(7);
  Tensor x = randn({16, 33}), y = randn({16, 33});
  CompileOptions options;
  options.backend = std::string("inductor");
  auto f = compile(pointwise, options);
  auto g = compile(reduction, options);
  for (int call = 0; call < 2; ++call) {
    if (!allclose(f(x, y), pointwise(x, y)) || !allclose(g(x), reduction(x))) {
      std::cout << "error: compiled results differ from eager" << std::endl;
      std::exit(2);
    }
  }
  std::cout << "graph ok" << std::endl;
}

Tensor with_break(const Tensor& x) {
  Tensor y = x * 2;
  if (y.sum() > 0) y = y + 1;  // bool(Tensor): a graph break whose call site is looked up
  return y;
}

void run_with_break() {
  auto f = compile(with_break, CompileOptions{});
  Tensor out = f(ones({4}));
  std::cout << "break ok " << out.sum().item<float>() << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string step = argv[i];
      if (step == "probe") {
        while (i + 1 < argc && std::strchr(argv[i + 1], '/')) probe(argv[++i]);
      } else if (step == "rmcache") {
        std::filesystem::remove_all(inductor::cache_dir());
      } else if (step == "graph") {
        if (i + 1 < argc && std::isdigit(static_cast<unsigned char>(argv[i + 1][0])))
          k = std::atof(argv[++i]);
        graph();
      } else if (step == "break") {
        run_with_break();
      } else {
        std::cout << "error: unknown step " << step << std::endl;
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
