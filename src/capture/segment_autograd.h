// The seam between the capture and AOT autograd. Under an AOT backend the tracer tells the
// segment's SegmentAutograd what it records and writes with gradients, asks it whose history a
// tensor has, and at the sync point has it run the graph as a forward/backward pair. AOT
// autograd (src/aot) implements SegmentAutograd and calls back through SegmentHost, which the
// tracer implements: capture includes nothing of src/aot, and src/aot nothing of the tracer.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diagnostics/diagnostics.h"
#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"

namespace kiln::capture {

struct CacheEntry;
class PendingTensor;

// What AOT autograd may ask of the capture recording the segment (capture::Tracer).
class SegmentHost {
 public:
  virtual ~SegmentHost() = default;
  // A gradient (backward(), a hook) reached the segment's node before its graph ran: the sync
  // point that runs it.
  virtual void run_for_gradient() = 0;
  // Whether the capture is recording on this thread now (not at a sync point): a backward may
  // be traced into the graph.
  virtual bool recording_here() const = 0;
  // A metadata-only run (capture/retrace.h): nothing runs, so no backward is traced inline.
  virtual bool metadata_only() const = 0;
  // The graph recorded so far, and the tensors of its inputs.
  virtual size_t num_recorded_nodes() const = 0;
  virtual const ir::Node& recorded_node(size_t i) const = 0;
  virtual const Tensor& graph_input(int32_t index) const = 0;
  // A pending tensor holding graph value v, to compute with (a traced backward's formulas).
  virtual Tensor value_tensor(ir::ValueRef v) = 0;
  // While a backward is traced into the graph its formulas record as under a plain backend: the
  // ops get no gradients of their own.
  virtual void set_tracing_backward(bool on) = 0;
};

// What the sync point runs with gradients: the values of the live tensors autograd can reach
// (the graph's differentiated values) and, per output slot of the segment's node, the tangent
// of its value (-1: none).
struct GradRequest {
  std::vector<ir::ValueRef> values;
  std::vector<int32_t> tangent_of_slot;
  std::vector<std::pair<TensorImpl*, uint32_t>> live;  // live tensors of the node, and slots
  std::vector<uint64_t> output_versions;               // per graph output: its buffer's version
};

// Told of each graph AOT autograd compiles for a segment, with what its compiler produced (a
// debug dump writes them): `part` "forward", "backward" or "backward_partial" (then `missing`
// lists the tangents that did not arrive). Called on the compiling thread.
using CompiledPartObserver = std::function<void(
    const std::string& part, const std::string& missing, const ir::Graph& graph,
    std::vector<diagnostics::BackendOutput> outputs, std::map<std::string, double> seconds)>;

// What AOT autograd keeps in a cache entry (its forward/backward pairs).
struct AutogradPlans {
  virtual ~AutogradPlans() = default;
};

// AOT autograd's side of one capture (made per compiled call, for its segments in turn).
class SegmentAutograd {
 public:
  virtual ~SegmentAutograd() = default;

  // On record: `outputs` of a recorded call (or the new value of a write), holding graph values
  // `values`, become outputs of the segment's autograd node (its floating ones).
  virtual void on_record(std::span<Tensor> outputs, std::span<const ir::ValueRef> values) = 0;
  // On write, without gradients: the written tensors' history follows their new value.
  virtual void on_write_without_grad(std::span<Tensor> written) = 0;
  // Whether `m`'s history is this segment's: its grad_fn is one of the segment's nodes.
  virtual bool has_segment_history(const AutogradMeta* m) const = 0;
  // Whether a backward was traced into the graph being recorded.
  virtual bool traced_backward() const = 0;
  // `target` is about to be written (eagerly after a break, or by this segment's graph): values
  // the call's earlier compiled nodes saved over its memory are copied first.
  virtual void before_write(const Tensor& target) = 0;

  // Grad request, at the sync point: which of the `live` tensors hold outputs of the segment's
  // node; nothing when the segment has no node.
  using LiveTensors = std::span<const std::pair<std::shared_ptr<TensorImpl>, PendingTensor*>>;
  virtual std::optional<GradRequest> grad_request(LiveTensors live,
                                                  std::vector<uint64_t> output_versions) const = 0;
  // Run: `graph` (`entry`'s, whose plans are kept there; or null: compiled for this run only)
  // as a forward/backward pair; the node gets the forward's saved values. Returns the graph's
  // outputs.
  struct Run {
    CacheEntry* entry;
    const ir::Graph& graph;
    const GradRequest& request;
    std::span<const Tensor> inputs;
    std::vector<int64_t> runtime_values;          // every runtime attribute's, in the graph's order
    std::function<bool(const Storage*)> written;  // whether the graph writes this input memory
    CompiledPartObserver observer;                // empty: nobody is looking
  };
  virtual std::vector<Tensor> run(Run run) = 0;

  // The segment ended (ran or was dropped): its nodes stop pointing to the capture, and a node
  // whose graph ran without it can never be reached.
  virtual void end_segment() = 0;
  // The capture was given up: reaching the segment's node is an error saying why.
  virtual void abandon(const std::string& why) = 0;
};

// AOT autograd for the segments of one capture by `host`, compiled with `compilers` (defined in
// src/aot).
std::unique_ptr<SegmentAutograd> make_segment_autograd(SegmentHost& host,
                                                       const Backend::AotCompilers& compilers);

}  // namespace kiln::capture
