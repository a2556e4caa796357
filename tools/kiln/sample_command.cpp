// `kiln sample`: its flags, their validation, and (for now) a stub in place of generation.
#include <ostream>

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
      .add_int("seed", "N", 1337, "random seed", /*min=*/0);
  return p;
}

SampleOptions SampleOptions::from_args(const ParsedArgs& a) {
  SampleOptions o;
  o.checkpoint = a.get_string("checkpoint");
  o.prompt = a.get_string("prompt");
  o.tokens = a.get_int("tokens");
  o.temperature = a.get_float("temperature");
  o.seed = static_cast<uint64_t>(a.get_int("seed"));
  return o;
}

int run_sample(const SampleOptions& o, std::ostream& out, std::ostream& err) {
  err << "kiln sample: sampling is not implemented yet\n";
  return kExitNotImplemented;
}

}  // namespace kiln::cli
