// `kiln sample`: its flags, their validation, and generation from a checkpoint.
#include <algorithm>
#include <iomanip>
#include <ostream>

#include "gpt_checkpoint.h"

#include "cli.h"
#include "commands.h"

namespace kiln::cli {

ArgParser sample_parser() {
  ArgParser p("sample", "Generate text from a checkpoint written by 'kiln train'.");
  p.add_path("checkpoint", "FILE", "kiln-gpt.safetensors", "checkpoint to load", PathRole::kInput)
      .add_string("prompt", "TEXT", "", "text the sample continues (default: none)")
      .add_int("tokens", "N", 500, "characters to generate")
      .add_float("temperature", "F", 0.8, "softmax temperature; lower is more conservative",
                 FloatRange::positive())
      .add_int("seed", "N", 1337, "random seed", /*min=*/0)
      .add_switch("eager", "run the sampling step eagerly instead of through kiln::compile");
  return p;
}

SampleOptions SampleOptions::from_args(const ParsedArgs& a) {
  SampleOptions o;
  o.checkpoint = a.get_string("checkpoint");
  o.prompt = a.get_string("prompt");
  o.tokens = a.get_int("tokens");
  o.temperature = a.get_float("temperature");
  o.seed = static_cast<uint64_t>(a.get_int("seed"));
  o.eager = a.get_switch("eager");
  return o;
}

int run_sample(const SampleOptions& o, std::ostream& out, std::ostream& err) {
  GPTCheckpoint ckpt = load_gpt_checkpoint(o.checkpoint);
  // The metadata says how big a model to build: refuse one that cannot fit (a corrupt or
  // hostile file) before allocating it.
  check_fits(estimate_generate_bytes(ckpt.config), available_memory(),
             "the model " + o.checkpoint + " describes (n_layer " +
                 std::to_string(ckpt.config.n_layer) + ", n_embd " +
                 std::to_string(ckpt.config.n_embd) + ", block_size " +
                 std::to_string(ckpt.config.block_size) + ", vocab_size " +
                 std::to_string(ckpt.config.vocab_size) + ")",
             "is its metadata corrupt?");
  nn::GPT model(ckpt.config);
  try {
    model.load_state_dict(ckpt.model);
  } catch (const Error& e) {
    throw CheckpointError(o.checkpoint + ": " + e.what());
  }
  model.eval();
  // Every character of the prompt must be in the model's vocabulary: the first that is not is
  // named with its position (a usage error, status 2). An empty prompt starts from a newline,
  // as the text's lines do, or from the vocabulary's first character when it has no newline.
  const std::string prompt = o.prompt.empty() ? default_prompt(ckpt.vocab) : o.prompt;
  try {
    (void)ckpt.vocab.encode(prompt);
  } catch (const ValueError& e) {
    throw UsageError(std::string("--prompt: ") + e.what() + " the model was trained on");
  }
  Generator gen(o.seed);
  Tensor ids = ckpt.vocab.encode_tensor(prompt).unsqueeze(0);
  // The sampling step (the model's logits for the last position) through kiln::compile (unless
  // --eager): its context grows a token per step up to block_size, so the first lengths make a
  // graph, the next a dynamic one, and every later length runs on it (docs/dynamic_shapes.md).
  CompileProfiler profiler;
  auto step =
      kiln::compile([&](const Tensor& context) { return model.forward(context).select(1, -1); },
                    CompileOptions{.name = "sample_step"});
  const double compile_before = compile_times()["total"];
  Tensor result = o.eager ? model.generate(ids, o.tokens, o.temperature, &gen)
                          : model.generate(ids, o.tokens, o.temperature, &gen,
                                           [&](const Tensor& context) { return step(context); });
  if (!o.eager && o.tokens > 0) {
    const auto stats = profiler.stats();
    const auto it = stats.find("sample_step");
    const int64_t graphs = it == stats.end() ? 0 : it->second.graphs;
    err << "kiln sample: the sampling step ran through kiln::compile: " << graphs << " graph"
        << (graphs == 1 ? "" : "s") << " compiled for contexts of "
        << std::min<int64_t>(ids.size(1), ckpt.config.block_size) << " to "
        << std::min<int64_t>(ids.size(1) + o.tokens - 1, ckpt.config.block_size)
        << " tokens, compile time " << std::fixed << std::setprecision(3)
        << compile_times()["total"] - compile_before << " s\n";
  }
  out << (o.prompt.empty() ? "" : o.prompt) << ckpt.vocab.decode(result[0].slice(0, ids.size(1)))
      << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
