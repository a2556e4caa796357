// ProgressBar: formatting, rate and time-left estimates, terminal vs plain-line output.
#include "progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <stdexcept>

namespace kiln::cli {

bool is_terminal(int fd) { return ::isatty(fd) == 1; }

double ProgressBar::steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProgressBar::ProgressBar(int64_t total_steps, int64_t tokens_per_step, std::ostream& out,
                         Options options)
    : total_(total_steps), tokens_per_step_(tokens_per_step), out_(out), opt_(std::move(options)) {
  if (total_ <= 0) throw std::invalid_argument("ProgressBar: total_steps must be positive");
  if (!opt_.clock) opt_.clock = steady_seconds;
  opt_.width = std::max(opt_.width, 1);
  if (opt_.plain_every <= 0) opt_.plain_every = std::max<int64_t>(1, total_ / 20);
  start_ = opt_.clock();
}

ProgressBar::~ProgressBar() {
  // A destructor must not throw; a failing stream here has nothing left to report to.
  try {
    finish();
  } catch (...) {
  }
}

std::string ProgressBar::format_rate(double tokens_per_second) {
  if (!std::isfinite(tokens_per_second) || tokens_per_second < 0) return "--";
  char buf[32];
  if (tokens_per_second < 1e3) {
    std::snprintf(buf, sizeof buf, "%.0f", tokens_per_second);
  } else if (tokens_per_second < 1e6) {
    double k = tokens_per_second / 1e3;
    std::snprintf(buf, sizeof buf, k < 9.95 ? "%.1fk" : "%.0fk", k);
  } else {
    double m = tokens_per_second / 1e6;
    std::snprintf(buf, sizeof buf, m < 9.95 ? "%.1fM" : "%.0fM", m);
  }
  return buf;
}

std::string ProgressBar::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

std::string ProgressBar::render(int64_t step, double loss) const {
  step = std::clamp<int64_t>(step, 0, total_);
  const double elapsed = opt_.clock() - start_;
  // No estimate until something has been measured.
  const bool measured = step > 0 && elapsed > 0;
  const double rate =
      measured ? static_cast<double>(step * tokens_per_step_) / elapsed : std::nan("");
  const double left = measured ? static_cast<double>(total_ - step) * elapsed / step : std::nan("");

  const auto filled = static_cast<int>(
      std::llround(static_cast<double>(opt_.width) * static_cast<double>(step) / total_));
  std::ostringstream os;
  os << "[" << std::string(filled, '#') << std::string(opt_.width - filled, '.') << "] step "
     << step << "/" << total_ << " | loss ";
  char loss_text[32];
  std::snprintf(loss_text, sizeof loss_text, "%.3f", loss);
  os << loss_text << " | " << format_rate(rate) << " tok/s | "
     << (step == total_ ? format_duration(elapsed) + " total" : format_duration(left) + " left");
  return os.str();
}

void ProgressBar::draw(const std::string& text) {
  if (opt_.terminal) {
    // Pad with spaces so a shorter line fully covers the previous one.
    std::string pad(last_len_ > text.size() ? last_len_ - text.size() : 0, ' ');
    out_ << '\r' << text << pad << std::flush;
    last_len_ = text.size();
    on_screen_ = true;
  } else {
    out_ << text << '\n' << std::flush;
  }
}

void ProgressBar::update(int64_t step, double loss) {
  if (finished_) return;
  const int64_t previous = last_step_;
  last_step_ = step;
  last_loss_ = loss;
  const bool last = step >= total_;
  if (opt_.terminal) {
    const double now = opt_.clock();
    if (last || last_draw_ < 0 || now - last_draw_ >= opt_.min_redraw_seconds) {
      last_draw_ = now;
      draw(render(step, loss));
    }
  } else if (last || step / opt_.plain_every > previous / opt_.plain_every) {
    // A line each time the step count crosses a multiple of plain_every.
    draw(render(step, loss));
  }
}

void ProgressBar::message(std::string_view line) {
  if (opt_.terminal && on_screen_) {
    // Blank the bar, print the message on its own line, then put the bar back under it.
    out_ << '\r' << std::string(last_len_, ' ') << '\r' << line << '\n';
    last_len_ = 0;
    draw(render(last_step_, last_loss_));
  } else {
    out_ << line << '\n' << std::flush;
  }
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (opt_.terminal && on_screen_) out_ << '\n' << std::flush;
  on_screen_ = false;
}

}  // namespace kiln::cli
