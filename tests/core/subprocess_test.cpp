// Running programs without a shell (src/core/subprocess.h): arguments reach the program as
// they are, a time limit kills the whole process group, failures say what happened.
#include "core/subprocess.h"

#include "kiln/core/interrupt.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

// Ctrl-C while waiting (kiln/core/interrupt.h): the installed check throws, the wait ends at
// once with the check's exception, and the program's whole process group is gone. A wait
// started while that exception unwinds throws InterruptedError before starting anything; once
// it has been handled, waits run again.
struct Interrupt {};
std::atomic<bool> interrupt_now{false};
void throw_when_asked() {
  if (interrupt_now.exchange(false)) throw Interrupt{};
}

TEST(Subprocess, AnInterruptCheckAbandonsTheWaitAndKillsTheProgram) {
  const std::string pid_file =
      (std::filesystem::temp_directory_path() / ("kiln-interrupt-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove(pid_file);
  set_interrupt_check(&throw_when_asked);
  std::thread ctrl_c([&] {
    for (int i = 0; i < 400 && !std::filesystem::exists(pid_file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    interrupt_now = true;
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(run_process({"sh", "-c", "echo $$ > " + pid_file + "; sleep 30 & wait"}), Interrupt);
  ctrl_c.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10);
  pid_t group = 0;
  std::ifstream(pid_file) >> group;
  std::filesystem::remove(pid_file);
  ASSERT_GT(group, 0);
  // The shell and its sleep: no process of the group is left (once init has reaped the sleep).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = kill(-group, 0) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone);
  // While the interrupt unwinds (a destructor cleaning up), a new wait refuses to start.
  struct CleanUp {
    bool refused = false;
    ~CleanUp() {
      try {
        run_process({"sleep", "30"});
      } catch (const InterruptedError&) {
        refused = true;
      }
      EXPECT_TRUE(refused);
    }
  };
  interrupt_now = true;
  try {
    CleanUp clean_up;
    run_process({"sleep", "30"});
  } catch (const Interrupt&) {
  }
  // Handled: the next wait runs to its end.
  EXPECT_TRUE(run_process({"sh", "-c", "exit 0"}).succeeded());
  set_interrupt_check(nullptr);
}

}  // namespace
}  // namespace kiln::detail
