// The checkpoint `kiln train` writes and `kiln sample` reads: one safetensors file holding the
// model's parameters ("model.<name>"), the optimizer's state ("optim.<name>" tensors and
// metadata keys), and metadata
// (format tag, model configuration, vocabulary, training step and generator positions).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kiln/kiln.h"
#include "text_data.h"

namespace kiln::cli {

inline constexpr const char* kCheckpointFormat = "kiln-char-gpt-v1";

struct GPTCheckpoint {
  nn::GPTConfig config;
  CharVocab vocab;
  int64_t step = 0;  // optimizer steps taken
  NamedTensors model;
  optim::OptimizerState optimizer;           // tensors and metadata, both stored under "optim."
  std::map<std::string, std::string> extra;  // training state (generator offsets, options)
};

// Writes atomically (see save_safetensors).
void save_gpt_checkpoint(const std::string& path, const GPTCheckpoint& ckpt);
// Reads and validates the format tag and metadata; throws CheckpointError naming the problem.
GPTCheckpoint load_gpt_checkpoint(const std::string& path);

}  // namespace kiln::cli
