// A progress display for training loops:
//
//   [#########.....................] step 120/600 | loss 2.134 | 1.9k tok/s | 00:41 left
//
// On a terminal the line is redrawn in place ('\r'), at most every `min_redraw_seconds`. When
// the output is not a terminal (CI logs, pipes) it prints the same text as a plain line every
// `plain_every` steps instead, so logs stay readable. The clock is injectable for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace kiln::cli {

// True when the file descriptor is a terminal (isatty).
bool is_terminal(int fd);

class ProgressBar {
 public:
  // Seconds on a monotonic clock; only differences are used.
  using Clock = std::function<double()>;
  static double steady_seconds();

  struct Options {
    bool terminal = false;            // redraw in place (true) or print plain lines (false)
    int width = 30;                   // characters between the brackets
    double min_redraw_seconds = 0.1;  // terminal mode: at most ~10 redraws a second
    int64_t plain_every = 0;          // plain mode: a line every N steps; 0 = about 20 lines
    Clock clock = steady_seconds;
  };

  // `total_steps` > 0; `tokens_per_step` (batch x context) feeds the tok/s figure. The clock
  // starts now.
  ProgressBar(int64_t total_steps, int64_t tokens_per_step, std::ostream& out, Options options);
  // Finishes the line on a terminal if finish() was not called.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Reports that `step` steps (1-based count of finished steps) are done with this loss. Draws
  // when due: always for the last step.
  void update(int64_t step, double loss);
  // Prints a whole line (e.g. an evaluation result) above the bar without garbling it.
  void message(std::string_view line);
  // Ends the display (a final newline on a terminal). Idempotent.
  void finish();

  // The text of the display for `step` and `loss` at the clock's current time, without '\r'.
  std::string render(int64_t step, double loss) const;

  // Pieces of the line, exposed for tests: "1.9k", "00:41" / "1:02:03".
  static std::string format_rate(double tokens_per_second);
  static std::string format_duration(double seconds);

 private:
  void draw(const std::string& text);

  int64_t total_;
  int64_t tokens_per_step_;
  std::ostream& out_;
  Options opt_;
  double start_;
  double last_draw_ = -1.0;  // clock time of the last terminal redraw; < 0 before the first
  size_t last_len_ = 0;      // length of the line on screen, to blank what a shorter one leaves
  int64_t last_step_ = 0;
  double last_loss_ = 0.0;
  bool on_screen_ = false;  // terminal mode: a bar line is showing, not yet ended by '\n'
  bool finished_ = false;
};

}  // namespace kiln::cli
