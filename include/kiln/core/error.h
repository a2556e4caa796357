// kiln::Error and its subclasses: every invalid call throws one of these, naming the op, the
// shapes/dtypes involved and the caller's source location where known.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace kiln {

// Base of every error Kiln throws: on bad user input, and (saying "internal error") where Kiln
// finds itself in a state it should never reach.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Shapes cannot be broadcast / do not match what the op needs.
class ShapeError : public Error {
  using Error::Error;
};
// A dtype the op does not support, or an unsafe in-place cast.
class DTypeError : public Error {
  using Error::Error;
};
// An index or dimension out of range.
class IndexError : public Error {
  using Error::Error;
};
// An invalid argument value (negative size, bad step, ...).
class ValueError : public Error {
  using Error::Error;
};
// A feature Kiln does not implement (yet); never a silent wrong answer.
class NotImplementedError : public Error {
  using Error::Error;
};

namespace detail {
// Builds a message from streamable pieces; defined in error.cpp-free header form for speed of use.
template <typename... Args>
std::string concat(const Args&... args);
}  // namespace detail

}  // namespace kiln

#include <sstream>

namespace kiln::detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace kiln::detail

// KILN_CHECK(cond, ErrorType, pieces...): throws ErrorType(concat(pieces...)) when cond is false.
// The message is only built on failure.
#define KILN_CHECK(cond, ErrorType, ...)                    \
  do {                                                      \
    if (!(cond)) [[unlikely]] {                             \
      throw ErrorType(::kiln::detail::concat(__VA_ARGS__)); \
    }                                                       \
  } while (0)
