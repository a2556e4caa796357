// Ctrl-C during long waits (kiln/core/interrupt.h).
#include "kiln/core/interrupt.h"

#include <atomic>
#include <exception>

namespace kiln {

namespace {
std::atomic<InterruptCheck> installed_check{nullptr};
// Set on a thread whose wait was interrupted, until a wait finds no exception unwinding.
thread_local bool interrupted = false;
}  // namespace

void set_interrupt_check(InterruptCheck check) { installed_check.store(check); }

namespace detail {
void poll_interrupt(const char* during) {
  if (interrupted) {
    if (std::uncaught_exceptions() > 0)
      throw InterruptedError(
          detail::concat("interrupted (", during, " while an interrupted call was unwinding)"));
    interrupted = false;  // that exception has been handled: a new wait
  }
  const InterruptCheck check = installed_check.load(std::memory_order_relaxed);
  if (!check) return;
  try {
    check();
  } catch (...) {
    interrupted = true;
    throw;
  }
}
}  // namespace detail

}  // namespace kiln
