// `kiln train`: its flags, their validation, the checks made before training, the training
// loop, periodic and interrupt-time checkpoints.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

#include "gpt_checkpoint.h"
#include "kiln/capture/debug.h"
#include "kiln/distributed/data_parallel.h"
#include "kiln/distributed/process_group.h"
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
      .add_int("batch", "N", 32, "sequences per step (per process under kiln launch)")
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
      .add_int("threads", "N", 2,
               "threads for kernels and BLAS (per process; under kiln launch, default its share "
               "of the cores)")
      .add_float("dropout", "F", 0.0, "dropout probability", FloatRange::half_open(0.0, 1.0))
      .add_string("save-every", "N|Nm", "10m",
                  "also save a checkpoint to --out every N steps, or every N minutes (10m, 90s, "
                  "2h); 'off' never")
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
  o.threads_given = a.was_given("threads");
  o.dropout = a.get_float("dropout");
  o.eager = a.get_switch("eager");
  o.seed_given = a.was_given("seed");
  o.save_every = parse_save_every(a.get_string("save-every"));
  if (o.embd % o.heads != 0) {
    throw UsageError("--embd " + std::to_string(o.embd) + " is not a multiple of --heads " +
                     std::to_string(o.heads));
  }
  return o;
}

namespace {

// Mean loss over `batches` random batches of one split, without recording gradients.
// Data-parallel, rank 0 evaluates batches of the global size (ranks x --batch).
double evaluate(nn::GPT& model, const TextDataset& data, Split split, const TrainOptions& o,
                Generator& gen) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    Batch b = data.get_batch(split, o.batch * distributed::get_world_size(), o.block, gen);
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
// Nothing in it reads a value (the clipping is the tensor form, the loss is returned as a
// tensor), so a compiled step is one graph with no break — on one process. Data-parallel, the
// loss goes through DistributedDataParallel, whose gradient allreduces break the compiled step
// at each bucket boundary (docs/distributed.md).
Tensor train_step(nn::GPT& model, optim::Optimizer& opt, const Batch& batch,
                  nn::DistributedDataParallel<nn::GPT>* ddp) {
  Tensor loss =
      ddp ? ddp->call([&] { return model.loss(batch.x, batch.y); }) : model.loss(batch.x, batch.y);
  opt.zero_grad();
  loss.backward();
  optim::clip_grad_norm_tensor_(model.parameters(), 1.0);
  opt.step();
  return loss;
}

int interrupted_status(int signal) { return 128 + signal; }

namespace {

// The command that continues a run from `path` (every flag that must match, spelled out).
std::string resume_command(const TrainOptions& o, const std::string& path) {
  std::ostringstream os;
  os << "kiln train --resume " << path << " --out " << path << " --data " << o.data << " --steps "
     << o.steps << " --batch " << o.batch << " --block " << o.block << " --layers " << o.layers
     << " --heads " << o.heads << " --embd " << o.embd << " --lr " << o.lr << " --warmup "
     << o.warmup << " --eval-every " << o.eval_every << " --eval-batches " << o.eval_batches
     << " --dropout " << o.dropout;
  if (o.eager) os << " --eager";
  return os.str();
}

}  // namespace

namespace {
// Data-parallel when started by a launcher (`kiln launch`, torchrun, mpirun): joins the group
// for the run and leaves it at the end.
struct ProcessGroupScope {
  bool joined = false;
  ProcessGroupScope() {
    const char* world = std::getenv("WORLD_SIZE");
    if (!world) world = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (world && std::string(world) != "1") {
      distributed::init_process_group();
      joined = true;
    }
  }
  ~ProcessGroupScope() {
    if (!joined) return;
    try {
      distributed::destroy_process_group();
    } catch (const Error&) {  // another rank failed: its error is the one reported
    }
  }
};
}  // namespace

int run_train(const TrainOptions& o, std::ostream& out, std::ostream& err_stream) {
  ProcessGroupScope group;
  const int rank = distributed::get_rank(), world = distributed::get_world_size();
  // Rank 0 reports; the other ranks print their errors only (thrown, printed by the caller).
  // (A stream without a buffer discards what it is given: nothing piles up over a long run.)
  std::ostream discarded(nullptr);
  std::ostream& err = rank == 0 ? err_stream : discarded;
  // --threads is per process: with a launcher, OMP_NUM_THREADS (its share of the cores) wins
  // unless --threads was given.
  set_num_threads(static_cast<int>(world > 1 && !o.threads_given && std::getenv("OMP_NUM_THREADS")
                                       ? std::max(1, std::atoi(std::getenv("OMP_NUM_THREADS")))
                                       : o.threads));
  TextDataset data = TextDataset::from_file(o.data, o.block);
  const double baseline = data.unigram_entropy(Split::kVal);
  if (data.invalid_utf8_bytes() > 0)
    err << "kiln train: " << data.name() << " is not valid UTF-8 (first bad byte at offset "
        << data.first_invalid_utf8_offset() << "); " << data.invalid_utf8_bytes()
        << " bytes were read as Latin-1 characters\n";

  nn::GPTConfig config;
  config.vocab_size = data.vocab().size();
  config.block_size = o.block;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  config.dropout = o.dropout;
  // Refuse a run that cannot fit before anything big is allocated.
  check_fits(estimate_train_bytes(config, o.batch), available_memory(),
             "a training step of this model (--layers " + std::to_string(o.layers) + ", --embd " +
                 std::to_string(o.embd) + ", --heads " + std::to_string(o.heads) + ", --block " +
                 std::to_string(o.block) + ", --batch " + std::to_string(o.batch) + ", " +
                 std::to_string(config.vocab_size) + " characters)",
             "lower --batch, --block, --layers or --embd");

  // A resumed run: everything in the checkpoint is checked before any training.
  std::optional<GPTCheckpoint> ckpt;
  uint64_t seed = o.seed;
  if (!o.resume.empty()) {
    ckpt = load_gpt_checkpoint(o.resume);
    KILN_CHECK(ckpt->vocab == data.vocab(), CheckpointError, o.resume,
               ": its vocabulary differs from that of ", o.data);
    KILN_CHECK(ckpt->config.block_size == o.block && ckpt->config.n_layer == o.layers &&
                   ckpt->config.n_head == o.heads && ckpt->config.n_embd == o.embd &&
                   ckpt->config.tied_head == config.tied_head,
               CheckpointError, o.resume, ": the model in it (block ", ckpt->config.block_size,
               ", layers ", ckpt->config.n_layer, ", heads ", ckpt->config.n_head, ", embd ",
               ckpt->config.n_embd, ") differs from the one asked for (block ", o.block,
               ", layers ", o.layers, ", heads ", o.heads, ", embd ", o.embd, ")");
    KILN_CHECK(ckpt->step < o.steps, ValueError, o.resume, " already has ", ckpt->step,
               " steps; pass --steps larger than that to train further");
    // The random streams continue from where they stopped: same seed, saved offsets.
    const uint64_t saved_seed = checkpoint_uint(*ckpt, "seed");
    KILN_CHECK(!o.seed_given || o.seed == saved_seed, ValueError, "--seed ", o.seed,
               " differs from the seed ", saved_seed, " that ", o.resume,
               " was trained with; a resumed run continues its random streams (omit --seed)");
    seed = saved_seed;
    for (const char* key :
         {"batch_generator_offset", "eval_generator_offset", "default_generator_offset"})
      checkpoint_uint(*ckpt, key);
  }

  manual_seed(seed);
  nn::GPT model(config);
  optim::AdamW opt(model.parameters(), {.lr = o.lr, .weight_decay = 0.1});
  // Data-parallel: every rank draws the global batch (world x --batch) from the same stream and
  // trains on its own rows, so N ranks x --batch b follow one process's --batch N*b.
  std::optional<nn::DistributedDataParallel<nn::GPT>> ddp;
  if (world > 1) ddp.emplace(std::shared_ptr<nn::GPT>(&model, [](nn::GPT*) {}));
  optim::WarmupCosineSchedule schedule(o.lr, std::min(o.warmup, o.steps), o.steps, o.lr * 0.1);
  Generator batch_gen(seed + 1), eval_gen(seed + 2);

  int64_t start_step = 0;
  if (ckpt) {
    try {
      model.load_state_dict(ckpt->model);
      opt.load_state_dict(ckpt->optimizer);
    } catch (const CheckpointError&) {
      throw;
    } catch (const Error& e) {
      throw CheckpointError(o.resume + ": " + e.what());
    }
    start_step = ckpt->step;
    batch_gen.set_offset(checkpoint_uint(*ckpt, "batch_generator_offset"));
    eval_gen.set_offset(checkpoint_uint(*ckpt, "eval_generator_offset"));
    default_generator().set_offset(checkpoint_uint(*ckpt, "default_generator_offset"));
    ckpt.reset();
  }

  // The checkpoint of the state after `steps` steps, as saved at the end, periodically and on
  // interruption.
  auto make_checkpoint = [&](int64_t steps) {
    GPTCheckpoint c;
    c.config = config;
    c.vocab = data.vocab();
    c.step = steps;
    c.model = model.state_dict();
    c.optimizer = opt.state_dict();
    c.extra["batch_generator_offset"] = std::to_string(batch_gen.offset());
    c.extra["eval_generator_offset"] = std::to_string(eval_gen.offset());
    c.extra["default_generator_offset"] = std::to_string(default_generator().offset());
    c.extra["seed"] = std::to_string(seed);
    return c;
  };
  // Everything that could make the final save fail is checked now, not after training: the
  // header (names, metadata, UTF-8) is built and the destination checked again.
  validate_gpt_checkpoint(make_checkpoint(start_step));
  check_output_file("--out", o.out);

  // From here on SIGINT / SIGTERM save the last finished step (checked after each step).
  InterruptGuard interrupt;
  err << "kiln train: " << data.name() << ": " << data.tokens().numel() << " characters, "
      << data.vocab().size() << " distinct; GPT " << o.layers << " layers x " << o.embd << " wide, "
      << model.num_parameters() << " parameters; " << o.steps - start_step << " steps of "
      << o.batch << " x " << o.block << " tokens";
  if (world > 1) err << " per rank, " << world << " ranks (data-parallel)";
  err << "\n";
  err << "kiln train: unigram-entropy baseline (val) " << fixed(baseline)
      << " nats; the goal is to end well below it\n";

  // The training step through kiln::compile (unless --eager): forward, backward, clipping and
  // the AdamW update are one graph.
  CompileProfiler profiler;
  nn::DistributedDataParallel<nn::GPT>* ddp_ptr = ddp ? &*ddp : nullptr;
  auto compiled_step =
      kiln::compile([&](const Batch& b) { return train_step(model, opt, b, ddp_ptr); },
                    CompileOptions{.name = "train_step"});
  const double compile_before = compile_times()["total"];

  ProgressBar::Options popts;
  popts.terminal = is_terminal(2);
  popts.terminal = popts.terminal && rank == 0;
  ProgressBar bar(o.steps, o.batch * o.block * world, err, popts);
  double val = 0, train_loss = 0;
  using Clock = std::chrono::steady_clock;
  auto last_save = Clock::now();
  int64_t last_saved_step = start_step;
  for (int64_t step = start_step; step < o.steps; ++step) {
    opt.set_lr(schedule.lr_at(step));
    Batch b = data.get_batch(Split::kTrain, o.batch * world, o.block, batch_gen);
    if (world > 1)
      b = {b.x.narrow(0, rank * o.batch, o.batch), b.y.narrow(0, rank * o.batch, o.batch)};
    Tensor loss_t = o.eager ? train_step(model, opt, b, ddp_ptr) : compiled_step(b);
    if (world > 1) {  // the progress bar shows the global batch's loss
      loss_t = loss_t.detach().clone();
      distributed::all_reduce(loss_t, distributed::ReduceOp::Avg);
    }
    const double loss = loss_t.item<double>();
    KILN_CHECK(std::isfinite(loss), Error, "training diverged at step ", step + 1, " (loss ", loss,
               "); try a lower --lr");
    bar.update(step + 1, loss);
    if (rank == 0 && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps)) {
      train_loss = evaluate(model, data, Split::kTrain, o, eval_gen);
      val = evaluate(model, data, Split::kVal, o, eval_gen);
      bar.message("step " + std::to_string(step + 1) + ": train " + fixed(train_loss) + ", val " +
                  fixed(val) + " (baseline " + fixed(baseline) + ", " + versus(val, baseline) +
                  ")");
    }
    if (o.after_step) o.after_step(step + 1);
    // (A signal during the last step lets the run finish: the final save follows at once.)
    // Data-parallel, the ranks agree on it (a signal may reach them between different steps),
    // so that all stop after the same step and rank 0 saves once.
    int sig = step + 1 < o.steps ? interrupt.pending() : 0;
    if (world > 1 && step + 1 < o.steps) {
      Tensor s = full({1}, static_cast<int64_t>(sig), DType::Int64);
      distributed::all_reduce(s, distributed::ReduceOp::Max);
      sig = static_cast<int>(s.item<int64_t>());
    }
    if (sig != 0) {
      if (rank == 0) save_gpt_checkpoint(o.out, make_checkpoint(step + 1));
      bar.finish();
      err << "kiln train: interrupted by " << InterruptGuard::name(sig) << " after step "
          << step + 1 << " of " << o.steps << "; checkpoint saved to " << o.out
          << "\nkiln train: resume with: " << resume_command(o, o.out) << "\n";
      return interrupted_status(sig);
    }
    const bool due =
        step + 1 < o.steps &&
        ((o.save_every.steps > 0 && (step + 1 - last_saved_step) >= o.save_every.steps) ||
         (o.save_every.seconds > 0 &&
          std::chrono::duration<double>(Clock::now() - last_save).count() >= o.save_every.seconds));
    if (due && rank == 0) {
      save_gpt_checkpoint(o.out, make_checkpoint(step + 1));
      last_save = Clock::now();
      last_saved_step = step + 1;
      bar.message("step " + std::to_string(step + 1) + ": checkpoint saved to " + o.out);
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

  if (rank != 0) return kExitOk;
  save_gpt_checkpoint(o.out, make_checkpoint(o.steps));

  out << "final: train " << fixed(train_loss) << ", val " << fixed(val) << " nats; baseline "
      << fixed(baseline) << " (" << versus(val, baseline) << ")\n";
  out << "checkpoint: " << o.out << " (sample with: kiln sample --checkpoint " << o.out << ")\n";
  Generator sample_gen(seed);
  Tensor prompt = data.vocab().encode_tensor(default_prompt(data.vocab())).unsqueeze(0);
  out << "sample:\n"
      << data.vocab().decode(model.generate(prompt, 200, 0.8, &sample_gen)[0]) << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
