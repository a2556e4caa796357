// Ctrl-C during Kiln's long waits: the C++ compiler building a graph's code (and its
// precompiled header) can take seconds, and a user who presses Ctrl-C then must not wait for
// it. Such waits ask the installed check about every 50 ms; a check that throws abandons the
// wait (the compiler's processes are killed) and its exception propagates to the caller.
//
// The Python package installs a check that runs Python's signal handlers, so Ctrl-C raises
// KeyboardInterrupt out of a compiling call. A C++ program may install its own, for example
// one that throws when its SIGINT handler has set a flag. Kernels do not ask: one op runs to
// its end, as in PyTorch.
#pragma once

#include "kiln/core/error.h"

namespace kiln {

// What a wait throws while the exception of an interrupted wait is still unwinding (the
// unwinding must not start the abandoned work again, as a compiled function's clean-up would).
class InterruptedError : public Error {
  using Error::Error;
};

// The check long waits run (null: none, the default). It is called on the waiting thread,
// from any thread that compiles; it returns normally to let the wait go on.
using InterruptCheck = void (*)();
void set_interrupt_check(InterruptCheck check);

namespace detail {
// Runs the installed check (long waits call it). `during` names the wait for InterruptedError.
void poll_interrupt(const char* during);
}  // namespace detail

}  // namespace kiln
