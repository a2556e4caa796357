// Interpreter: runs a graph with the eager kernels, planned once and run many times (what the
// "eager" backend compiles a graph into).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Construction plans the run: every node output gets a slot in one flat table, and each slot
// is released after its last reader, so a long graph holds only its live values. The first
// run dispatches every op normally (shape inference included) and checks each result against
// the metadata the graph records, throwing kiln::Error on a mismatch; once that has passed,
// runs allocate results from the recorded metadata and call the kernels directly, since the
// inputs are checked against the placeholders' dtypes and shapes on every run and shape
// inference depends on nothing else. Runs may happen concurrently.
class Interpreter {
 public:
  explicit Interpreter(std::shared_ptr<const Graph> graph);
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // `inputs`: the placeholders' tensors; `runtime_values`: the runtime attributes' values in
  // Graph::runtime_attr_values() order (empty: the values baked into the graph). No autograd
  // recording, no capture. Returns the graph's outputs.
  std::vector<Tensor> run(std::span<const Tensor> inputs,
                          std::span<const int64_t> runtime_values = {}) const;
  const Graph& graph() const { return *graph_; }
  // The plan in words, one line per step: the slots each node reads and writes, how its
  // kernel is called, and the slots released after it (for debug dumps).
  std::string describe_plan() const;

 private:
  struct Step {
    int32_t node;
    int32_t first_slot;                 // its outputs' slots
    uint32_t inputs_begin, inputs_end;  // into input_slots_
    uint32_t runtime_begin;             // its runtime attributes: graph.runtime_attrs[...]
    uint32_t runtime_end;
    uint32_t release_begin, release_end;  // into release_: slots dead after this step
  };
  std::shared_ptr<const Graph> graph_;
  std::vector<int32_t> slot_of_;  // first slot of each node
  int32_t num_slots_ = 0;
  std::vector<Step> steps_;
  std::vector<int32_t> input_slots_;
  std::vector<int32_t> release_;
  mutable std::atomic<bool> verified_{false};
};

}  // namespace kiln::ir
