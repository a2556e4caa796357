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

struct Program {
  uint64_t seed = 0;
  std::vector<std::vector<int64_t>> input_shapes;  // float32 inputs with requires_grad
  std::vector<Step> steps;
  // Readable listing: inputs with shapes, one line per step with its result's shape.
  std::string text() const;
};

// A program valid in eager mode (forward and the backward of the sum of its outputs), the
// same for the same seed and size.
Program generate(uint64_t seed, int ops_per_program);

enum class Verdict { kPass, kMismatch, kError };
struct Check {
  Verdict verdict = Verdict::kPass;
  std::string detail;  // what differed, or the compiled run's error
};
// Renders the inductor source of every graph `program` captures (one run with a backend that
// only collects them and computes with the eager kernels), so that many programs' modules can
// be built in a few compiler runs before they are checked (inductor::compile_modules_batched).
void collect_inductor_sources(const Program& program, std::vector<std::string>& sources);

// Runs `program` eagerly and through kiln::compile with `backend` (a registered name) and
// compares outputs and input gradients (float32: rtol 1e-4, atol 1e-5; NaN where eager has NaN).
Check check(const Program& program, const std::string& backend);

}  // namespace kiln::fuzz
