// Standalone repros and the minifier (torch's TORCHDYNAMO_REPRO_AFTER / _LEVEL and the
// minifier; guide: docs/compile.md, "Repros and the minifier"). A repro is a folder holding a
// captured graph (graph.txt, Graph::serialize's form), its inputs (inputs.safetensors), what
// failed (repro.txt, failure.txt) and a repro.cpp + CMakeLists.txt that rebuild it against an
// installed Kiln and exit nonzero while the failure still reproduces.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "kiln/capture/compile.h"

namespace kiln::repro {

enum class FailureKind {
  BackendError,  // the backend threw, compiling or running the graph
  Accuracy,      // the backend's outputs differ from the eager interpreter's
};
const char* failure_kind_name(FailureKind kind);  // "backend_error", "accuracy"

// Default tolerance of accuracy checks (torch's repro_tolerance): |a - b| <= tol * (1 + |b|).
inline constexpr double kDefaultTolerance = 1e-3;

// One failing case: a graph, the inputs it fails on, and how it fails.
struct ReproCase {
  ir::Graph graph;
  std::vector<Tensor> inputs;  // the placeholders' tensors, in input order
  std::string backend;         // a registered backend's name ("" for an unnamed callable)
  FailureKind kind = FailureKind::BackendError;
  double tolerance = kDefaultTolerance;
  std::string message;  // what failed when the case was recorded
};

struct Failure {
  bool failed = false;
  FailureKind kind = FailureKind::BackendError;
  std::string message;
};
// Compiles and runs `graph` on `backend` and (for accuracy) on the eager interpreter, and says
// whether and how it fails. A backend exception is a BackendError failure; outputs differing
// by more than `tolerance` (or in dtype, shape or NaN positions) an Accuracy failure.
Failure check_backend(const ir::Graph& graph, std::span<const Tensor> inputs,
                      const Backend& backend, double tolerance = kDefaultTolerance);

// Writes `c` as a new repro folder under `root` (created if missing); returns its path. The
// folder is written under a temporary name and renamed, so it is never seen half-written.
std::string write_repro(const ReproCase& c, const std::string& root);
// Writes `c` into `folder` exactly (replacing what a previous repro left there).
void write_repro_to(const ReproCase& c, const std::string& folder);
// Reads a repro folder back; kiln::Error naming the file on anything missing or malformed.
ReproCase load_repro(const std::string& folder);

// Random inputs (seeded, deterministic) matching the placeholders of `graph`: used when a
// backend fails at compile time, before any real input was seen.
std::vector<Tensor> example_inputs(const ir::Graph& graph, uint64_t seed = 0);
// `value` in a fresh buffer laid out as `m` (sizes, strides, offset): what a graph input with
// that recorded layout must be (nodes after it were recorded over it). A broadcast dim (stride
// 0) takes the value's first slice.
Tensor laid_out_as(const Tensor& value, const TensorMeta& m);

struct MinifyResult {
  ReproCase minimal;
  int64_t ops_before = 0, ops_after = 0;  // op-call nodes
  int64_t checks = 0;                     // backend runs the search took
};
// Shrinks a failing case by delta debugging while it keeps failing the same way on `backend`:
// cuts the graph after the failure (prefix truncation), replaces nodes and runs of nodes by
// graph inputs holding their eager values, drops outputs and the inputs nothing reads, until no
// single step keeps it failing. kiln::Error if `c` does not fail to begin with. `log` (may be
// null) gets one line per accepted step.
MinifyResult minify(const ReproCase& c, const Backend& backend, std::ostream* log = nullptr);

// What a generated repro.cpp calls: loads the folder, runs its backend (looked up by name; a
// custom backend must be registered before), prints the outcome to `out`. Returns 1 when the
// failure reproduces, 0 when it does not.
int run_repro(const std::string& folder, std::ostream& out);

// ---- the KILN_REPRO_AFTER / KILN_REPRO_LEVEL hook ----
// Reads KILN_REPRO_AFTER ("capture", "aot", unset/"" = off), KILN_REPRO_LEVEL (1..4, default
// 2), KILN_REPRO_DIR (default ./kiln_repros) and KILN_REPRO_TOLERANCE, and returns `backend`
// wrapped so that failures are written as repros (see docs/compile.md). `name` is the backend's
// registered name ("" for a callable). Returns `backend` itself when the hook is off.
Backend wrap_backend_for_repro(Backend backend, const std::string& name);

}  // namespace kiln::repro
