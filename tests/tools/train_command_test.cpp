// kiln train / kiln sample reliability: resumed runs equal uninterrupted ones bit for bit,
// SIGINT saves and says how to resume, --save-every, strict checkpoint metadata, --out checked
// before training, runs that cannot fit refused up front, any text (UTF-8 or not) trains and
// saves. Small models so that each run takes well under a second.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "gpt_checkpoint.h"
#include "run_guard.h"
#include "tools/test_utils.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run;

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "kiln_train_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    std::string text;
    for (int i = 0; i < 40; ++i)
      text += "It is a truth universally acknowledged, " + std::to_string(i) + "\n";
    write(path("text.txt"), text);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write(const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }
  // The flags of a tiny run on text.txt; `extra` appended.
  std::vector<std::string> tiny(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {"--data",         path("text.txt"),
                                  "--batch",        "2",
                                  "--block",        "8",
                                  "--layers",       "1",
                                  "--embd",         "8",
                                  "--heads",        "2",
                                  "--eval-every",   "3",
                                  "--eval-batches", "1",
                                  "--warmup",       "2",
                                  "--dropout",      "0.1",
                                  "--eager"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  using Result = testing::Result;
  static Result train(const std::vector<std::string>& args,
                      std::function<void(int64_t)> after_step = nullptr) {
    TrainOptions o = TrainOptions::from_args(train_parser().parse(args));
    o.after_step = std::move(after_step);
    std::ostringstream out, err;
    const int status = run_train(o, out, err);
    return {status, out.str(), err.str()};
  }

  fs::path dir_;
};

// N steps in one run == k steps, interrupted by SIGINT, + a resumed run of the rest: the two
// final checkpoints are byte-identical (model, optimizer, generator offsets, seed), with
// dropout on so the global generator's stream matters too, and the resumed run takes the
// seed from the checkpoint (no --seed given).
TEST_F(TrainTest, InterruptedAndResumedEqualsUninterrupted) {
  for (const bool eager : {true, false}) {
    SCOPED_TRACE(eager ? "eager" : "compiled");
    const std::string whole = path("whole.safetensors"), part = path("part.safetensors");
    auto flags = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = tiny(std::move(extra));
      if (!eager) a.erase(std::find(a.begin(), a.end(), "--eager"));
      return a;
    };
    Result a = train(flags({"--steps", "7", "--seed", "7", "--out", whole}));
    ASSERT_EQ(a.status, kExitOk) << a.err;

    Result b = train(flags({"--steps", "7", "--seed", "7", "--out", part}), [](int64_t step) {
      if (step == 4) std::raise(SIGINT);  // delivered to this process's handler at once
    });
    EXPECT_EQ(b.status, 128 + SIGINT) << b.err;
    EXPECT_TRUE(contains(b.err, "interrupted by SIGINT after step 4 of 7")) << b.err;
    EXPECT_TRUE(contains(b.err, "resume with: kiln train --resume " + part)) << b.err;
    EXPECT_EQ(load_gpt_checkpoint(part).step, 4);

    Result c = train(flags({"--steps", "7", "--resume", part, "--out", part}));
    ASSERT_EQ(c.status, kExitOk) << c.err;
    EXPECT_EQ(read(part), read(whole)) << "a resumed run differs from an uninterrupted one";
  }

  // SIGTERM takes the same path (status 128 + 15); the handlers are restored afterwards.
  Result d = train(tiny({"--steps", "3", "--out", path("term.safetensors")}), [](int64_t step) {
    if (step == 1) std::raise(SIGTERM);
  });
  EXPECT_EQ(d.status, 128 + SIGTERM) << d.err;
  EXPECT_EQ(load_gpt_checkpoint(path("term.safetensors")).step, 1);
  // A signal during the last step: the run completes (status 0) with its final checkpoint.
  Result e = train(tiny({"--steps", "2", "--out", path("last.safetensors")}), [](int64_t step) {
    if (step == 2) std::raise(SIGINT);
  });
  EXPECT_EQ(e.status, kExitOk) << e.err;
  EXPECT_EQ(load_gpt_checkpoint(path("last.safetensors")).step, 2);
  struct sigaction now;
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST_F(TrainTest, ResumeKeepsTheSavedSeed) {
  const std::string p = path("c.safetensors");
  ASSERT_EQ(train(tiny({"--steps", "2", "--seed", "7", "--out", p})).status, kExitOk);
  std::vector<std::string> args = tiny({"--steps", "3", "--seed", "8", "--resume", p, "--out", p});
  args.insert(args.begin(), "train");
  Result r = run(args);
  EXPECT_EQ(r.status, kExitError);
  EXPECT_TRUE(contains(r.err, "--seed 8 differs from the seed 7")) << r.err;
}

TEST_F(TrainTest, SaveEveryWritesPeriodicCheckpoints) {
  const std::string p = path("c.safetensors");
  int64_t seen = -1;
  Result r = train(tiny({"--steps", "5", "--save-every", "2", "--out", p}), [&](int64_t step) {
    if (step == 3) seen = load_gpt_checkpoint(p).step;  // the save after step 2
  });
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(load_gpt_checkpoint(p).step, 5);

  EXPECT_EQ(parse_save_every("100").steps, 100);
  EXPECT_EQ(parse_save_every("10m").seconds, 600);
  EXPECT_EQ(parse_save_every("90s").seconds, 90);
  EXPECT_EQ(parse_save_every("2h").seconds, 7200);
  EXPECT_TRUE(parse_save_every("off").off());
  EXPECT_TRUE(parse_save_every("0").off());
  for (const char* bad : {"", "-1", "10x", "m", "1.5m", "99999999999999999999"}) {
    try {
      parse_save_every(bad);
      ADD_FAILURE() << bad;
    } catch (const UsageError& e) {
      EXPECT_TRUE(contains(e.what(), std::string("--save-every")) &&
                  contains(e.what(), "'" + std::string(bad) + "'"))
          << e.what();
    }
  }
}

// Writes a copy of `src` with one metadata value changed (or removed when value is empty).
void rewrite_metadata(const std::string& src, const std::string& dst, const std::string& key,
                      const std::string& value) {
  SafetensorsContents c = load_safetensors(src);
  if (value.empty())
    c.metadata.erase(key);
  else
    c.metadata[key] = value;
  NamedTensors tensors = c.tensors;
  if (key == "tied_head" && value == "0") {
  }  // no lm_head tensor: an inconsistent flag
  save_safetensors(dst, tensors, c.metadata);
}

TEST_F(TrainTest, CheckpointMetadataIsParsedStrictly) {
  const std::string good = path("good.safetensors"), bad = path("bad.safetensors");
  ASSERT_EQ(train(tiny({"--steps", "2", "--out", good})).status, kExitOk);
  struct Case {
    const char* key;
    const char* value;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"step", "x", "metadata 'step' = 'x' is not valid: expected an integer >= 0"},
           {"step", "-5", "metadata 'step' = '-5' is not valid"},
           {"step", "+3", "metadata 'step' = '+3' is not valid"},
           {"step", "99999999999999999999", "that fits in 64 bits"},
           {"n_layer", "0", "metadata 'n_layer' = '0' is not valid: expected an integer >= 1"},
           {"n_layer", "1e3", "metadata 'n_layer' = '1e3'"},
           {"n_embd", "9", "metadata 'n_embd' = '9' is not a multiple of 'n_head' = '2'"},
           {"tied_head", "2", "metadata 'tied_head' = '2' is not valid: expected '0' or '1'"},
           {"tied_head", "0", "metadata 'tied_head' = '0' but the file has no tensor"},
           {"seed", "-1", "metadata 'seed' = '-1' is not valid"},
           {"batch_generator_offset", "x", "metadata 'batch_generator_offset' = 'x'"},
           {"eval_generator_offset", "-5", "metadata 'eval_generator_offset' = '-5'"},
       }) {
    rewrite_metadata(good, bad, c.key, c.value);
    try {
      load_gpt_checkpoint(bad);
      ADD_FAILURE() << c.key << " = " << c.value << " accepted";
    } catch (const CheckpointError& e) {
      EXPECT_TRUE(contains(e.what(), bad) && contains(e.what(), c.message)) << e.what();
    }
    // Through the program: a clean error (status 1), never "internal error".
    Result r =
        run({"train", "--data", path("text.txt"), "--resume", bad, "--out", good, "--steps", "4",
             "--batch", "2", "--block", "8", "--layers", "1", "--embd", "8", "--heads", "2"});
    EXPECT_EQ(r.status, kExitError) << r.err;
    EXPECT_FALSE(contains(r.err, "internal error")) << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << r.err;
  }
  // A missing generator offset is named when resuming.
  rewrite_metadata(good, bad, "default_generator_offset", "");
  Result r =
      run({"train", "--data", path("text.txt"), "--resume", bad, "--out", good, "--steps", "4",
           "--batch", "2", "--block", "8", "--layers", "1", "--embd", "8", "--heads", "2"});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_TRUE(contains(r.err, "no 'default_generator_offset' in its metadata")) << r.err;
}

TEST_F(TrainTest, OutIsCheckedBeforeTraining) {
  ::mkfifo(path("fifo").c_str(), 0600);
  fs::create_directory(path("folder"));
  struct Case {
    std::string out, message;
  };
  for (const Case& c : std::vector<Case>{
           {"/dev/null", "'/dev/null' exists and is a character device, not a regular file"},
           {path("fifo"), "exists and is a FIFO (named pipe), not a regular file"},
           {path("folder"), "exists and is a folder, not a regular file"},
           {"/proc/kiln-test.safetensors", "--out: cannot create files in folder '/proc'"},
           {path("none/x.safetensors"), "does not exist"},
       }) {
    Result r =
        run({"train", "--data", path("text.txt"), "--steps", "2", "--block", "8", "--out", c.out});
    EXPECT_EQ(r.status, kExitError) << c.out << ": " << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << r.err;
    EXPECT_FALSE(contains(r.err, "characters,")) << "training started: " << r.err;
  }
  // A symbolic link and an existing regular file are fine.
  write(path("old.safetensors"), "old");
  EXPECT_NO_THROW(check_output_file("--out", path("old.safetensors")));
  fs::create_symlink(path("old.safetensors"), path("link.safetensors"));
  EXPECT_NO_THROW(check_output_file("--out", path("link.safetensors")));
  EXPECT_EQ(read(path("old.safetensors")), "old") << "the check writes nothing";
}

TEST_F(TrainTest, RunsThatCannotFitAreRefusedUpFront) {
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {"--batch", "1000000000"},
           {"--layers", "100000000000"},
           {"--embd", "4000000000", "--heads", "1"},
           {"--batch", "100000000000000"},
       }) {
    std::vector<std::string> args = {"train", "--data", path("text.txt"),     "--block",
                                     "8",     "--out",  path("x.safetensors")};
    args.insert(args.end(), flags.begin(), flags.end());
    Result r = run(args);
    EXPECT_EQ(r.status, kExitError) << flags[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "needs about") && contains(r.err, "is available")) << r.err;
    EXPECT_FALSE(contains(r.err, "internal error")) << r.err;
    EXPECT_FALSE(fs::exists(path("x.safetensors")));
  }
  // A checkpoint claiming n_layer=100000 of width 8192: refused before the model is built.
  const std::string good = path("good.safetensors"), bad = path("bad.safetensors");
  ASSERT_EQ(train(tiny({"--steps", "1", "--out", good})).status, kExitOk);
  SafetensorsContents c = load_safetensors(good);
  c.metadata["n_layer"] = "100000";
  c.metadata["n_embd"] = "8192";
  save_safetensors(bad, c.tensors, c.metadata);
  Result r = run({"sample", "--checkpoint", bad, "--tokens", "5"});
  EXPECT_EQ(r.status, kExitError) << r.err;
  EXPECT_TRUE(contains(r.err, "needs about") && contains(r.err, "n_layer 100000")) << r.err;

  // The estimate and the limits it is compared with.
  nn::GPTConfig cfg;
  cfg.vocab_size = 65, cfg.block_size = 64, cfg.n_layer = 4, cfg.n_head = 4, cfg.n_embd = 128;
  const double est = estimate_train_bytes(cfg, 32);
  EXPECT_GT(est, 16.0 * 800000);  // at least the parameters with gradients and AdamW state
  EXPECT_LT(est, 1e9) << "the default run is estimated far below a GB";
  // Below what the run really takes (measured: 0.83 GB peak resident compiled, 1.19 GB eager).
  EXPECT_LT(estimate_train_bytes(cfg, 256), 0.83e9);
  EXPECT_GT(estimate_train_bytes(cfg, 256), 0.5e9);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"), 2048 * 1024.0);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 100 kB\n"), -1);
  EXPECT_EQ(parse_cgroup_bytes("max\n"), -1);
  EXPECT_EQ(parse_cgroup_bytes("1073741824\n"), 1073741824.0);
  EXPECT_GT(available_memory().bytes, 0);
  try {
    check_fits(3e9, AvailableMemory{1e9, "a test"}, "this run", "lower --batch");
    ADD_FAILURE();
  } catch (const ResourceError& e) {
    EXPECT_STREQ(
        e.what(),
        "this run needs about 3.0 GB, but only 1.0 GB is available (a test); lower --batch");
  }
}

// A compiled run compiles its training step once, from the first step on (the optimizer's
// state is made before the step's graph, not inside the first one), and its compile summary
// never reports more time than the run took.
TEST_F(TrainTest, TheCompiledStepIsOneGraphAndItsCompileTimeFitsTheRun) {
  std::vector<std::string> args = tiny({"--steps", "3", "--out", path("c.safetensors")});
  args.erase(std::find(args.begin(), args.end(), "--eager"));
  const auto start = std::chrono::steady_clock::now();
  Result r = train(args);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(contains(r.err, "1 graph compiled")) << r.err;
  EXPECT_TRUE(contains(r.err, " 0 recompiles")) << r.err;
  const size_t at = r.err.find("compile time ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const double reported = std::stod(r.err.substr(at + std::string("compile time ").size()));
  EXPECT_GT(reported, 0.0) << r.err;
  EXPECT_LE(reported, waited) << r.err;
}

TEST_F(TrainTest, AnyTextTrainsSavesAndSamples) {
  // UTF-8 with 2-, 3- and 4-byte characters, no newline at all.
  std::string utf8;
  for (int i = 0; i < 30; ++i)
    utf8 += "caf\xc3\xa9 \xe2\x80\x94 \xce\xbb\xcf\x80 \xf0\x9f\x98\x80 ";
  write(path("utf8.txt"), utf8);
  std::vector<std::string> args = tiny({"--steps", "2", "--out", path("u.safetensors")});
  args[1] = path("utf8.txt");
  Result r = train(args);
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(contains(r.err, std::to_string(30 * 12) + " characters, 9 distinct")) << r.err;
  EXPECT_EQ(load_gpt_checkpoint(path("u.safetensors")).vocab.size(), 9);
  Result s = run({"sample", "--checkpoint", path("u.safetensors"), "--prompt", "caf\xc3\xa9",
                  "--tokens", "5"});
  EXPECT_EQ(s.status, kExitOk) << s.err;
  EXPECT_EQ(s.out.rfind("caf\xc3\xa9", 0), 0u) << s.out;
  // The sampling step runs through kiln::compile: its context grows from the prompt's 4
  // characters to block_size 8 on two graphs (the exact one, then a dynamic one), and the text
  // is eager sampling's.
  const std::vector<std::string> sample = {
      "sample", "--checkpoint", path("u.safetensors"), "--prompt", "caf\xc3\xa9", "--tokens", "12"};
  Result compiled = run(sample);
  std::vector<std::string> eager_sample = sample;
  eager_sample.push_back("--eager");
  Result eager = run(eager_sample);
  ASSERT_EQ(compiled.status, kExitOk) << compiled.err;
  ASSERT_EQ(eager.status, kExitOk) << eager.err;
  EXPECT_EQ(compiled.out, eager.out);
  EXPECT_TRUE(contains(compiled.err,
                       "the sampling step ran through kiln::compile: 2 graphs "
                       "compiled for contexts of 4 to 8 tokens"))
      << compiled.err;
  EXPECT_FALSE(contains(eager.err, "kiln::compile")) << eager.err;
  s = run({"sample", "--checkpoint", path("u.safetensors"), "--prompt", "\xc3\xa0 la"});
  EXPECT_EQ(s.status, kExitUsage);
  EXPECT_TRUE(
      contains(s.err, "--prompt: '\xc3\xa0' (U+00E0) at position 0 is not in the vocabulary"))
      << s.err;

  // Latin-1 bytes (not UTF-8): read as Latin-1 characters, reported, and the run saves.
  std::string latin1;
  for (int i = 0; i < 30; ++i) latin1 += "caf\xe9 na\xefve\n";
  write(path("latin1.txt"), latin1);
  args = tiny({"--steps", "2", "--out", path("l.safetensors")});
  args[1] = path("latin1.txt");
  r = train(args);
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "is not valid UTF-8 (first bad byte at offset 3); 60 bytes were read as "
                       "Latin-1 characters"))
      << r.err;
  EXPECT_TRUE(contains(load_gpt_checkpoint(path("l.safetensors")).vocab.to_string(), "\xc3\xa9"));
}

TEST_F(TrainTest, NegativeOptionValuesNameTheOption) {
  Result r = run({"train", "--steps", "-1"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_TRUE(contains(r.err, "--steps expects a positive integer, got '-1'")) << r.err;
  r = run({"train", "--save-every", "-3"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_TRUE(contains(r.err, "--save-every expects")) << r.err;
}

}  // namespace
}  // namespace kiln::cli
