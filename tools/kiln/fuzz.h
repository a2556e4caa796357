// Differential fuzzing of kiln::compile: random valid programs of tensor ops, run eagerly and
// through each backend, outputs and gradients compared (see docs/testing.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::fuzz {

// One step of a program: an op applied to earlier values (indices into the value list, inputs
// first), with integer parameters (dims, lengths) chosen for the shapes at hand.
struct Step {
  std::string op;
  std::vector<int> args;
  std::vector<int64_t> params;
};

inline constexpr size_t kBufferInput = 3;  // the index of the input without grad

struct Program {
  uint64_t seed = 0;
  // float32 inputs: three with requires_grad, then the buffer (kBufferInput), without grad, that
  // in-place steps may write as they may write values the program made
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<Step> steps;
  // Readable listing: inputs with shapes, one line per step with its result's shape.
  std::string text() const;
};

// A program valid in eager mode (forward and the backward of the sum of its outputs), the
// same for the same seed and size.
Program generate(uint64_t seed, int ops_per_program);

// How a program is compiled and checked.
struct CheckMode {
  // CompileOptions::pure: the forward steps only, on inputs without grad, graph breaks left out
  // (the second call runs the compiled graph without the function; the third, in another
  // layout, is captured anew). A program with random or in-place steps cannot be pure and is
  // skipped.
  bool pure = false;
  // Dynamic shapes: after those calls, more at other sizes (every input dim of 2 or more grown
  // by 1, 2, then 3: equal sizes stay equal, sizes 1 stay 1), each one eager accepts, so that
  // the graph turns dynamic and the later sizes run on its instances (docs/dynamic_shapes.md).
  bool dynamic = false;
};

enum class Verdict { kPass, kMismatch, kError, kSkipped };
struct Check {
  Verdict verdict = Verdict::kPass;
  // What differed, the compiled run's error, why the program was skipped, or (a pass in pure
  // mode) that the function ran on every call, so no call skipped it.
  std::string detail;
  int sizes_checked = 0;  // CheckMode::dynamic: the calls at grown sizes that were compared
};
// Renders the inductor source of every graph `program` captures (a run for each input layout
// `check` uses, with a backend that only collects them and computes with the eager kernels), so
// that many programs' modules can be built in a few compiler runs before they are checked
// (inductor::compile_modules_batched).
void collect_inductor_sources(const Program& program, std::vector<std::string>& sources,
                              CheckMode mode = {});

// Runs `program` eagerly and through kiln::compile with `backend` (a registered name), three
// times with other input numbers (the second call takes the cached code, the third passes
// non-contiguous inputs at a storage offset), and compares outputs, input gradients and the
// buffer (float32: rtol 1e-4, atol 1e-5; NaN where eager has NaN), the first call's again after
// the last.
Check check(const Program& program, const std::string& backend, CheckMode mode = {});

}  // namespace kiln::fuzz
