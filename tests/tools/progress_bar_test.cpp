// ProgressBar: the formatted line, rate and time-left estimates from an injected clock, redraw
// throttling on a terminal, and plain lines when not on a terminal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "progress_bar.h"

namespace kiln::cli {
namespace {

// A clock the test moves by hand.
struct FakeClock {
  double now = 1000.0;
  ProgressBar::Clock fn() {
    return [this] { return now; };
  }
};

ProgressBar::Options options(FakeClock& clock, bool terminal, int width = 10) {
  ProgressBar::Options o;
  o.terminal = terminal;
  o.width = width;
  o.clock = clock.fn();
  return o;
}

size_t count(const std::string& s, char c) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), c));
}

TEST(ProgressBar, FormatsTheLine) {
  FakeClock clock;
  std::ostringstream out;
  // 600 steps of 16 tokens; after 120 steps in 10 s: 192 tok/s, 480 steps left at 12/s = 40 s.
  ProgressBar bar(600, 16, out, options(clock, false));
  clock.now += 10;
  EXPECT_EQ(bar.render(120, 2.1344),
            "[##........] step 120/600 | loss 2.134 | 192 tok/s | 00:40 left");
  // Before anything is measured there is no estimate.
  FakeClock fresh;
  ProgressBar unstarted(600, 16, out, options(fresh, false));
  EXPECT_EQ(unstarted.render(0, 4.5),
            "[..........] step 0/600 | loss 4.500 | -- tok/s | --:-- left");
  // The last step shows the total time instead of time left.
  clock.now += 40;
  EXPECT_EQ(bar.render(600, 1.5),
            "[##########] step 600/600 | loss 1.500 | 192 tok/s | 00:50 total");
  EXPECT_NE(bar.render(300, std::nan("")).find("loss nan"), std::string::npos);
}

TEST(ProgressBar, FormatsRatesAndDurations) {
  EXPECT_EQ(ProgressBar::format_rate(0), "0");
  EXPECT_EQ(ProgressBar::format_rate(999.4), "999");
  EXPECT_EQ(ProgressBar::format_rate(1900), "1.9k");
  EXPECT_EQ(ProgressBar::format_rate(12345), "12k");
  EXPECT_EQ(ProgressBar::format_rate(2.5e6), "2.5M");
  EXPECT_EQ(ProgressBar::format_rate(std::nan("")), "--");
  EXPECT_EQ(ProgressBar::format_duration(0), "00:00");
  EXPECT_EQ(ProgressBar::format_duration(41.4), "00:41");
  EXPECT_EQ(ProgressBar::format_duration(3599), "59:59");
  EXPECT_EQ(ProgressBar::format_duration(3723), "1:02:03");
  EXPECT_EQ(ProgressBar::format_duration(-1), "--:--");
  EXPECT_EQ(ProgressBar::format_duration(INFINITY), "--:--");
}

TEST(ProgressBar, PlainModePrintsEveryNStepsWithoutCarriageReturns) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar::Options o = options(clock, false);
  o.plain_every = 25;
  ProgressBar bar(100, 8, out, o);
  for (int64_t step = 1; step <= 100; ++step) {
    clock.now += 0.5;
    bar.update(step, 3.0 - step * 0.01);
  }
  bar.finish();
  const std::string s = out.str();
  EXPECT_EQ(count(s, '\r'), 0u) << s;
  EXPECT_EQ(count(s, '\n'), 4u) << s;  // steps 25, 50, 75, 100
  EXPECT_NE(s.find("step 25/100 | loss 2.750 | 16 tok/s | 00:38 left\n"), std::string::npos) << s;
  EXPECT_NE(s.find("step 100/100 | loss 2.000 | 16 tok/s | 00:50 total\n"), std::string::npos) << s;
}

TEST(ProgressBar, PlainModeDefaultsToAboutTwentyLinesAndAlwaysShowsTheEnd) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(1000, 1, out, options(clock, false));
  for (int64_t step = 1; step <= 1000; ++step) bar.update(step, 1.0);
  EXPECT_EQ(count(out.str(), '\n'), 20u);

  // Skipping over a multiple still prints, and the last step prints even off the grid.
  std::ostringstream out2;
  ProgressBar::Options o = options(clock, false);
  o.plain_every = 10;
  ProgressBar odd(33, 1, out2, o);
  for (int64_t step : {3, 7, 12, 19, 33}) odd.update(step, 1.0);
  EXPECT_EQ(count(out2.str(), '\n'), 2u) << out2.str();  // 12 (crossed 10) and 33 (last)
}

TEST(ProgressBar, TerminalModeRedrawsInPlaceAtMostTenTimesASecond) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(1000, 4, out, options(clock, true));
  // 1000 steps of 1 ms: one second in all, so about 10 redraws plus the final one.
  for (int64_t step = 1; step <= 1000; ++step) {
    clock.now += 0.001;
    bar.update(step, 1.0);
  }
  const std::string before_finish = out.str();
  EXPECT_EQ(count(before_finish, '\n'), 0u);
  const size_t redraws = count(before_finish, '\r');
  EXPECT_GE(redraws, 10u);
  EXPECT_LE(redraws, 12u);
  EXPECT_NE(before_finish.rfind("\r[##########] step 1000/1000"), std::string::npos);
  bar.finish();
  bar.finish();  // idempotent
  EXPECT_EQ(out.str(), before_finish + "\n");
}

TEST(ProgressBar, TerminalModeBlanksLeftoversOfALongerLine) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(100, 1, out, options(clock, true));
  clock.now += 1;
  bar.update(1, 12345.678);  // a long loss
  clock.now += 1;
  bar.update(2, 1.0);  // a shorter line follows
  const std::string s = out.str();
  const std::string first = s.substr(1, s.find('\r', 1) - 1);
  const std::string second = s.substr(s.find('\r', 1) + 1);
  EXPECT_EQ(second.size(), first.size());  // padded with spaces
  EXPECT_EQ(second.back(), ' ');
}

TEST(ProgressBar, MessagesPrintAboveTheBar) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar(10, 1, out, options(clock, true));
  clock.now += 1;
  bar.update(5, 2.0);
  bar.message("step 5: val loss 2.100");
  const std::string s = out.str();
  // The bar is blanked, the message printed on its own line, then the bar redrawn.
  const size_t msg = s.find("\rstep 5: val loss 2.100\n");
  ASSERT_NE(msg, std::string::npos) << s;
  EXPECT_NE(s.find("\r[#####.....] step 5/10", msg), std::string::npos) << s;

  std::ostringstream plain;
  ProgressBar pbar(10, 1, plain, options(clock, false));
  pbar.message("hello");
  EXPECT_EQ(plain.str(), "hello\n");
}

TEST(ProgressBar, DestructorEndsTheLine) {
  FakeClock clock;
  std::ostringstream out;
  {
    ProgressBar bar(10, 1, out, options(clock, true));
    bar.update(3, 1.0);
  }
  EXPECT_EQ(out.str().back(), '\n');
  EXPECT_THROW(ProgressBar(0, 1, out, options(clock, true)), std::invalid_argument);
}

}  // namespace
}  // namespace kiln::cli
