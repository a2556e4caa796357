// The shared JSON reader and string writer (see kiln/io/json.h).
#include "kiln/io/json.h"

#include <limits>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::io {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

// ---- writing ----

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

// ---- reading ----

JsonReader::JsonReader(std::string_view text, std::string source, std::string text_name,
                       Raise raise)
    : text_(text), source_(std::move(source)), text_name_(std::move(text_name)), raise_(raise) {}

char JsonReader::peek() {
  while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

bool JsonReader::at_end() { return peek() == '\0' && pos_ == text_.size(); }

std::string JsonReader::next_kind() {
  switch (peek()) {
    case '{':
      return "an object";
    case '[':
      return "an array";
    case '"':
      return "a string";
    case 't':
    case 'f':
      return "a boolean";
    case 'n':
      return "null";
    default:
      if (peek() == '-' || is_digit(peek())) return "a number";
      syntax_error("expected a value");
  }
}

std::string JsonReader::read_string(const std::string& what) {
  if (peek() != '"') fail(what + " must be a string, got " + next_kind());
  return read_string_literal();
}

int64_t JsonReader::read_size(const std::string& what) {
  constexpr auto kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const char c = peek();
  if (c != '-' && !is_digit(c)) fail(what + " must be a non-negative integer, got " + next_kind());
  const size_t start = pos_;
  const bool negative = c == '-';
  if (negative) ++pos_;
  if (pos_ == text_.size() || !is_digit(text_[pos_])) syntax_error("expected a digit");
  if (text_[pos_] == '0' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1]))
    syntax_error("numbers must not have leading zeros");
  uint64_t value = 0;
  bool overflow = false;
  for (; pos_ < text_.size() && is_digit(text_[pos_]); ++pos_) {
    const auto d = static_cast<uint64_t>(text_[pos_] - '0');
    if (value > (kInt64Max - d) / 10) overflow = true;
    if (!overflow) value = value * 10 + d;
  }
  const bool fraction =
      pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E');
  if (fraction) {
    // Consume the rest of the number so the message can show it.
    while (pos_ < text_.size() &&
           (is_digit(text_[pos_]) ||
            std::string_view(".eE+-").find(text_[pos_]) != std::string_view::npos))
      ++pos_;
  }
  const std::string literal(text_.substr(start, pos_ - start));
  if (fraction) fail(what + " must be an integer, got " + literal);
  if (negative) fail(what + " must not be negative, got " + literal);
  if (overflow) fail(what + " is too large: " + literal);
  return static_cast<int64_t>(value);
}

std::string JsonReader::read_literal(const std::string& what) {
  const char c = peek();
  const size_t start = pos_;
  if (c == 't' || c == 'f' || c == 'n') {
    for (std::string_view word : {"true", "false", "null"})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return std::string(word);
      }
    syntax_error("expected true, false or null");
  }
  if (c != '-' && !is_digit(c))
    fail(what + " must be a number, true, false or null, got " + next_kind());
  // -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
  if (c == '-') ++pos_;
  if (pos_ == text_.size() || !is_digit(text_[pos_])) syntax_error("expected a digit");
  if (text_[pos_] == '0' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1]))
    syntax_error("numbers must not have leading zeros");
  skip_digits();
  if (pos_ < text_.size() && text_[pos_] == '.') {
    ++pos_;
    if (pos_ == text_.size() || !is_digit(text_[pos_])) syntax_error("expected a digit");
    skip_digits();
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (pos_ == text_.size() || !is_digit(text_[pos_])) syntax_error("expected a digit");
    skip_digits();
  }
  return std::string(text_.substr(start, pos_ - start));
}

void JsonReader::expect(char c) {
  if (peek() != c) syntax_error(std::string("expected '") + c + "'");
  ++pos_;
}

void JsonReader::syntax_error(const std::string& problem) {
  // (Built with append: GCC 12 warns falsely (-Wrestrict) on "'" + std::string&&.)
  std::string found = "the end";
  if (pos_ < text_.size()) found = std::string("'").append(text_.substr(pos_, 1)).append("'");
  fail("invalid JSON in " + text_name_ + " at byte " + std::to_string(pos_) + ": " + problem +
       ", found " + found);
}

void JsonReader::fail(const std::string& problem) const {
  const std::string message = source_ + ": " + problem;
  if (raise_) raise_(message);
  throw Error(message);  // no `raise`, or one that returned
}

void JsonReader::skip_digits() {
  while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
}

std::string JsonReader::read_string_literal() {
  expect('"');
  std::string out;
  while (true) {
    if (pos_ >= text_.size()) syntax_error("unterminated string");
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      return out;
    }
    if (static_cast<unsigned char>(c) < 0x20) syntax_error("control character in a string");
    if (c != '\\') {
      out += c;
      ++pos_;
      continue;
    }
    ++pos_;
    if (pos_ >= text_.size()) syntax_error("unterminated string");
    const char e = text_[pos_++];
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = read_hex4();
        if (cp >= 0xDC00 && cp <= 0xDFFF) syntax_error("unpaired low surrogate in \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          // A high surrogate must be followed by an escaped low one: together one code point.
          if (text_.substr(pos_, 2) != "\\u") syntax_error("unpaired high surrogate");
          pos_ += 2;
          const uint32_t low = read_hex4();
          if (low < 0xDC00 || low > 0xDFFF) syntax_error("unpaired high surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        --pos_;
        syntax_error("invalid escape sequence");
    }
  }
}

uint32_t JsonReader::read_hex4() {
  if (text_.size() - pos_ < 4) syntax_error("truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i, ++pos_) {
    const char h = text_[pos_];
    int d;
    if (is_digit(h))
      d = h - '0';
    else if (h >= 'a' && h <= 'f')
      d = h - 'a' + 10;
    else if (h >= 'A' && h <= 'F')
      d = h - 'A' + 10;
    else
      syntax_error("invalid hex digit in \\u escape");
    v = v * 16 + static_cast<uint32_t>(d);
  }
  return v;
}

}  // namespace kiln::io
