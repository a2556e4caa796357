#include "gpt_checkpoint.h"

#include <charconv>

namespace kiln::cli {

namespace {
const char* kModelPrefix = "model.";
const char* kOptimPrefix = "optim.";

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key,
                 const std::string& path) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), CheckpointError, path, ": not a Kiln GPT checkpoint (no '", key,
             "' in its metadata)");
  int64_t v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(ec == std::errc() && p == s.data() + s.size(), CheckpointError, path, ": metadata '",
             key, "' is not an integer: '", s, "'");
  return v;
}
}  // namespace

void save_gpt_checkpoint(const std::string& path, const GPTCheckpoint& c) {
  NamedTensors all;
  for (const auto& [name, t] : c.model) all.emplace_back(kModelPrefix + name, t.detach());
  for (const auto& [name, t] : c.optimizer.tensors)
    all.emplace_back(kOptimPrefix + name, t.detach());
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
  meta["tied_head"] = c.config.tied_head ? "1" : "0";
  save_safetensors(path, all, meta);
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
  c.step = meta_int(m, "step", path);
  c.config.vocab_size = meta_int(m, "vocab_size", path);
  c.config.block_size = meta_int(m, "block_size", path);
  c.config.n_layer = meta_int(m, "n_layer", path);
  c.config.n_head = meta_int(m, "n_head", path);
  c.config.n_embd = meta_int(m, "n_embd", path);
  c.config.tied_head = meta_int(m, "tied_head", path) != 0;
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
