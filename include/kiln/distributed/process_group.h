// Collective communication between processes (torch.distributed): one process group per
// process, made from the environment a launcher sets (`kiln launch`, torchrun's variables, or
// mpirun's), running Gloo's collectives over TCP. The guide is docs/distributed.md.
//
// Gloo's calls block, so every collective runs on the group's communication thread, in the
// order the process issued them (the same order on every rank, as torch requires); the
// *_async forms return a Work to wait on, so the calling thread computes meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::distributed {

// Avg (floating tensors only) divides each rank's values by the world size, then sums them:
// DistributedDataParallel's order, which cannot overflow however many ranks take part.
enum class ReduceOp { Sum, Avg, Product, Min, Max };

struct InitOptions {
  // This process's rank and the number of processes; unset: from the environment (RANK and
  // WORLD_SIZE, else OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE).
  std::optional<int> rank;
  std::optional<int> world_size;
  // How long a collective (and the rendezvous) may wait for the other ranks before it fails
  // with an Error naming the collective (torch's default: 30 minutes, as a first inductor
  // compile can keep one rank away that long).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Where the ranks meet. Unset: $KILN_RENDEZVOUS, else a folder `kiln launch` made for this
  // run ($KILN_RENDEZVOUS_DIR), else redis at MASTER_ADDR:MASTER_PORT when MASTER_ADDR is
  // another machine, else a folder named after MASTER_PORT under the temporary directory.
  // Forms: "file:///path/to/folder", "redis://host:port".
  std::string rendezvous;
};

// Joins the process group; every rank must call it. backend: "gloo" (the only one: CPU
// tensors over TCP). Throws ValueError on a bad environment, Error when the rendezvous fails or
// times out.
void init_process_group(const std::string& backend = "gloo", const InitOptions& options = {});
bool is_initialized();
int get_rank();        // 0 when no group is initialised (torch: an error; a single process here)
int get_world_size();  // 1 when no group is initialised
// Waits for the collectives in flight, then leaves the group (the process may join again).
void destroy_process_group();

// A collective in flight (torch's Work / Future).
class Work {
 public:
  Work() = default;
  // Blocks until the collective is done; throws its Error if it failed (a timeout, a rank that
  // left). Waiting again returns at once (or throws again).
  void wait() const;
  bool is_completed() const;
  // Seconds the communication thread spent in the collective (0 until it completes).
  double seconds() const;
  // Bytes of each rank's data the collective reduces or sends (as sent: half of the tensor's
  // for all_reduce_fp16).
  int64_t bytes() const;
  struct State;

 private:
  friend class WorkAccess;
  std::shared_ptr<State> state_;
};

// The collectives. Tensors are the caller's, written in place (their version bumps, as for any
// in-place op): defined, contiguous, of dtype float32, float64, int32 or int64, not requiring
// grad (torch.distributed's collectives are not differentiable either) — else ValueError naming
// the collective. Every rank must call the same collectives in the same order, with tensors of
// the same shape and dtype; a debug mode checks that (KILN_DISTRIBUTED_DEBUG=1, below).
void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
// The average over the ranks of a float32 tensor, sent as float16 (half the bytes on the
// wire; each rank's values divided by the world size, rounded to float16, summed in float16,
// widened back): DistributedDataParallel's fp16 compression hook.
Work all_reduce_fp16_async(const Tensor& tensor);
void broadcast(const Tensor& tensor, int src);
Work broadcast_async(const Tensor& tensor, int src);
// outputs[r] receives rank r's `input`; outputs must hold world_size tensors of input's shape
// and dtype (torch.distributed.all_gather).
void all_gather(std::vector<Tensor>& outputs, const Tensor& input);
void barrier();

// With KILN_DISTRIBUTED_DEBUG=1 (torch's TORCH_DISTRIBUTED_DEBUG=DETAIL), every collective first
// exchanges a fingerprint (which collective, the op, dtype, element count) with the other ranks
// and fails on every rank, naming the differences, when they disagree; otherwise mismatched
// collectives are undefined (usually a hang until the timeout).
bool debug_checks_enabled();

}  // namespace kiln::distributed
