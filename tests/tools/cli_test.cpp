// run_cli: command dispatch, help, and the exit status and message of each kind of failure.
// (tests/CMakeLists.txt also runs the built binary on bad arguments.)
#include <gtest/gtest.h>
#include <filesystem>

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "kiln/ops/linalg.h"
#include "tools/test_utils.h"

namespace kiln::cli {
namespace {

using testing::contains;
using testing::Result;
using testing::run;

TEST(Cli, HelpAndVersion) {
  Result r = run({"help"});
  EXPECT_EQ(r.status, kExitOk);
  for (const char* cmd : {"train", "sample", "bench", "fuzz", "report", "prepare", "version"}) {
    EXPECT_TRUE(contains(r.out, std::string("  ") + cmd + " ")) << cmd << " missing:\n" << r.out;
  }
  EXPECT_EQ(run({"--help"}).status, kExitOk);
  r = run({"version"});
  EXPECT_EQ(r.out.substr(0, r.out.find('\n') + 1), "kiln 0.1.0\n");
  EXPECT_TRUE(contains(r.out, "\nBLAS: " + kiln::blas_config() + "\n")) << r.out;

  r = run({"train", "--help"});
  EXPECT_EQ(r.status, kExitOk);
  EXPECT_TRUE(contains(r.out, "usage: kiln train [options]")) << r.out;
  EXPECT_TRUE(contains(r.out, "--eval-batches N")) << r.out;
  EXPECT_EQ(run({"help", "sample"}).out, run({"sample", "-h"}).out);
  EXPECT_EQ(run({"help", "nope"}).status, kExitUsage);
}

TEST(Cli, UsageErrorsExitTwoAndShowTheCommandsUsage) {
  Result r = run({});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_TRUE(contains(r.err, "usage: kiln <command>"));

  r = run({"frobnicate"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_TRUE(contains(r.err, "unknown command 'frobnicate'")) << r.err;

  r = run({"train", "--steps", "0"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_EQ(r.err.rfind("kiln train: --steps expects a positive integer, got '0'\n\n", 0), 0u)
      << r.err;
  EXPECT_TRUE(contains(r.err, "usage: kiln train [options]")) << r.err;
  EXPECT_TRUE(r.out.empty());

  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"train", "--bogus"},
           {"train", "--block"},
           {"train", "--lr", "-1"},
           {"train", "--dropout", "1"},
           {"train", "--heads", "3"},  // 128 is not a multiple of 3
           {"train", "data.txt"},
           {"sample", "--temperature", "0"},
           {"sample", "--tokens", "many"},
           {"bench", "--threads", "0"},
           {"bench", "--only", "W1,W99"},
           {"bench", "--pair", "W6s"},
           {"bench", "--pair", "W6s,W99"},
           {"bench", "--pair", "W6s,W6", "--only", "W6"},
       }) {
    r = run(bad);
    EXPECT_EQ(r.status, kExitUsage) << bad[0] << " " << bad[1] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "usage: kiln " + bad[0])) << r.err;
  }
}

TEST(Cli, BenchPairTimesTwoWorkloadsAlternately) {
  Result r = run({"bench", "--pair", "W6s,W6", "--runs", "3"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(contains(r.out,
                       "3 alternating runs (reproduce: kiln bench --threads 2 --runs 3 "
                       "--pair W6s,W6)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "| W6s | ")) << r.out;
  EXPECT_TRUE(contains(r.out, "| W6 | ")) << r.out;
  // 100 ops against one: the ratio is far above 1 whatever the machine does.
  const size_t at = r.out.find("W6 / W6s time, run by run: median ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double ratio = std::stod(r.out.substr(at + 34));
  EXPECT_GT(ratio, 5.0) << r.out;
}

TEST(Cli, MissingFilesExitOneWithoutUsage) {
  Result r = run({"train", "--data", "no/such/file.txt"});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_EQ(r.err, "kiln train: error: --data: no such file 'no/such/file.txt'\n");

  r = run({"train", "--resume", "no/such.safetensors"});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_TRUE(contains(r.err, "--resume: no such file")) << r.err;

  r = run({"train", "--out", "no/such/folder/model.safetensors"});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_TRUE(contains(r.err, "--out: folder 'no/such/folder' does not exist")) << r.err;

  r = run({"sample", "--checkpoint", "no/such.safetensors"});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_TRUE(contains(r.err, "--checkpoint: no such file")) << r.err;
}

TEST(Cli, TrainReportsTheDataAndTheBaseline) {
  // The default --data is the shipped corpus, found through the source tree from any folder.
  const std::string out = (std::filesystem::temp_directory_path() / "kiln_cli_test.safetensors");
  Result r =
      run({"train", "--steps", "2", "--batch", "2", "--block", "8", "--layers", "1", "--embd", "8",
           "--heads", "2", "--eval-every", "2", "--eval-batches", "1", "--out", out});
  EXPECT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(contains(r.err, "684768 characters, 75 distinct")) << r.err;
  EXPECT_TRUE(contains(r.err, "unigram-entropy baseline")) << r.err;
  std::filesystem::remove(out);

  // A context longer than the validation split is a data error, reported before any work.
  r = run({"train", "--block", "100000"});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_TRUE(contains(r.err, "too short for block size 100000")) << r.err;
}

}  // namespace
}  // namespace kiln::cli
