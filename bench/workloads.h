// The benchmark workloads (W1-W7 of the project's issues; A1, a piece of W7), shared by the
// Google Benchmark binary and the `kiln bench` command so both time exactly the same code.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::bench {

struct Workload {
  std::string id;           // "W1"
  std::string description;  // what it computes
  std::string reference;    // PyTorch 1.13 eager on this class of machine, for context
  // Builds the inputs once and returns the step to time.
  std::function<std::function<void()>()> setup;
};

const std::vector<Workload>& workloads();

}  // namespace kiln::bench
