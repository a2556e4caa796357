// A small, strict parser for the options of one `kiln` subcommand. A command declares each
// flag once (name, type, default, help); the same declaration parses the command line, checks
// every value and writes the usage text, so the two can never disagree.
//
//   ArgParser p("train", "train a character-level GPT");
//   p.add_int("steps", "N", 600, "optimiser steps");
//   p.add_switch("eager", "do not compile");
//   ParsedArgs a = p.parse(args);           // throws UsageError naming the bad flag
//   int64_t steps = a.get_int("steps");
//
// Values are written `--flag VALUE` or `--flag=VALUE`. A token that starts with `--` is never
// taken as a value (so `--out --steps 5` is "--out needs a value", not a file named "--steps");
// write `--prompt=--odd` for such a value.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::cli {

// The command line is wrong (unknown flag, missing or malformed value). The `kiln` program
// prints the message and the command's usage and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file named on the command line cannot be used (missing, not a regular file, unreadable, or
// in a folder that does not exist). Not a usage mistake: `kiln` prints it and exits with 1.
class FileError : public kiln::Error {
 public:
  using kiln::Error::Error;
};

// Allowed range of a float flag; the message for a value outside it says which bound failed.
struct FloatRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_inclusive = true;
  bool max_inclusive = true;

  static FloatRange any() { return {}; }
  static FloatRange positive() { return {0.0, FloatRange{}.max, false, true}; }
  // [lo, hi)
  static FloatRange half_open(double lo, double hi) { return {lo, hi, true, false}; }

  bool contains(double v) const;
  std::string describe() const;  // e.g. "a number > 0", "a number in [0, 1)"
};

// What a path flag names, and so what is checked once the command line has been read.
enum class PathRole {
  kInput,   // must be an existing, readable regular file (when not empty)
  kOutput,  // its folder must exist (when not empty); the file itself is written later
};

// The values of one parsed command line, by flag name (without the leading dashes).
class ParsedArgs {
 public:
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;  // string and path flags
  bool get_switch(const std::string& name) const;
  // True when the flag was on the command line (not just defaulted).
  bool was_given(const std::string& name) const;
  // `--help` / `-h` was given: the caller prints the usage and exits 0; nothing else is checked.
  bool help_requested() const { return help_; }
  // The words after `--` (ArgParser::add_rest).
  const std::vector<std::string>& rest() const { return rest_; }

 private:
  friend class ArgParser;
  using Value = std::variant<int64_t, double, std::string, bool>;
  const Value& lookup(const std::string& name) const;

  std::map<std::string, Value> values_;
  std::map<std::string, bool> given_;
  std::vector<std::string> rest_;
  bool help_ = false;
};

class ArgParser {
 public:
  // `command` is the subcommand's name (for messages and usage), `summary` one line on what it
  // does.
  ArgParser(std::string command, std::string summary);

  // An integer >= `min` (1 unless given: sizes and counts must be positive).
  ArgParser& add_int(const std::string& name, const std::string& metavar, int64_t default_value,
                     const std::string& help, int64_t min = 1);
  // A finite floating-point number inside `range`.
  ArgParser& add_float(const std::string& name, const std::string& metavar, double default_value,
                       const std::string& help, FloatRange range = FloatRange::any());
  // Free text (may be empty).
  ArgParser& add_string(const std::string& name, const std::string& metavar,
                        const std::string& default_value, const std::string& help);
  // A file path; an empty default means "none" and is not checked.
  ArgParser& add_path(const std::string& name, const std::string& metavar,
                      const std::string& default_value, const std::string& help, PathRole role);
  // A switch: false unless given; takes no value.
  ArgParser& add_switch(const std::string& name, const std::string& help);
  // A required word that is not a flag, read with get_string(name): `kiln report RUN_DIR`.
  // At most one per command.
  ArgParser& add_positional(const std::string& name, const std::string& metavar,
                            const std::string& help);
  // `-x` as another spelling of `--name` (e.g. -o for --out).
  ArgParser& add_short(char letter, const std::string& name);
  // The words after a `--` are handed over unread (`kiln launch ... -- PROGRAM ARGS`); read
  // them with ParsedArgs::rest(). Without this, `--` is an unexpected argument.
  ArgParser& add_rest(const std::string& metavar, const std::string& help);

  // Parses `args` (the words after the subcommand). Throws UsageError for a malformed command
  // line and FileError for a path that fails its role's check.
  ParsedArgs parse(const std::vector<std::string>& args) const;

  // "usage: kiln <command> [options]", the summary, then one line per flag with its default.
  std::string usage() const;
  const std::string& command() const { return command_; }

 private:
  enum class Kind { kInt, kFloat, kString, kPath, kSwitch };
  struct Flag {
    std::string name;
    std::string metavar;
    std::string help;
    Kind kind;
    ParsedArgs::Value default_value;
    int64_t int_min = 1;
    FloatRange range;
    PathRole role = PathRole::kInput;
  };

  ArgParser& add(Flag flag);
  const Flag* find(const std::string& name) const;
  ParsedArgs::Value convert(const Flag& flag, const std::string& text) const;
  static void check_path(const Flag& flag, const std::string& path);

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;  // in declaration order, which is the usage order
  std::optional<Flag> positional_;
  std::optional<std::pair<std::string, std::string>> rest_;  // metavar, help
  std::map<char, std::string> shorts_;                       // letter -> flag name
};

}  // namespace kiln::cli
