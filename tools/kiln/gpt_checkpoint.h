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
  std::string path;                          // the file it was loaded from (for messages)
};

// Checks everything save_gpt_checkpoint checks (names, metadata, UTF-8) without writing or
// copying tensor data; throws CheckpointError. `kiln train` calls it before training.
void validate_gpt_checkpoint(const GPTCheckpoint& ckpt);
// Writes atomically (see save_safetensors).
void save_gpt_checkpoint(const std::string& path, const GPTCheckpoint& ckpt);
// Reads and validates the format tag and metadata; throws CheckpointError naming the problem.
// Every metadata field is parsed strictly: integers are decimal digits only, in range
// (sizes >= 1, step >= 0; n_embd a multiple of n_head), tied_head is "0" or "1" and agrees
// with the presence of model.lm_head.weight, and the training state ("seed", the
// "*_generator_offset" keys) holds unsigned integers when present. Messages name the file,
// the key and the value.
GPTCheckpoint load_gpt_checkpoint(const std::string& path);

// Strict integer parsing of one metadata value (CheckpointError naming path, key and value).
int64_t parse_meta_int(const std::string& path, const std::string& key, const std::string& value,
                       int64_t min);
uint64_t parse_meta_uint(const std::string& path, const std::string& key, const std::string& value);
// An unsigned value of `extra` (e.g. "seed"); CheckpointError when it is missing or invalid.
uint64_t checkpoint_uint(const GPTCheckpoint& c, const std::string& key);

}  // namespace kiln::cli
