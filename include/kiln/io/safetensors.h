// Reading and writing the safetensors checkpoint format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the raw little-endian, row-major
// tensor data. See docs/checkpoints.md.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln {

// A file that cannot be written, or whose contents are not a valid safetensors file Kiln can
// load. The message names the file, the tensor (where there is one) and the problem.
class CheckpointError : public Error {
  using Error::Error;
};

// Ordered name → tensor pairs. Writers keep this order; readers must not depend on it.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What a safetensors file holds: its tensors (in the header's order) and its "__metadata__".
struct SafetensorsContents {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` and `metadata` to `path` atomically: into a temporary file in the same
// directory, fsync'd, then renamed over `path`. Non-contiguous tensors are written as their
// row-major contents. Throws CheckpointError on an empty, duplicate or reserved ("__metadata__")
// name, an undefined tensor, a name or metadata string that is not UTF-8, or any I/O failure; a
// failed save leaves no file behind and never damages an existing file at `path`.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file. Validates all of it before returning anything; throws
// CheckpointError for a malformed file or a dtype Kiln does not have (F16, BF16, U8, ...).
SafetensorsContents load_safetensors(const std::string& path);

// The bytes save_safetensors would write (same validation, same errors).
std::string safetensors_to_bytes(const NamedTensors& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

// Parses safetensors bytes held in memory; `source_name` stands for the file in error messages.
SafetensorsContents safetensors_from_bytes(std::string_view bytes,
                                           const std::string& source_name = "<bytes>");

}  // namespace kiln
