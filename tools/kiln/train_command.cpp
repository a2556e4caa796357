// `kiln train`: its flags, their validation, and (for now) a stub in place of the training loop.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "gpt_checkpoint.h"
#include "kiln/capture/debug.h"
#include "progress_bar.h"

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
      .add_switch("eager", "run the training step eagerly instead of through kiln::compile");
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

namespace {

// Mean loss over `batches` random batches of one split, without recording gradients.
double evaluate(nn::GPT& model, const TextDataset& data, Split split, const TrainOptions& o,
                Generator& gen) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    Batch b = data.get_batch(split, o.batch, o.block, gen);
    total += model.loss(b.x, b.y).item<double>();
  }
  model.train();
  return total / static_cast<double>(o.eval_batches);
}

// "12.3% below" / "4.5% above" the baseline.
std::string versus(double loss, double baseline) {
  const double pct = 100.0 * (1.0 - loss / baseline);
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << std::abs(pct) << (pct >= 0 ? "% below" : "% above");
  return os.str();
}

std::string fixed(double v, int digits = 3) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

}  // namespace

// One optimizer step: forward, backward, clip, update; run_train wraps it in kiln::compile.
double train_step(nn::GPT& model, optim::Optimizer& opt, const Batch& batch) {
  Tensor loss = model.loss(batch.x, batch.y);
  opt.zero_grad();
  loss.backward();
  optim::clip_grad_norm_(model.parameters(), 1.0);
  opt.step();
  return loss.item<double>();
}

int run_train(const TrainOptions& o, std::ostream& out, std::ostream& err) {
  set_num_threads(static_cast<int>(o.threads));
  TextDataset data = TextDataset::from_file(o.data, o.block);
  const double baseline = data.unigram_entropy(Split::kVal);

  nn::GPTConfig config;
  config.vocab_size = data.vocab().size();
  config.block_size = o.block;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  config.dropout = o.dropout;
  manual_seed(o.seed);
  nn::GPT model(config);
  optim::AdamW opt(model.parameters(), {.lr = o.lr, .weight_decay = 0.1});
  optim::WarmupCosineSchedule schedule(o.lr, std::min(o.warmup, o.steps), o.steps, o.lr * 0.1);
  Generator batch_gen(o.seed + 1), eval_gen(o.seed + 2);

  int64_t start_step = 0;
  if (!o.resume.empty()) {
    GPTCheckpoint ckpt = load_gpt_checkpoint(o.resume);
    KILN_CHECK(ckpt.vocab == data.vocab(), CheckpointError, o.resume,
               ": its vocabulary differs from that of ", o.data);
    KILN_CHECK(ckpt.config.block_size == o.block && ckpt.config.n_layer == o.layers &&
                   ckpt.config.n_head == o.heads && ckpt.config.n_embd == o.embd,
               CheckpointError, o.resume, ": the model in it (block ", ckpt.config.block_size,
               ", layers ", ckpt.config.n_layer, ", heads ", ckpt.config.n_head, ", embd ",
               ckpt.config.n_embd, ") differs from the one asked for (block ", o.block, ", layers ",
               o.layers, ", heads ", o.heads, ", embd ", o.embd, ")");
    model.load_state_dict(ckpt.model);
    opt.load_state_dict(ckpt.optimizer);
    start_step = ckpt.step;
    auto offset = [&](const char* key) {
      auto it = ckpt.extra.find(key);
      KILN_CHECK(it != ckpt.extra.end(), CheckpointError, o.resume, ": no '", key,
                 "' in its metadata");
      return std::stoull(it->second);
    };
    batch_gen.set_offset(offset("batch_generator_offset"));
    eval_gen.set_offset(offset("eval_generator_offset"));
    default_generator().set_offset(offset("default_generator_offset"));
    KILN_CHECK(start_step < o.steps, ValueError, o.resume, " already has ", start_step,
               " steps; pass --steps larger than that to train further");
  }

  err << "kiln train: " << data.name() << ": " << data.tokens().numel() << " characters, "
      << data.vocab().size() << " distinct; GPT " << o.layers << " layers x " << o.embd << " wide, "
      << model.num_parameters() << " parameters; " << o.steps - start_step << " steps of "
      << o.batch << " x " << o.block << " tokens\n";
  err << "kiln train: unigram-entropy baseline (val) " << fixed(baseline)
      << " nats; the goal is to end well below it\n";

  // The training step through kiln::compile (unless --eager): forward and backward are one
  // graph; gradient clipping reads the gradients (a graph break); the clipping and the AdamW
  // update are a second graph.
  CompileProfiler profiler;
  auto compiled_step = kiln::compile([&](const Batch& b) { return train_step(model, opt, b); },
                                     CompileOptions{.name = "train_step"});
  const double compile_before = compile_times()["total"];

  ProgressBar::Options popts;
  popts.terminal = is_terminal(2);
  ProgressBar bar(o.steps, o.batch * o.block, err, popts);
  double val = 0, train_loss = 0;
  for (int64_t step = start_step; step < o.steps; ++step) {
    opt.set_lr(schedule.lr_at(step));
    Batch b = data.get_batch(Split::kTrain, o.batch, o.block, batch_gen);
    const double loss = o.eager ? train_step(model, opt, b) : compiled_step(b);
    KILN_CHECK(std::isfinite(loss), Error, "training diverged at step ", step + 1, " (loss ", loss,
               "); try a lower --lr");
    bar.update(step + 1, loss);
    if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) {
      train_loss = evaluate(model, data, Split::kTrain, o, eval_gen);
      val = evaluate(model, data, Split::kVal, o, eval_gen);
      bar.message("step " + std::to_string(step + 1) + ": train " + fixed(train_loss) + ", val " +
                  fixed(val) + " (baseline " + fixed(baseline) + ", " + versus(val, baseline) +
                  ")");
    }
  }
  bar.finish();
  if (!o.eager) {
    const auto stats = profiler.stats();
    const auto it = stats.find("train_step");
    const CompileProfiler::FunctionStats none;
    const auto& st = it == stats.end() ? none : it->second;
    int64_t ops = 0;
    for (int64_t n : st.ops_per_graph) ops += n;
    err << "kiln train: compile summary: " << st.graphs << " graph" << (st.graphs == 1 ? "" : "s")
        << " compiled (" << ops << " ops), " << st.graph_breaks << " graph break"
        << (st.graph_breaks == 1 ? "" : "s") << ", " << st.recompile_reasons.size() << " recompile"
        << (st.recompile_reasons.size() == 1 ? "" : "s") << ", compile time "
        << fixed(compile_times()["total"] - compile_before, 3) << " s\n";
  }

  GPTCheckpoint ckpt;
  ckpt.config = config;
  ckpt.vocab = data.vocab();
  ckpt.step = o.steps;
  ckpt.model = model.state_dict();
  ckpt.optimizer = opt.state_dict();
  ckpt.extra["batch_generator_offset"] = std::to_string(batch_gen.offset());
  ckpt.extra["eval_generator_offset"] = std::to_string(eval_gen.offset());
  ckpt.extra["default_generator_offset"] = std::to_string(default_generator().offset());
  ckpt.extra["seed"] = std::to_string(o.seed);
  save_gpt_checkpoint(o.out, ckpt);

  out << "final: train " << fixed(train_loss) << ", val " << fixed(val) << " nats; baseline "
      << fixed(baseline) << " (" << versus(val, baseline) << ")\n";
  out << "checkpoint: " << o.out << " (sample with: kiln sample --checkpoint " << o.out << ")\n";
  Generator sample_gen(o.seed);
  Tensor prompt = data.vocab().encode_tensor(default_prompt(data.vocab())).unsqueeze(0);
  out << "sample:\n"
      << data.vocab().decode(model.generate(prompt, 200, 0.8, &sample_gen)[0]) << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
