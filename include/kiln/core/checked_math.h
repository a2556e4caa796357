// Overflow-checked int64 arithmetic for sizes, strides, element counts, byte counts and view
// bounds. Every such computation in Kiln goes through these two primitives (or checked_numel,
// contiguous_strides and make_tensor, which use them), so a size never wraps around silently
// and a wrapped, negative size is never reported.
#pragma once

#include <cstdint>

namespace kiln {

// *out = a * b (a + b); true when the exact result does not fit in int64 (*out unspecified).
[[nodiscard]] inline bool mul_overflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
[[nodiscard]] inline bool add_overflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

namespace detail {
[[noreturn, gnu::cold, gnu::noinline]] void throw_int64_overflow(const char* op, const char* what,
                                                                 int64_t a, char sym, int64_t b);
}  // namespace detail

// a * b, or ValueError "op: <what> overflows int64 (a * b)".
inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r;
  if (mul_overflows(a, b, &r)) [[unlikely]]
    detail::throw_int64_overflow(op, what, a, '*', b);
  return r;
}
// a + b, or ValueError "op: <what> overflows int64 (a + b)".
inline int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what) {
  int64_t r;
  if (add_overflows(a, b, &r)) [[unlikely]]
    detail::throw_int64_overflow(op, what, a, '+', b);
  return r;
}

}  // namespace kiln
