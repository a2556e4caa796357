// The tracer: while a compiled function runs, dispatch hands it every op call; it records a
// graph node and returns *pending* tensors (metadata now, storage once the segment runs).
// A sync point runs the segment (cache lookup, compile on a miss) and makes them concrete.
//
// Memory model (functionalisation): every pending tensor lives in a virtual Buffer whose
// current value is a contiguous graph value. Views of it are views of that buffer; an in-place
// write replaces the buffer's value (with as_strided_scatter when only part of it is written)
// and bumps its version, so a view read later is re-derived from the new value. A concrete
// tensor written in place gets a Buffer over its Storage (a flat graph input) that is written
// back after the segment runs, so aliasing through views stays correct.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capture/segment_autograd.h"
#include "capture/state.h"
#include "kiln/autograd/autograd.h"

namespace kiln::capture {

class Tracer;

struct Buffer {
  ir::ValueRef value;  // contiguous, numel elements
  int64_t numel = 0;
  DType dtype = DType::Float32;
  uint64_t version = 0;
  std::shared_ptr<Storage> concrete;  // a written concrete storage (written back after the run)
  Tensor concrete_flat;               // its flat graph input
  int32_t input_index = -1;           // concrete_flat's position among the graph's inputs
  int32_t output_slot = -1;           // during a flush: which graph output holds it
};

// A pending tensor of a tracer. The first tensor over some memory keeps that memory's Buffer
// inline (one allocation per op result); tensors made over it later (views, detach()) point to
// it and keep it alive.
class PendingTensor final : public PendingValue {
 public:
  // A tensor with memory of its own, whose current value is `value`.
  PendingTensor(Tracer* tracer, ir::ValueRef value, int64_t numel, DType dtype)
      : tracer(tracer), thread(std::this_thread::get_id()), value(value), buffer_(&own_) {
    own_.value = value;
    own_.numel = numel;
    own_.dtype = dtype;
  }
  // A tensor over `memory`'s memory.
  PendingTensor(std::shared_ptr<PendingTensor> memory, ir::ValueRef value, uint64_t value_version)
      : tracer(memory->tracer),
        thread(memory->thread),
        value(value),
        value_version(value_version),
        owner_(std::move(memory)),
        buffer_(owner_->buffer_) {}
  PendingTensor(const PendingTensor&) = delete;
  PendingTensor& operator=(const PendingTensor&) = delete;

  void materialize(TensorImpl& self, const char* why, const std::source_location* where) override;
  void share_with(const TensorImpl& self, const std::shared_ptr<TensorImpl>& alias) override;
  const void* memory_id() const override { return buffer_; }
  uint64_t version() const override { return buffer_->version; }
  int64_t capacity() const override { return buffer_->numel; }
  bool memory_is_private() const override { return owner_ == nullptr || owner_.use_count() == 1; }
  Buffer& buffer() const { return *buffer_; }

  // A value_version no buffer reaches: the value must be re-derived from the buffer.
  static constexpr uint64_t kStale = ~uint64_t{0};

  Tracer* tracer;
  std::thread::id thread;  // the capturing thread: the only one that may run the graph
  ir::ValueRef value;      // this tensor's value, valid while value_version == buffer().version
  uint64_t value_version = 0;
  // Made outside recording (detach(), or a view while capture was paused): under AOT autograd
  // its value never carries a gradient, as the tensor has no history.
  bool without_history = false;

 private:
  Buffer own_;
  std::shared_ptr<PendingTensor> owner_;  // the tensor whose own_ is this tensor's memory
  Buffer* buffer_;
};

// What pure mode learns from a captured call (CompileOptions::pure): its graphs and breaks,
// and the one graph's entry, input tensors and outputs (see capture/pure.cpp).
struct PureObservation {
  int segments = 0;  // graphs run
  int breaks = 0;    // sync points other than the return, empty segments included
  bool wrote = false;
  std::shared_ptr<CacheEntry> entry;  // the last graph's compiled entry (null: ran eagerly)
  uint64_t generation = 0;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
};

// The backend contract on a graph's outputs (segment.cpp): one fresh contiguous tensor per
// output, of its dtype and size; an output aliasing an input or another output is cloned.
void check_backend_outputs(const detail::CompiledState& st, const ir::Graph& graph,
                           std::span<const Tensor> inputs, std::vector<Tensor>& outs);

// Installed as this thread's DispatchInterceptor while its function runs, and as its
// PendingWrites while it has writes into concrete storages recorded. Under an AOT backend it is
// the SegmentHost of its segments' autograd (capture/segment_autograd.h).
class Tracer final : public DispatchInterceptor, public PendingWrites, public SegmentHost {
 public:
  // `args`: the call's tensor arguments (input_label names them).
  Tracer(std::shared_ptr<detail::CompiledState> state, bool frozen,
         const detail::ArgumentTensors& args = {});
  ~Tracer() override;

  bool intercept(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                 std::span<Tensor, kMaxOpOutputs> outputs, int& num_outputs) override;
  // AOT autograd (the backend came from aot_autograd): the tracer sees ops before autograd and
  // gives their outputs the segment's one autograd node (see segment_autograd.h).
  bool records_autograd() const override { return recording_autograd() != nullptr; }
  PendingValue* writer_of(const Storage& storage) override;

  // A sync point: runs the captured segment and makes every live pending tensor concrete.
  // `is_return`: the function's return (not a graph break).
  void flush(const std::string& reason, const CallSite& site, bool is_return);
  // Gives up on the segment (fn threw): pending tensors left alive throw when read.
  void abandon(const std::string& why);

  void register_pending(const std::shared_ptr<TensorImpl>& impl) {
    rec_.pending.emplace_back(impl);
  }
  // A pending tensor with t's dtype and shape that is a new graph input (metadata-only runs).
  Tensor symbolic_input(const Tensor& t) {
    return symbolic_input(TensorMeta(t.dtype(), t.sizes()));
  }
  Tensor symbolic_input(const TensorMeta& meta);
  // A metadata-only run's graph, with `results` as its outputs (see capture/retrace.h for what
  // such a run may do); the tracer's segment is left empty.
  ir::Graph take_graph(std::span<const Tensor> results);
  // Metadata-only runs that extend a graph (AOT autograd's joint graph): the segment starts as
  // a copy of `g` without its outputs, and value_tensor(v) is a pending tensor holding g's
  // value v, to compute with.
  void adopt_graph(const ir::Graph& g);
  Tensor value_tensor(ir::ValueRef v) override;
  // This capture only computes metadata: a sync point is an error naming `who`.
  void set_metadata_only(std::string who) { metadata_only_ = std::move(who); }
  bool metadata_only() const override { return !metadata_only_.empty(); }

  // ---- SegmentHost (what AOT autograd asks of the capture) ----
  void run_for_gradient() override;
  bool recording_here() const override;
  size_t num_recorded_nodes() const override {
    return replay_.entry ? replay_.cursor : rec_.graph.nodes.size();
  }
  const ir::Node& recorded_node(size_t i) const override {
    return replay_.entry ? replay_.entry->graph.nodes[i] : rec_.graph.nodes[i];
  }
  const Tensor& graph_input(int32_t index) const override {
    return rec_.inputs[static_cast<size_t>(index)];
  }
  void set_tracing_backward(bool on) override { tracing_backward_ = on; }
  // Pure mode's record of this call (null unless the function is compiled with pure=true).
  const std::shared_ptr<PureObservation>& pure_observation() const { return pure_; }

 private:
  // ---- recording (tracer.cpp) ----
  // While a segment repeats a graph this function ran recently (replay_), node for node,
  // nothing is built: each record_* call only compares with the cached node at the cursor and
  // skips shape inference (the cached node already has its output metadata). At a difference
  // another recent entry with the same prefix may take over; otherwise the matched prefix is
  // copied into the graph and recording goes on from there, so a changed graph is captured
  // exactly as without replay.
  ir::ValueRef record_placeholder(const TensorMeta& info);
  ir::ValueRef record_constant(const Scalar& value, DType dtype);
  // Records a call whose output metadata `infer` computes (not run while replaying).
  // `grad`: its floating outputs require grad (AOT autograd; part of the node's identity).
  template <class Infer>
  ir::ValueRef record_call(const OpDef& op, std::span<const ir::ValueRef> ins, const Attrs& attrs,
                           Infer&& infer, bool grad = false);
  // Whether a recorded value requires grad (AOT autograd's bit on its metadata).
  bool value_requires_grad(ir::ValueRef v) const {
    const ir::Node& n = recorded_node(static_cast<size_t>(v.node));
    return static_cast<size_t>(v.output) < n.outputs.size() &&
           n.outputs[static_cast<size_t>(v.output)].requires_grad;
  }
  // t's pending value if this tracer made it (null for concrete tensors and other captures').
  PendingTensor* own_pending(const TensorImpl& impl) const;
  ir::ValueRef value_of(const Tensor& t);
  // Re-derives `t`'s value from its buffer, which was written since the value was recorded
  // (under AOT autograd with the buffer's gradient: `t` takes the new value's history).
  void rederive(const Tensor& t, PendingTensor& p);
  Tensor new_pending(const TensorMeta& info, ir::ValueRef value);
  bool record_view(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                   std::span<Tensor, kMaxOpOutputs> outputs, bool grad);

  // What a sync point runs the graph for: the live pending tensors, and the buffers they and
  // the written storages are the graph outputs of.
  struct SegmentOutputs {
    std::vector<std::pair<std::shared_ptr<TensorImpl>, PendingTensor*>> live;
    std::vector<Buffer*> buffers;  // by graph output
  };

  // ---- AOT autograd (tracer.cpp) ----
  // The segment's autograd while ops record with gradients (null: a plain backend, or a
  // backward being traced into the graph, whose formulas record as under a plain backend).
  SegmentAutograd* recording_autograd() const {
    return tracing_backward_ ? nullptr : autograd_.get();
  }
  // Why an op must not be captured with gradients (it runs eagerly after a sync point), or
  // null: in-place writes where gradients are involved, and inputs that require grad from
  // outside this segment's node while pending (a leaf made inside the function).
  const char* aot_refusal(std::span<const Tensor> inputs, const Tensor& out, bool grad) const;
  // Gives the outputs of a recorded call their slots of the segment's autograd node.
  void attach_grad(std::span<Tensor> outputs);
  // At the sync point: what the segment's autograd runs the graph for (nothing: no node).
  std::optional<GradRequest> grad_request(const SegmentOutputs& outputs) const;
  // Runs the graph as a forward/backward pair (`entry`'s, or compiled just for this run when
  // null) and hands the node its saved values.
  std::vector<Tensor> run_with_autograd(CacheEntry* entry, const ir::Graph& graph,
                                        const GradRequest& request);
  // `target` is about to be written: see SegmentAutograd::before_write.
  void before_write(const Tensor& target) {
    if (autograd_) autograd_->before_write(target);
  }

  // ---- replay (tracer.cpp) ----
  // The segment about to start repeats, we guess, one of the entries its function ran most
  // recently for it: the latest first.
  void start_replay();
  // Whether the node at the cursor fits (`matches`), in the entry being replayed or in another
  // recent entry with the same prefix (which then becomes the one replayed); if neither,
  // replay stops.
  template <class Matches>
  bool replay_matches(Matches&& matches);
  // Switches the replay to another recent entry that `fits` and shares the prefix matched so
  // far; false if there is none.
  template <class Fits>
  bool switch_replay(Fits&& fits) {
    fetch_replay_candidates();
    for (const std::shared_ptr<CacheEntry>& other : replay_.candidates)
      if (other != replay_.entry && fits(*other) && shares_replayed_prefix(*other)) {
        replay_.entry = other;
        return true;
      }
    return false;
  }
  // Loads the function's recent entries for this segment into replay_.candidates (once).
  void fetch_replay_candidates();
  // Whether `other`'s first replay_.cursor nodes equal those of the entry being replayed.
  bool shares_replayed_prefix(const CacheEntry& other) const;
  // Stops replaying: the graph gets the nodes matched so far (and recording watches for where
  // it parts from the entry: rec_.diverging_from).
  void stop_replay();
  // After a node is recorded: keeps the user's call site if it is the first that differs from
  // rec_.diverging_from's graph but for sizes.
  void note_divergence(ir::ValueRef recorded);
  // Where the user's code called the op recorded as node `node` of this segment's graph, when
  // that call site was kept (note_divergence), else an unknown location.
  ir::SourceLoc recorded_call_site(int32_t node) const;

  // ---- in-place writes (tracer.cpp) ----
  // Records the write of `value` into dst's memory: a functional update of its Buffer.
  // `grad`: AOT autograd records the written value as requiring grad.
  void write_into(const Tensor& dst, ir::ValueRef value, const TensorMeta& value_info,
                  bool grad = false);
  // The Buffer of a concrete storage `dst` writes into: created (and the storage marked, a
  // flat graph input recorded) on its first write in the segment.
  Buffer& written_buffer(const Tensor& dst);
  // Written concrete storages stop being sync points (before the segment runs or is dropped).
  void release_written_storages();

  // Graph input `index` as the user knows it, for recompile reasons: "argument 1 (graph input
  // 0)", "parameter 'fc1.weight' (graph input 3)", "optimizer state 'Adam.state[fc1.weight]
  // .exp_avg' (graph input 7)".
  std::string input_label(int32_t index) const;

  // ---- the sync point (segment.cpp), in the order flush runs them ----
  void check_can_flush(const std::string& reason) const;
  // Logs and notifies a graph break; throws under fullgraph=true.
  void report_break(const std::string& reason, const CallSite& site);
  // The graph's outputs: the buffer of every live pending tensor, and every written storage.
  SegmentOutputs collect_outputs();
  // The entry a replay matched completely (a cache hit with no lookup), or null.
  std::shared_ptr<CacheEntry> finish_replay();
  void drop_empty_segment(const SegmentOutputs& outputs);
  // Runs (compiling on a miss) the finished graph; returns its outputs. `grad`: run it with
  // AOT autograd for these differentiated values.
  std::vector<Tensor> run_segment(const ir::Graph& graph, std::shared_ptr<CacheEntry> hit,
                                  const GradRequest* grad);
  // This call's runtime attribute values (random seeds and offsets) for `entry`'s graph.
  std::vector<int64_t> runtime_values_for(const CacheEntry& entry, const ir::Graph& graph) const;
  // Gives the live pending tensors their storage.
  void materialize(const SegmentOutputs& outputs, std::span<const Tensor> values);
  // Copies the final values of written concrete storages into them.
  void write_back(std::span<const Tensor> values);
  // Pure mode: what this segment ran, for CallScope::learn_pure.
  void observe_for_pure(std::span<const Tensor> values);
  void next_segment();
  void reset_segment();

  std::shared_ptr<detail::CompiledState> state_;
  bool frozen_;  // use cached graphs only; a miss runs eagerly
  detail::ArgumentTensors args_;
  std::string metadata_only_;
  size_t adopted_runtime_attrs_ = 0;  // the random ops of an adopted graph (see adopt_graph)
  bool flushing_ = false;
  bool tracing_backward_ = false;  // AOT autograd traces a backward into the graph
  size_t segment_index_ = 0;
  std::shared_ptr<CacheEntry> last_entry_;  // the entry run_segment ran (null: interpreted)
  std::shared_ptr<PureObservation> pure_;
  // AOT autograd's side of this capture (null: the backend is not an AOT backend).
  std::unique_ptr<SegmentAutograd> autograd_;

  // The segment being recorded.
  struct Recording {
    ir::Graph graph;
    std::vector<Tensor> inputs;  // the placeholders' tensors
    std::unordered_map<const TensorImpl*, ir::ValueRef> input_of;
    std::vector<std::weak_ptr<TensorImpl>> pending;  // every pending tensor made
    // The cached entry whose replay failed (stop_replay): recording compares each new node with
    // its node at the same position, and keeps the user's call site of the first that differs
    // but for sizes — where a branch or loop on a size made this call's ops part from it. Only
    // that one: a backtrace costs microseconds, far more than recording an op.
    std::shared_ptr<const CacheEntry> diverging_from;
    // (node, the user's return address) of that node when the site is a C++ frame (a front
    // end's location, Python's, goes to the node's loc). Resolved when needed: finding a return
    // address's line runs addr2line.
    std::optional<std::pair<int32_t, void*>> divergence_frame;
  } rec_;

  // The cached entry being repeated (see record_*), the others it may switch to
  // (CompiledState::recent, fetched when needed), how many of its nodes matched, and the
  // runtime attributes (random seeds/offsets) met so far, in node order.
  struct Replay {
    std::shared_ptr<CacheEntry> entry;
    std::vector<std::shared_ptr<CacheEntry>> candidates;
    uint64_t generation = 0;
    size_t cursor = 0;
    std::vector<int64_t> runtime_values;
  } replay_;

  // Concrete storages written in place during the segment.
  struct WrittenMemory {
    std::unordered_map<const Storage*, std::shared_ptr<Buffer>> storages;
    std::vector<Buffer*> order;  // the same buffers in the order of their first write
    // What a written storage points to while marked: reading it on this thread is a sync point.
    std::unique_ptr<PendingValue> writer;
    // Concrete tensors over written storages: their value, valid for one buffer version. The
    // tensor is kept alive so that its address cannot be reused by another tensor meanwhile.
    struct View {
      Tensor tensor;
      ir::ValueRef value;
      uint64_t version_plus_one = 0;  // 0: not recorded yet
    };
    std::unordered_map<const TensorImpl*, View> views;
  } written_;
};

}  // namespace kiln::capture
