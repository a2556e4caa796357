// What `kiln train` and `kiln sample` check before they start work, and how a run survives
// interruption (docs/reliability.md):
//  - memory: an estimate of what a training step (or generation) needs against what the
//    machine has (MemAvailable, or the cgroup limit when lower); a run that cannot fit is
//    refused up front with ResourceError, absurd sizes included, before anything is allocated;
//  - the output file: an existing destination that is not a regular file is refused and its
//    folder must be writable (FileError), before training;
//  - signals: SIGINT/SIGTERM are turned into a flag the training loop polls, so it can save a
//    checkpoint of the last finished step and say how to resume;
//  - --save-every: periodic checkpoints, every N steps or every N minutes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/core/error.h"
#include "kiln/nn/gpt.h"

namespace kiln::cli {

// A run needs more memory than the machine has.
class ResourceError : public kiln::Error {
 public:
  using kiln::Error::Error;
};

// ---- memory ---------------------------------------------------------------------------------
struct AvailableMemory {
  double bytes = 0;    // what a run may use
  std::string source;  // where the figure came from, for messages
};
// The least of MemAvailable (/proc/meminfo) and the room left under the cgroup v2
// (memory.max - memory.current) or v1 (memory.limit_in_bytes - memory.usage_in_bytes) limit of
// this process, where one is set. When nothing can be read: +infinity ("unknown").
AvailableMemory available_memory();
// Parsers of those files' contents (tests feed them text): -1 when the text has no figure
// ("max" in a cgroup file means no limit).
double parse_meminfo_available(const std::string& meminfo);
double parse_cgroup_bytes(const std::string& text);

// Estimates in bytes, computed in double precision so absurd sizes give huge numbers rather
// than overflow. Parameters, gradients and the two AdamW moments (4 x 4 bytes per parameter)
// plus the activations autograd keeps for one step of `batch` sequences of config.block_size
// tokens (per layer ~ 16 x B x T x n_embd floats and 2 x B x n_head x T^2 for attention; the
// logits and their gradient 3 x B x T x vocab). Deliberately on the low side: a refusal means
// the run could not have fit (for the default model at --batch 256 it says 0.70 GB where
// the compiled run peaks at 0.83 GB resident and the eager one at 1.19 GB).
double estimate_train_bytes(const nn::GPTConfig& config, int64_t batch);
// Generating from one prompt: the parameters plus one forward pass without autograd.
double estimate_generate_bytes(const nn::GPTConfig& config);
// Throws ResourceError when `need` exceeds `avail`: "<what> needs about X GB (...), but only Y
// GB is available (source); <advice>".
void check_fits(double need, const AvailableMemory& avail, const std::string& what,
                const std::string& advice);
// "1.5 GB", "340 MB", "2.1e+12 GB".
std::string format_bytes(double bytes);

// ---- the output file ------------------------------------------------------------------------
// `flag` (e.g. "--out") names `path` in messages. Refuses an existing destination that is not
// a regular file or a symbolic link (directory, device, FIFO, socket) and a folder where a file
// cannot be created (checked by creating and removing a probe file). Throws FileError.
void check_output_file(const std::string& flag, const std::string& path);

// ---- interruption ---------------------------------------------------------------------------
// While alive, SIGINT and SIGTERM set a flag instead of killing the process; a second signal
// of either kind restores the default action and re-delivers it (a stuck save can still be
// interrupted). The previous handlers come back on destruction. One at a time per process.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  // The signal received (SIGINT or SIGTERM), 0 while none.
  int pending() const;
  static const char* name(int signal);  // "SIGINT", "SIGTERM"
};

// ---- --save-every ---------------------------------------------------------------------------
struct SaveEvery {
  int64_t steps = 0;    // > 0: every this many steps
  double seconds = 0;   // > 0: every this many seconds of training
  bool off() const { return steps <= 0 && seconds <= 0; }
};
// "100" (steps), "10m" (minutes), "90s", "2h", "0" or "off" (never). Throws UsageError
// naming --save-every, the value and what was expected.
SaveEvery parse_save_every(const std::string& text);

}  // namespace kiln::cli
