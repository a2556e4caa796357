#include "gpt_checkpoint.h"

#include <charconv>

namespace kiln::cli {

namespace {
const char* kModelPrefix = "model.";
const char* kOptimPrefix = "optim.";

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key,
                 const std::string& path, int64_t min) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), CheckpointError, path, ": not a Kiln GPT checkpoint (no '", key,
             "' in its metadata)");
  return parse_meta_int(path, key, it->second, min);
}
}  // namespace

int64_t parse_meta_int(const std::string& path, const std::string& key, const std::string& s,
                       int64_t min) {
  int64_t v = 0;
  // Digits only (with a leading '-' only where negatives could be allowed): no sign, space,
  // fraction or exponent; out of range is an error, never a wrap-around.
  const bool digits = !s.empty() &&
                      s.find_first_not_of("0123456789", s[0] == '-' ? 1 : 0) == std::string::npos &&
                      s != "-";
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(digits && ec == std::errc() && p == s.data() + s.size() && v >= min, CheckpointError,
             path, ": metadata '", key, "' = '", s, "' is not valid: expected an integer >= ", min,
             ec == std::errc::result_out_of_range ? " that fits in 64 bits" : "");
  return v;
}

uint64_t parse_meta_uint(const std::string& path, const std::string& key, const std::string& s) {
  uint64_t v = 0;
  const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(digits && ec == std::errc() && p == s.data() + s.size(), CheckpointError, path,
             ": metadata '", key, "' = '", s,
             "' is not valid: expected an unsigned decimal integer below 2^64");
  return v;
}

uint64_t checkpoint_uint(const GPTCheckpoint& c, const std::string& key) {
  auto it = c.extra.find(key);
  KILN_CHECK(it != c.extra.end(), CheckpointError, c.path, ": no '", key, "' in its metadata");
  return parse_meta_uint(c.path, key, it->second);
}

namespace {
std::map<std::string, std::string> checkpoint_metadata(const GPTCheckpoint& c) {
  std::map<std::string, std::string> meta = c.extra;
  for (const auto& [key, value] : c.optimizer.metadata) meta[kOptimPrefix + key] = value;
  meta["format"] = kCheckpointFormat;
  meta["vocab"] = c.vocab.to_string();
  meta["step"] = std::to_string(c.step);
  meta["vocab_size"] = std::to_string(c.config.vocab_size);
  meta["block_size"] = std::to_string(c.config.block_size);
  meta["n_layer"] = std::to_string(c.config.n_layer);
  meta["n_head"] = std::to_string(c.config.n_head);
  meta["n_embd"] = std::to_string(c.config.n_embd);
  meta["tied_head"] = std::to_string(c.config.tied_head ? 1 : 0);
  return meta;
}
}  // namespace

void validate_gpt_checkpoint(const GPTCheckpoint& c) {
  // The same header with empty tensors of the same names: every check save_safetensors makes
  // on names and metadata, no data copied.
  NamedTensors names;
  const Tensor none = empty({0});
  for (const auto& [name, t] : c.model) names.emplace_back(kModelPrefix + name, none);
  for (const auto& [name, t] : c.optimizer.tensors) names.emplace_back(kOptimPrefix + name, none);
  (void)safetensors_to_bytes(names, checkpoint_metadata(c));
}

void save_gpt_checkpoint(const std::string& path, const GPTCheckpoint& c) {
  NamedTensors all;
  for (const auto& [name, t] : c.model) all.emplace_back(kModelPrefix + name, t.detach());
  for (const auto& [name, t] : c.optimizer.tensors)
    all.emplace_back(kOptimPrefix + name, t.detach());
  save_safetensors(path, all, checkpoint_metadata(c));
}

GPTCheckpoint load_gpt_checkpoint(const std::string& path) {
  SafetensorsContents file = load_safetensors(path);
  auto& m = file.metadata;
  auto fmt = m.find("format");
  KILN_CHECK(fmt != m.end() && fmt->second == kCheckpointFormat, CheckpointError, path,
             ": not a Kiln GPT checkpoint (format tag '",
             fmt == m.end() ? std::string("<none>") : fmt->second, "', expected '",
             kCheckpointFormat, "')");
  GPTCheckpoint c;
  c.path = path;
  c.step = meta_int(m, "step", path, 0);
  c.config.vocab_size = meta_int(m, "vocab_size", path, 1);
  c.config.block_size = meta_int(m, "block_size", path, 1);
  c.config.n_layer = meta_int(m, "n_layer", path, 1);
  c.config.n_head = meta_int(m, "n_head", path, 1);
  c.config.n_embd = meta_int(m, "n_embd", path, 1);
  KILN_CHECK(c.config.n_embd % c.config.n_head == 0, CheckpointError, path,
             ": metadata 'n_embd' = '", c.config.n_embd, "' is not a multiple of 'n_head' = '",
             c.config.n_head, "'");
  {
    const auto it = m.find("tied_head");
    KILN_CHECK(it != m.end(), CheckpointError, path,
               ": not a Kiln GPT checkpoint (no 'tied_head' in its metadata)");
    KILN_CHECK(it->second == "0" || it->second == "1", CheckpointError, path,
               ": metadata 'tied_head' = '", it->second, "' is not valid: expected '0' or '1'");
    c.config.tied_head = it->second == "1";
    bool has_head = false;
    for (const auto& [name, t] : file.tensors) has_head |= name == "model.lm_head.weight";
    KILN_CHECK(has_head != c.config.tied_head, CheckpointError, path, ": metadata 'tied_head' = '",
               it->second, "' but the file ", has_head ? "has" : "has no",
               " tensor 'model.lm_head.weight' (a ", c.config.tied_head ? "tied" : "separate",
               " head ", c.config.tied_head ? "has none" : "needs one", ")");
  }
  // Training state written by `kiln train`: checked here, where the file is named, rather
  // than when a resumed run reads it.
  for (const char* key :
       {"seed", "batch_generator_offset", "eval_generator_offset", "default_generator_offset"}) {
    auto it = m.find(key);
    if (it != m.end()) parse_meta_uint(path, key, it->second);
  }
  KILN_CHECK(m.count("vocab"), CheckpointError, path, ": no vocabulary in its metadata");
  try {
    c.vocab = CharVocab::from_string(m["vocab"]);
  } catch (const Error& e) {
    throw CheckpointError(path + ": invalid vocabulary: " + e.what());
  }
  KILN_CHECK(c.vocab.size() == c.config.vocab_size, CheckpointError, path, ": vocabulary has ",
             c.vocab.size(), " characters but the model expects ", c.config.vocab_size);
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kModelPrefix, 0) == 0)
      c.model.emplace_back(name.substr(6), t);
    else if (name.rfind(kOptimPrefix, 0) == 0)
      c.optimizer.tensors.emplace_back(name.substr(6), t);
    else
      throw CheckpointError(path + ": unexpected tensor '" + name + "'");
  }
  for (const char* key : {"format", "vocab", "step", "vocab_size", "block_size", "n_layer",
                          "n_head", "n_embd", "tied_head"})
    m.erase(key);
  for (auto it = m.begin(); it != m.end();) {
    if (it->first.rfind(kOptimPrefix, 0) == 0) {
      c.optimizer.metadata[it->first.substr(6)] = it->second;
      it = m.erase(it);
    } else {
      ++it;
    }
  }
  c.extra = std::move(m);
  return c;
}

}  // namespace kiln::cli
