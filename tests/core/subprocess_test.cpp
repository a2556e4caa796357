// Running programs without a shell (src/core/subprocess.h): arguments reach the program as
// they are, a time limit kills the whole process group, failures say what happened.
#include "core/subprocess.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

namespace kiln::detail {
namespace {

TEST(Subprocess, ArgumentsAreNeverReadByAShell) {
  const std::string odd = "$(touch kiln-subprocess-X); `touch kiln-subprocess-Y`; 'a' \"b\" | c";
  const ProcessResult r = run_process({"printf", "%s\n", odd});
  ASSERT_TRUE(r.succeeded()) << r.describe(0) << r.output;
  EXPECT_EQ(r.output, odd + "\n");
  EXPECT_FALSE(std::filesystem::exists("kiln-subprocess-X"));
  EXPECT_FALSE(std::filesystem::exists("kiln-subprocess-Y"));
}

TEST(Subprocess, OutputAndStatusAreReported) {
  ProcessResult r = run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_TRUE(r.started);
  EXPECT_FALSE(r.succeeded());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, "out\nerr\n");
  EXPECT_EQ(r.describe(0), "exited with status 3");
  r = run_process({"sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.signal, 9);
  EXPECT_NE(r.describe(0).find("killed by signal 9"), std::string::npos);
  r = run_process({"no-such-program-kiln-test"});
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.describe(0).find("not an executable file on PATH"), std::string::npos);
  EXPECT_EQ(find_executable("no-such-program-kiln-test"), "");
  EXPECT_NE(find_executable("sh"), "");
}

TEST(Subprocess, ATimeLimitKillsTheWholeProcessGroup) {
  // The program waits on a child that holds the output open, as a compiler driver does.
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult r = run_process({"sh", "-c", "sleep 30 & wait"}, 0.5);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.succeeded());
  EXPECT_LT(seconds, 10);
  EXPECT_NE(r.describe(0.5).find("did not finish within 0.5 s"), std::string::npos);
  // Several at once: each finishes or is stopped on its own.
  const std::vector<ProcessResult> both =
      run_processes({{"sh", "-c", "echo quick"}, {"sleep", "30"}}, 0.5);
  EXPECT_TRUE(both[0].succeeded());
  EXPECT_EQ(both[0].output, "quick\n");
  EXPECT_TRUE(both[1].timed_out);
}

}  // namespace
}  // namespace kiln::detail
