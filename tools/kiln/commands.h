// The subcommands of the `kiln` program: for each, the declaration of its flags (an ArgParser)
// and the function that runs it. cli.cpp dispatches to them.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <functional>

#include "cli_args.h"
#include "run_guard.h"

namespace kiln::cli {

// ---- kiln bench: time the benchmark workloads ----------------------------------------------
ArgParser bench_parser();
int run_bench(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// ---- kiln fuzz: differential fuzzing of the compile backends ------------------------------
ArgParser fuzz_parser();
int run_fuzz(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// ---- kiln report: the HTML compile report of a debug run (KILN_DEBUG_DIR) -------------------
ArgParser report_parser();
int run_report(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// ---- kiln minify: shrink a failing repro folder ---------------------------------------------
ArgParser minify_parser();
int run_minify(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// ---- kiln prepare: precompile generated code's runtime header beside the library -------------
ArgParser prepare_parser();
int run_prepare(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// ---- kiln launch: start the processes of a data-parallel run ------------------------------
ArgParser launch_parser();
int run_launch(const ParsedArgs& args, std::ostream& out, std::ostream& err);

// ---- kiln train: train a character-level GPT ------------------------------------------------
// Every value checked: sizes positive, rates in range, --embd a multiple of --heads, files
// present.
struct TrainOptions {
  std::string data;  // text file to train on
  int64_t steps = 0;
  int64_t batch = 0;
  int64_t block = 0;  // context length in characters
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t embd = 0;
  double lr = 0;           // peak learning rate (after warm-up)
  int64_t warmup = 0;      // linear warm-up steps (may be 0)
  int64_t eval_every = 0;  // steps between evaluations of the validation loss
  int64_t eval_batches = 0;
  uint64_t seed = 0;
  bool seed_given = false;  // --seed on the command line (a resumed run keeps its saved seed)
  std::string out;          // checkpoint to write
  std::string resume;       // checkpoint to continue from; empty = start fresh
  int64_t threads = 0;
  bool threads_given = false;  // --threads on the command line (else a launcher's share wins)
  double dropout = 0;
  bool eager = false;    // do not compile the training step
  SaveEvery save_every;  // periodic checkpoints to `out`
  // Called after each finished step with the number of steps done (tests use it to deliver
  // a signal at a known step); not a flag.
  std::function<void(int64_t)> after_step;

  // Reads and cross-checks parsed flags; throws UsageError naming the flags that conflict.
  static TrainOptions from_args(const ParsedArgs& args);
};
ArgParser train_parser();
int run_train(const TrainOptions& options, std::ostream& out, std::ostream& err);

// Exit status of a run stopped by SIGINT / SIGTERM after saving its checkpoint (128 + signal,
// as a shell reports a process killed by it).
int interrupted_status(int signal);

// ---- kiln sample: generate text from a checkpoint -------------------------------------------
struct SampleOptions {
  std::string checkpoint;
  std::string prompt;  // text the sample continues; may be empty
  int64_t tokens = 0;  // characters to generate
  double temperature = 1.0;
  uint64_t seed = 0;
  bool eager = false;  // the sampling step eagerly instead of through kiln::compile

  static SampleOptions from_args(const ParsedArgs& args);
};
ArgParser sample_parser();
int run_sample(const SampleOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kiln::cli
