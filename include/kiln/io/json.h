// The JSON Kiln reads and writes itself: safetensors headers (src/io/safetensors.cpp) and the
// debug dump's index lines (src/capture/debug_dump.cpp, read back by `kiln report`). One strict
// reader and one string writer, so that both formats escape and validate alike.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace kiln::io {

// Appends `s` as a JSON string literal, escaping as serde_json (safetensors' reference writer)
// does: quotes, backslashes and control characters; other bytes (UTF-8) pass through.
void append_json_string(std::string& out, std::string_view s);
std::string json_string(std::string_view s);

// A strict reader of JSON text. Values are read by what the caller expects next (each format's
// schema is fixed), so a value of the wrong type is reported with the field it belongs to. Every
// problem is reported through `raise` as "<source>: <problem>"; it must throw (kiln::Error or a
// subclass of it). Strings are returned as their bytes with escapes decoded; checking that the
// text is valid UTF-8 is the caller's part.
class JsonReader {
 public:
  using Raise = void (*)(const std::string& message);

  // `text_name` names the text in syntax errors ("invalid JSON in <text_name> at byte 3: ...");
  // without `raise`, problems throw kiln::Error.
  JsonReader(std::string_view text, std::string source, std::string text_name,
             Raise raise = nullptr);

  // The next non-whitespace byte, or '\0' at the end of the text.
  char peek();
  bool at_end();

  // What the next value is, for "must be X, got Y" messages; a syntax error if it is no value.
  std::string next_kind();

  // Reads an object, calling on_member(key) with the reader positioned at each member's value
  // (on_member must read it). Duplicate keys are an error; `what` names the object for it.
  template <typename F>
  void read_object(const std::string& what, F&& on_member) {
    expect('{');
    std::set<std::string> seen;
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      if (peek() != '"') syntax_error("expected a string key in " + what);
      std::string key = read_string_literal();
      if (!seen.insert(key).second) fail("duplicate key '" + key + "' in " + what);
      expect(':');
      on_member(key);
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  // Reads an array, calling on_element() with the reader positioned at each element.
  template <typename F>
  void read_array(F&& on_element) {
    expect('[');
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      on_element();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  // A string value; `what` names the field for a type error.
  std::string read_string(const std::string& what);

  // A non-negative integer, at most int64's maximum; `what` names the field.
  int64_t read_size(const std::string& what);

  // A number, true, false or null, returned as written (a number checked against JSON's
  // grammar); `what` names the field.
  std::string read_literal(const std::string& what);

  void expect(char c);

  // "invalid JSON in <text_name> at byte N: <problem>, found <what is there>".
  [[noreturn]] void syntax_error(const std::string& problem);
  // "<source>: <problem>".
  [[noreturn]] void fail(const std::string& problem) const;

 private:
  std::string read_string_literal();  // from the opening quote, decoding escapes
  uint32_t read_hex4();
  void skip_digits();

  std::string_view text_;
  std::string source_;
  std::string text_name_;
  Raise raise_;
  size_t pos_ = 0;
};

}  // namespace kiln::io
