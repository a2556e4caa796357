// ArgParser: values and defaults, every rejection path, file checks, and the usage text of the
// real `kiln` subcommands.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_args.h"
#include "commands.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

ArgParser demo_parser() {
  ArgParser p("demo", "A parser for tests.");
  p.add_int("steps", "N", 10, "steps to run")
      .add_int("seed", "N", 0, "random seed", /*min=*/0)
      .add_float("lr", "F", 0.5, "learning rate", FloatRange::positive())
      .add_float("shift", "F", -1.5, "any number")
      .add_float("dropout", "F", 0.0, "dropout", FloatRange::half_open(0, 1))
      .add_string("name", "TEXT", "anon", "a name")
      .add_path("out", "FILE", "", "where to write", PathRole::kOutput)
      .add_path("in", "FILE", "", "what to read", PathRole::kInput)
      .add_switch("fast", "go fast");
  return p;
}

// The message of the UsageError that parsing `args` throws ("" when none is thrown).
std::string usage_error(const std::vector<std::string>& args, const ArgParser& p = demo_parser()) {
  try {
    p.parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::string file_error(const std::vector<std::string>& args, const ArgParser& p = demo_parser()) {
  try {
    p.parse(args);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

TEST(ArgParser, DefaultsWhenNothingIsGiven) {
  ParsedArgs a = demo_parser().parse({});
  EXPECT_EQ(a.get_int("steps"), 10);
  EXPECT_EQ(a.get_int("seed"), 0);
  EXPECT_DOUBLE_EQ(a.get_float("lr"), 0.5);
  EXPECT_DOUBLE_EQ(a.get_float("shift"), -1.5);
  EXPECT_EQ(a.get_string("name"), "anon");
  EXPECT_EQ(a.get_string("out"), "");
  EXPECT_FALSE(a.get_switch("fast"));
  EXPECT_FALSE(a.was_given("steps"));
  EXPECT_FALSE(a.help_requested());
}

TEST(ArgParser, ReadsBothValueForms) {
  ParsedArgs a = demo_parser().parse({"--steps", "250", "--lr=3e-4", "--shift", "-2",
                                      "--name=", "--fast", "--seed", "0", "--dropout", "0.1"});
  EXPECT_EQ(a.get_int("steps"), 250);
  EXPECT_DOUBLE_EQ(a.get_float("lr"), 3e-4);
  EXPECT_DOUBLE_EQ(a.get_float("shift"), -2.0);  // a negative number is a value, not a flag
  EXPECT_EQ(a.get_string("name"), "");
  EXPECT_TRUE(a.get_switch("fast"));
  EXPECT_EQ(a.get_int("seed"), 0);
  EXPECT_DOUBLE_EQ(a.get_float("dropout"), 0.1);
  EXPECT_TRUE(a.was_given("steps"));
  EXPECT_FALSE(a.was_given("out"));
  // A value that starts with "--" can be passed with '='.
  EXPECT_EQ(demo_parser().parse({"--name=--odd"}).get_string("name"), "--odd");
}

TEST(ArgParser, HelpStopsParsing) {
  EXPECT_TRUE(demo_parser().parse({"--help"}).help_requested());
  EXPECT_TRUE(demo_parser().parse({"--steps", "3", "-h", "--bogus"}).help_requested());
}

TEST(ArgParser, RejectsUnknownFlagsAndStrayWords) {
  EXPECT_EQ(usage_error({"--bogus"}), "unknown option '--bogus' for kiln demo");
  EXPECT_EQ(usage_error({"--bogus=3"}), "unknown option '--bogus' for kiln demo");
  EXPECT_EQ(usage_error({"steps"}), "unexpected argument 'steps' (kiln demo takes only --flags)");
  EXPECT_EQ(usage_error({"-s", "3"}), "unexpected argument '-s' (kiln demo takes only --flags)");
  EXPECT_EQ(usage_error({"--"}), "unexpected argument '--' (kiln demo takes only --flags)");
  EXPECT_EQ(usage_error({"--steps", "3", "4"}),
            "unexpected argument '4' (kiln demo takes only --flags)");
}

TEST(ArgParser, RejectsMissingValues) {
  EXPECT_EQ(usage_error({"--steps"}), "--steps needs a value (N)");
  EXPECT_EQ(usage_error({"--name", "--fast"}), "--name needs a value (TEXT)");
  EXPECT_EQ(usage_error({"--out", "--steps", "5"}), "--out needs a value (FILE)");
}

TEST(ArgParser, RejectsBadIntegers) {
  for (const char* bad :
       {"0", "-3", "abc", "", "3.5", "1e3", "12abc", " 4", "+4", "99999999999999999999"}) {
    EXPECT_EQ(usage_error({"--steps", bad}),
              std::string("--steps expects a positive integer, got '") + bad + "'");
  }
  EXPECT_EQ(usage_error({"--steps=0"}), "--steps expects a positive integer, got '0'");
  EXPECT_EQ(usage_error({"--seed", "-1"}), "--seed expects a non-negative integer, got '-1'");
}

TEST(ArgParser, RejectsBadFloats) {
  EXPECT_EQ(usage_error({"--lr", "0"}), "--lr expects a number > 0, got '0'");
  EXPECT_EQ(usage_error({"--lr", "-1e-3"}), "--lr expects a number > 0, got '-1e-3'");
  EXPECT_EQ(usage_error({"--lr", "fast"}), "--lr expects a number > 0, got 'fast'");
  EXPECT_EQ(usage_error({"--lr", "nan"}), "--lr expects a number > 0, got 'nan'");
  EXPECT_EQ(usage_error({"--lr", "inf"}), "--lr expects a number > 0, got 'inf'");
  EXPECT_EQ(usage_error({"--shift", "1.5x"}), "--shift expects a number, got '1.5x'");
  EXPECT_EQ(usage_error({"--dropout", "1"}), "--dropout expects a number in [0, 1), got '1'");
  EXPECT_EQ(usage_error({"--dropout", "-0.1"}), "--dropout expects a number in [0, 1), got '-0.1'");
}

TEST(ArgParser, RejectsRepeatsAndSwitchValues) {
  EXPECT_EQ(usage_error({"--steps", "1", "--steps", "2"}), "--steps is given more than once");
  EXPECT_EQ(usage_error({"--fast", "--fast"}), "--fast is given more than once");
  EXPECT_EQ(usage_error({"--fast=yes"}), "--fast takes no value");
  EXPECT_EQ(usage_error({"--out="}), "--out expects a file name, got ''");
}

TEST(ArgParser, ChecksFiles) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_cli_args_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string present = (dir / "present.txt").string();
  std::ofstream(present) << "x";

  EXPECT_EQ(demo_parser().parse({"--in", present}).get_string("in"), present);
  EXPECT_EQ(file_error({"--in", (dir / "absent.txt").string()}),
            "--in: no such file '" + (dir / "absent.txt").string() + "'");
  EXPECT_EQ(file_error({"--in", dir.string()}), "--in: '" + dir.string() + "' is not a file");

  // An output file need not exist, but its folder must.
  EXPECT_NO_THROW(demo_parser().parse({"--out", (dir / "new.bin").string()}));
  EXPECT_NO_THROW(demo_parser().parse({"--out", "relative.bin"}));
  EXPECT_NE(file_error({"--out", (dir / "nope" / "new.bin").string()}).find("does not exist"),
            std::string::npos);
  EXPECT_EQ(
      file_error({"--out", dir.string()}),
      "--out: '" + dir.string() +
          "' exists and is a folder, not a regular file; refusing to replace it (name a file)");

  // A malformed line is a usage error even when a file is also missing.
  EXPECT_EQ(usage_error({"--in", "absent.txt", "--steps", "0"}),
            "--steps expects a positive integer, got '0'");
  fs::remove_all(dir);
}

TEST(ArgParser, UsageListsEveryFlagWithDefaults) {
  const std::string u = demo_parser().usage();
  EXPECT_EQ(u.rfind("usage: kiln demo [options]\n\nA parser for tests.\n", 0), 0u) << u;
  EXPECT_NE(u.find("--steps N"), std::string::npos) << u;
  EXPECT_NE(u.find("steps to run (default 10)"), std::string::npos) << u;
  EXPECT_NE(u.find("learning rate (default 0.5)"), std::string::npos) << u;
  EXPECT_NE(u.find("a name (default anon)"), std::string::npos) << u;
  EXPECT_NE(u.find("--fast "), std::string::npos) << u;
  EXPECT_NE(u.find("-h, --help"), std::string::npos) << u;
}

TEST(ArgParser, DeclarationMistakesAreBugs) {
  ArgParser p("x", "y");
  p.add_int("n", "N", 1, "n");
  EXPECT_THROW(p.add_int("n", "N", 1, "again"), std::logic_error);
  EXPECT_THROW(p.add_switch("help", "reserved"), std::logic_error);
  EXPECT_THROW(p.parse({}).get_int("undeclared"), std::logic_error);
}

// ---- the real subcommands -----------------------------------------------------------------

void expect_flags_in_usage(const ArgParser& p, const std::vector<std::string>& flags) {
  const std::string u = p.usage();
  for (const std::string& f : flags) {
    EXPECT_NE(u.find("  --" + f + " "), std::string::npos) << "--" << f << " missing from\n" << u;
  }
}

TEST(ArgParser, PositionalAndShortOptions) {
  ArgParser p("demo", "A parser with a positional.");
  p.add_positional("run", "RUN_DIR", "a folder")
      .add_string("out", "FILE", "x.html", "where")
      .add_switch("fast", "go fast")
      .add_short('o', "out")
      .add_short('f', "fast");
  ParsedArgs a = p.parse({"-o", "page.html", "runs/r1", "-f"});
  EXPECT_EQ(a.get_string("run"), "runs/r1");
  EXPECT_EQ(a.get_string("out"), "page.html");
  EXPECT_TRUE(a.get_switch("fast"));
  EXPECT_TRUE(a.was_given("out"));
  EXPECT_EQ(p.parse({"r2", "--out=y"}).get_string("out"), "y");
  EXPECT_EQ(usage_error({}, p), "missing RUN_DIR (a folder)");
  EXPECT_EQ(usage_error({"r1", "r2"}, p),
            "unexpected argument 'r2' (kiln demo takes one RUN_DIR and --flags)");
  EXPECT_EQ(usage_error({"r1", "-x"}, p),
            "unexpected argument '-x' (kiln demo takes one RUN_DIR and --flags)");
  EXPECT_EQ(usage_error({"r1", "-o"}, p), "--out needs a value (FILE)");
  EXPECT_EQ(usage_error({"r1", "-o", "a", "--out", "b"}, p), "--out is given more than once");
  const std::string usage = p.usage();
  EXPECT_NE(usage.find("usage: kiln demo RUN_DIR [options]"), std::string::npos) << usage;
  EXPECT_NE(usage.find("-o, --out FILE"), std::string::npos) << usage;
  EXPECT_NE(usage.find("-f, --fast"), std::string::npos) << usage;
  EXPECT_THROW(p.add_short('x', "nope"), std::logic_error);  // no such flag
  EXPECT_THROW(p.add_short('o', "fast"), std::logic_error);  // -o is taken
  EXPECT_THROW(p.add_short('h', "fast"), std::logic_error);  // -h is help
  EXPECT_THROW(p.add_positional("second", "X", "again"), std::logic_error);
}

TEST(Commands, TrainUsageHasEveryFlag) {
  expect_flags_in_usage(train_parser(), {"data", "steps", "batch", "block", "layers", "heads",
                                         "embd", "lr", "warmup", "eval-every", "eval-batches",
                                         "seed", "out", "resume", "threads", "dropout", "eager"});
}

TEST(Commands, SampleUsageHasEveryFlag) {
  expect_flags_in_usage(sample_parser(), {"checkpoint", "prompt", "tokens", "temperature", "seed"});
}

TEST(Commands, BenchUsageHasEveryFlag) {
  expect_flags_in_usage(bench_parser(), {"threads", "runs", "only", "out"});
  ParsedArgs a = bench_parser().parse({});
  EXPECT_EQ(a.get_int("threads"), 2);
  EXPECT_EQ(a.get_int("runs"), 15);
}

TEST(Commands, TrainOptionsAreReadAndCrossChecked) {
  TrainOptions o = TrainOptions::from_args(
      train_parser().parse({"--steps", "5", "--batch",   "2",   "--block", "8",    "--layers", "1",
                            "--heads", "2", "--embd",    "16",  "--lr",    "0.01", "--warmup", "0",
                            "--seed",  "0", "--dropout", "0.2", "--eager"}));
  EXPECT_EQ(o.steps, 5);
  EXPECT_EQ(o.batch, 2);
  EXPECT_EQ(o.block, 8);
  EXPECT_EQ(o.layers, 1);
  EXPECT_EQ(o.heads, 2);
  EXPECT_EQ(o.embd, 16);
  EXPECT_DOUBLE_EQ(o.lr, 0.01);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.seed, 0u);
  EXPECT_DOUBLE_EQ(o.dropout, 0.2);
  EXPECT_TRUE(o.eager);
  EXPECT_EQ(o.out, "kiln-gpt.safetensors");
  EXPECT_EQ(o.resume, "");

  try {
    TrainOptions::from_args(train_parser().parse({"--embd", "30", "--heads", "4"}));
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--embd 30 is not a multiple of --heads 4");
  }
}

TEST(Commands, SampleOptionsAreRead) {
  const fs::path ckpt = fs::temp_directory_path() /
                        ("kiln_cli_args_test_" + std::to_string(::getpid()) + ".safetensors");
  std::ofstream(ckpt) << "x";
  SampleOptions o = SampleOptions::from_args(
      sample_parser().parse({"--checkpoint", ckpt.string(), "--prompt", "It is", "--tokens", "20",
                             "--temperature", "0.5", "--seed", "3"}));
  EXPECT_EQ(o.checkpoint, ckpt.string());
  EXPECT_EQ(o.prompt, "It is");
  EXPECT_EQ(o.tokens, 20);
  EXPECT_DOUBLE_EQ(o.temperature, 0.5);
  EXPECT_EQ(o.seed, 3u);
  fs::remove(ckpt);
}

}  // namespace
}  // namespace kiln::cli
