// kiln_reader_fuzz [ITERATIONS [SEED]]: a long run of the reader fuzzer (tests/io/reader_fuzz.h),
// meant for the ASan build (docs/testing.md). Exit status 1 when anything other than
// kiln::Error came out of a reader; a crash or out-of-bounds read aborts under ASan.
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "io/reader_fuzz.h"

int main(int argc, char** argv) {
  const int64_t iterations = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const auto start = std::chrono::steady_clock::now();
  const kiln::reader_fuzz::Stats st = kiln::reader_fuzz::run(
      seed, iterations, [](int64_t i, const kiln::reader_fuzz::Stats& so_far) {
        std::cout << "after " << i << " iterations: " << so_far.inputs << " inputs, "
                  << so_far.findings.size() << " findings" << std::endl;
      });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const std::string& f : st.findings) std::cout << "FINDING " << f << "\n";
  std::cout << "inputs " << st.inputs << " (read " << st.accepted << ", rejected with kiln::Error "
            << st.rejected << ", findings " << st.findings.size() << ") in " << s << " s\n";
  return st.findings.empty() ? 0 : 1;
}
