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
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capture/state.h"
#include "kiln/autograd/autograd.h"

namespace kiln::capture {

class Tracer;

// Turns interception and autograd recording off for a scope: what runs inside (a backend
// compiling or running a graph) computes eagerly.
class PauseCapture {
 public:
  PauseCapture() { frames().push_back({nullptr, true}); }
  ~PauseCapture() { frames().pop_back(); }
  PauseCapture(const PauseCapture&) = delete;
  PauseCapture& operator=(const PauseCapture&) = delete;

 private:
  InterceptorScope no_interceptor_{nullptr};
  AutoGradMode no_grad_{false};
};

struct Buffer {
  ir::ValueRef value;  // contiguous, numel elements
  int64_t numel = 0;
  DType dtype = DType::Float32;
  uint64_t version = 0;
  std::shared_ptr<Storage> concrete;  // a written concrete storage (written back after the run)
  Tensor concrete_flat;               // its flat graph input
  int32_t output_slot = -1;           // during a flush: which graph output holds it
};

// A pending tensor of a tracer. The first tensor over some memory keeps that memory's Buffer
// inline (one allocation per op result); tensors made over it later (views, detach()) point to
// it and keep it alive.
class PendingTensor final : public PendingValue,
                            public std::enable_shared_from_this<PendingTensor> {
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
  void share_with(const std::shared_ptr<TensorImpl>& alias) override;
  const void* memory_id() const override { return buffer_; }
  uint64_t version() const override { return buffer_->version; }
  int64_t capacity() const override { return buffer_->numel; }
  Buffer& buffer() const { return *buffer_; }

  Tracer* tracer;
  std::thread::id thread;  // the capturing thread: the only one that may run the graph
  ir::ValueRef value;      // this tensor's value, valid while value_version == buffer().version
  uint64_t value_version = 0;

 private:
  Buffer own_;
  std::shared_ptr<PendingTensor> owner_;  // the tensor whose own_ is this tensor's memory
  Buffer* buffer_;
};

class Tracer final : public DispatchInterceptor {
 public:
  Tracer(std::shared_ptr<detail::CompiledState> state, bool frozen);
  ~Tracer() override;

  bool intercept(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                 std::span<Tensor, kMaxOpOutputs> outputs, int& num_outputs) override;

  // A sync point: runs the captured segment and makes every live pending tensor concrete.
  // `is_return`: the function's return (not a graph break).
  void flush(const std::string& reason, const CallSite& site, bool is_return);
  // Gives up on the segment (fn threw): pending tensors left alive throw when read.
  void abandon(const std::string& why);

  void register_pending(const std::shared_ptr<TensorImpl>& impl) { pending_.push_back(impl); }
  // A pending tensor with t's dtype and shape that is a new graph input (metadata-only runs).
  Tensor symbolic_input(const Tensor& t);
  // This capture only computes metadata: a sync point is an error naming `who`.
  void set_metadata_only(std::string who) { metadata_only_ = std::move(who); }
  bool metadata_only() const { return !metadata_only_.empty(); }

 private:
  // ---- recording ----
  // While a segment repeats a graph this function ran recently (`replay_`), node for node,
  // nothing is built: each record_* call only compares with the cached node at the cursor and
  // skips shape inference (the cached node already has its output metadata). At a difference
  // another recent entry with the same prefix may take over; otherwise the matched prefix is
  // copied into graph_ and recording goes on from there, so a changed graph is captured
  // exactly as without replay.
  ir::ValueRef record_placeholder(const TensorMeta& info);
  ir::ValueRef record_constant(const Scalar& value, DType dtype);
  // Records a call whose output metadata `infer` computes (not run while replaying).
  template <class Infer>
  ir::ValueRef record_call(const OpDef& op, std::span<const ir::ValueRef> ins, const Attrs& attrs,
                           Infer&& infer);
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
    for (const std::shared_ptr<CacheEntry>& other : candidates_)
      if (other != replay_ && fits(*other) && shares_replayed_prefix(*other)) {
        replay_ = other;
        return true;
      }
    return false;
  }
  // Loads the function's recent entries for this segment into candidates_ (once).
  void fetch_replay_candidates();
  // Whether `other`'s first cursor_ nodes equal those of the entry being replayed.
  bool shares_replayed_prefix(const CacheEntry& other) const;
  // Stops replaying: graph_ gets the nodes matched so far.
  void stop_replay();
  // The segment about to start repeats, we guess, one of the entries its function ran most
  // recently for it: the latest first.
  void start_replay();
  const ir::Node& recorded_node(size_t i) const {
    return replay_ ? replay_->graph.nodes[i] : graph_.nodes[i];
  }

  ir::ValueRef value_of(const Tensor& t);
  Tensor new_pending(const TensorMeta& info, ir::ValueRef value);
  void write_into(const Tensor& dst, ir::ValueRef value, const TensorMeta& value_info);
  bool record_view(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                   std::span<Tensor, kMaxOpOutputs> outputs);
  void reset_segment();
  // Written concrete storages stop being sync points (before the segment runs or is dropped).
  void release_written_storages();
  // Runs (compiling on a miss) the finished graph; returns its outputs.
  // `hit`: the entry a replay matched completely (no lookup needed).
  std::vector<Tensor> run_segment(const ir::Graph& graph, std::shared_ptr<CacheEntry> hit);

  std::shared_ptr<detail::CompiledState> state_;
  bool frozen_;     // use cached graphs only; a miss runs eagerly
  uint64_t token_;  // marks the storages this capture writes (Storage::mark_pending_write)
  std::string metadata_only_;
  ir::Graph graph_;
  std::vector<Tensor> inputs_;  // the placeholders' tensors
  std::unordered_map<const TensorImpl*, ir::ValueRef> input_of_;
  std::unordered_map<const Storage*, std::shared_ptr<Buffer>> written_storages_;
  std::vector<Buffer*> written_order_;  // the same buffers in the order of their first write
  // What a written storage points to while marked: reading it on this thread is a sync point.
  std::unique_ptr<PendingValue> storage_writer_;
  bool flushing_ = false;
  // Concrete tensors over written storages: their value, valid for one buffer version. The
  // tensor is kept alive so that its address cannot be reused by another tensor meanwhile.
  struct WrittenView {
    Tensor tensor;
    ir::ValueRef value;
    uint64_t version_plus_one = 0;  // 0: not recorded yet
  };
  std::unordered_map<const TensorImpl*, WrittenView> written_views_;
  std::vector<std::weak_ptr<TensorImpl>> pending_;
  size_t segment_index_ = 0;
  // Replay state (see record_*): the entry being repeated, the others it may switch to, how
  // many of its nodes matched, and the runtime attributes (random seeds/offsets) met so far,
  // in node order.
  std::shared_ptr<CacheEntry> replay_;
  std::vector<std::shared_ptr<CacheEntry>> candidates_;  // CompiledState::recent, when needed
  uint64_t replay_generation_ = 0;
  size_t cursor_ = 0;
  std::vector<int64_t> replay_runtime_values_;
};

}  // namespace kiln::capture
