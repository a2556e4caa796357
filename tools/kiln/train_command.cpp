// `kiln train`: its flags, their validation, and (for now) a stub in place of the training loop.
#include <ostream>

#include "cli.h"
#include "commands.h"
#include "text_data.h"

namespace kiln::cli {

ArgParser train_parser() {
  ArgParser p("train",
              "Train a small character-level GPT on a text file and save it as a checkpoint\n"
              "that 'kiln sample' reads.");
  p.add_path("data", "FILE", default_corpus_path(), "text to train on", PathRole::kInput)
      .add_int("steps", "N", 1000, "optimiser steps")
      .add_int("batch", "N", 32, "sequences per step")
      .add_int("block", "N", 64, "context length in characters")
      .add_int("layers", "N", 4, "transformer blocks")
      .add_int("heads", "N", 4, "attention heads per block (must divide --embd)")
      .add_int("embd", "N", 128, "embedding width")
      .add_float("lr", "F", 1e-3, "peak learning rate (AdamW)", FloatRange::positive())
      .add_int("warmup", "N", 100, "linear learning-rate warm-up steps", /*min=*/0)
      .add_int("eval-every", "N", 100, "steps between validation-loss evaluations")
      .add_int("eval-batches", "N", 20, "batches averaged per evaluation")
      .add_int("seed", "N", 1337, "random seed (initialisation, batches, dropout)", /*min=*/0)
      .add_path("out", "FILE", "kiln-gpt.safetensors", "checkpoint to write", PathRole::kOutput)
      .add_path("resume", "FILE", "", "continue training from this checkpoint", PathRole::kInput)
      .add_int("threads", "N", 2, "threads for kernels and BLAS")
      .add_float("dropout", "F", 0.0, "dropout probability", FloatRange::half_open(0.0, 1.0))
      .add_switch("eager", "run eagerly: do not compile the training step");
  return p;
}

TrainOptions TrainOptions::from_args(const ParsedArgs& a) {
  TrainOptions o;
  o.data = a.get_string("data");
  o.steps = a.get_int("steps");
  o.batch = a.get_int("batch");
  o.block = a.get_int("block");
  o.layers = a.get_int("layers");
  o.heads = a.get_int("heads");
  o.embd = a.get_int("embd");
  o.lr = a.get_float("lr");
  o.warmup = a.get_int("warmup");
  o.eval_every = a.get_int("eval-every");
  o.eval_batches = a.get_int("eval-batches");
  o.seed = static_cast<uint64_t>(a.get_int("seed"));
  o.out = a.get_string("out");
  o.resume = a.get_string("resume");
  o.threads = a.get_int("threads");
  o.dropout = a.get_float("dropout");
  o.eager = a.get_switch("eager");
  if (o.embd % o.heads != 0) {
    throw UsageError("--embd " + std::to_string(o.embd) + " is not a multiple of --heads " +
                     std::to_string(o.heads));
  }
  return o;
}

int run_train(const TrainOptions& o, std::ostream& out, std::ostream& err) {
  // Loading the text checks it against the context length before any work is done.
  TextDataset data = TextDataset::from_file(o.data, o.block);
  err << "kiln train: " << data.name() << ": " << data.tokens().numel() << " characters, "
      << data.vocab().size() << " distinct; train " << data.size(Split::kTrain) << ", val "
      << data.size(Split::kVal) << "; unigram entropy " << data.unigram_entropy(Split::kTrain)
      << " nats\n";
  err << "kiln train: the training loop is not implemented yet\n";
  return kExitNotImplemented;
}

}  // namespace kiln::cli
