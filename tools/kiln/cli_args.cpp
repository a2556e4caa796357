// ArgParser: declaration, parsing, checking and usage text of a subcommand's flags.
#include "cli_args.h"

#include "run_guard.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <system_error>

namespace kiln::cli {

namespace {

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Whole-token conversions: "12abc", "", " 3", "+3" and out-of-range values are all rejected.
bool parse_int(const std::string& text, int64_t& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool parse_double(const std::string& text, double& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty() && std::isfinite(out);
}

}  // namespace

// ---- FloatRange ---------------------------------------------------------------------------

bool FloatRange::contains(double v) const {
  bool above = min_inclusive ? v >= min : v > min;
  bool below = max_inclusive ? v <= max : v < max;
  return above && below;
}

std::string FloatRange::describe() const {
  bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  if (!has_min && !has_max) return "a number";
  if (!has_max) return "a number " + std::string(min_inclusive ? ">= " : "> ") + format_number(min);
  if (!has_min) return "a number " + std::string(max_inclusive ? "<= " : "< ") + format_number(max);
  return "a number in " + std::string(min_inclusive ? "[" : "(") + format_number(min) + ", " +
         format_number(max) + (max_inclusive ? "]" : ")");
}

// ---- ParsedArgs ---------------------------------------------------------------------------

const ParsedArgs::Value& ParsedArgs::lookup(const std::string& name) const {
  auto it = values_.find(name);
  // Asking for an undeclared flag is a bug in the command, not in the user's input.
  if (it == values_.end()) throw std::logic_error("no flag --" + name + " was declared");
  return it->second;
}

int64_t ParsedArgs::get_int(const std::string& name) const {
  return std::get<int64_t>(lookup(name));
}
double ParsedArgs::get_float(const std::string& name) const {
  return std::get<double>(lookup(name));
}
const std::string& ParsedArgs::get_string(const std::string& name) const {
  return std::get<std::string>(lookup(name));
}
bool ParsedArgs::get_switch(const std::string& name) const { return std::get<bool>(lookup(name)); }
bool ParsedArgs::was_given(const std::string& name) const {
  lookup(name);
  auto it = given_.find(name);
  return it != given_.end() && it->second;
}

// ---- ArgParser ----------------------------------------------------------------------------

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

ArgParser& ArgParser::add(Flag flag) {
  if (flag.name.empty() || flag.name == "help" || find(flag.name) != nullptr) {
    throw std::logic_error("flag --" + flag.name + " declared twice or reserved");
  }
  flags_.push_back(std::move(flag));
  return *this;
}

ArgParser& ArgParser::add_int(const std::string& name, const std::string& metavar,
                              int64_t default_value, const std::string& help, int64_t min) {
  Flag f{name, metavar, help, Kind::kInt, default_value};
  f.int_min = min;
  return add(std::move(f));
}

ArgParser& ArgParser::add_float(const std::string& name, const std::string& metavar,
                                double default_value, const std::string& help, FloatRange range) {
  Flag f{name, metavar, help, Kind::kFloat, default_value};
  f.range = range;
  return add(std::move(f));
}

ArgParser& ArgParser::add_string(const std::string& name, const std::string& metavar,
                                 const std::string& default_value, const std::string& help) {
  return add(Flag{name, metavar, help, Kind::kString, default_value});
}

ArgParser& ArgParser::add_path(const std::string& name, const std::string& metavar,
                               const std::string& default_value, const std::string& help,
                               PathRole role) {
  Flag f{name, metavar, help, Kind::kPath, default_value};
  f.role = role;
  return add(std::move(f));
}

ArgParser& ArgParser::add_switch(const std::string& name, const std::string& help) {
  return add(Flag{name, "", help, Kind::kSwitch, false});
}

ArgParser& ArgParser::add_positional(const std::string& name, const std::string& metavar,
                                     const std::string& help) {
  if (positional_ || find(name) != nullptr)
    throw std::logic_error("positional " + name + " declared twice or clashes with a flag");
  positional_ = Flag{name, metavar, help, Kind::kString, std::string()};
  return *this;
}

ArgParser& ArgParser::add_short(char letter, const std::string& name) {
  if (find(name) == nullptr || shorts_.count(letter) || letter == 'h')
    throw std::logic_error(std::string("short option -") + letter +
                           " for an undeclared flag, "
                           "declared twice, or reserved");
  shorts_[letter] = name;
  return *this;
}

const ArgParser::Flag* ArgParser::find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

ParsedArgs::Value ArgParser::convert(const Flag& flag, const std::string& text) const {
  const std::string shown = "--" + flag.name;
  switch (flag.kind) {
    case Kind::kInt: {
      int64_t v = 0;
      if (!parse_int(text, v) || v < flag.int_min) {
        std::string want = flag.int_min == 1   ? "a positive integer"
                           : flag.int_min == 0 ? "a non-negative integer"
                                               : "an integer >= " + std::to_string(flag.int_min);
        throw UsageError(shown + " expects " + want + ", got '" + text + "'");
      }
      return v;
    }
    case Kind::kFloat: {
      double v = 0;
      if (!parse_double(text, v) || !flag.range.contains(v)) {
        throw UsageError(shown + " expects " + flag.range.describe() + ", got '" + text + "'");
      }
      return v;
    }
    case Kind::kPath:
      if (text.empty()) throw UsageError(shown + " expects a file name, got ''");
      return text;
    case Kind::kString:
      return text;
    case Kind::kSwitch:
      break;
  }
  throw std::logic_error("convert called on a switch");
}

void ArgParser::check_path(const Flag& flag, const std::string& path) {
  namespace fs = std::filesystem;
  const std::string shown = "--" + flag.name;
  std::error_code ec;
  if (flag.role == PathRole::kInput) {
    if (!fs::exists(path, ec)) throw FileError(shown + ": no such file '" + path + "'");
    if (!fs::is_regular_file(path, ec)) throw FileError(shown + ": '" + path + "' is not a file");
    if (!std::ifstream(path, std::ios::binary)) {
      throw FileError(shown + ": cannot read '" + path + "'");
    }
  } else {
    // Check the destination and its folder now rather than after a long training run.
    check_output_file(shown, path);
  }
}

ArgParser& ArgParser::add_rest(const std::string& metavar, const std::string& help) {
  rest_ = {metavar, help};
  return *this;
}

ParsedArgs ArgParser::parse(const std::vector<std::string>& args) const {
  ParsedArgs out;
  for (const Flag& f : flags_) {
    out.values_[f.name] = f.default_value;
    out.given_[f.name] = false;
  }
  if (positional_) out.values_[positional_->name] = std::string();
  bool positional_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string word = args[i];
    if (word == "--" && rest_) {
      out.rest_.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (word == "--help" || word == "-h") {
      out.help_ = true;
      return out;
    }
    if (word.size() == 2 && word[0] == '-' && shorts_.count(word[1]))
      word = "--" + shorts_.at(word[1]);
    const bool looks_like_flag = word.size() >= 3 && word.compare(0, 2, "--") == 0;
    if (!looks_like_flag && positional_ && !positional_given && !word.empty() && word[0] != '-') {
      out.values_[positional_->name] = word;
      positional_given = true;
      continue;
    }
    if (!looks_like_flag) {
      throw UsageError("unexpected argument '" + word + "' (kiln " + command_ + " takes " +
                       (positional_ ? "one " + positional_->metavar + " and " : "only ") +
                       "--flags)");
    }
    // "--name=value" or "--name [value]".
    size_t eq = word.find('=');
    std::string name = word.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Flag* flag = find(name);
    if (flag == nullptr) {
      throw UsageError("unknown option '--" + name + "' for kiln " + command_);
    }
    if (out.given_[name]) throw UsageError("--" + name + " is given more than once");
    out.given_[name] = true;

    if (flag->kind == Kind::kSwitch) {
      if (eq != std::string::npos) throw UsageError("--" + name + " takes no value");
      out.values_[name] = true;
      continue;
    }
    std::string text;
    if (eq != std::string::npos) {
      text = word.substr(eq + 1);
    } else {
      if (i + 1 >= args.size() || args[i + 1].compare(0, 2, "--") == 0) {
        throw UsageError("--" + name + " needs a value (" + flag->metavar + ")");
      }
      text = args[++i];
    }
    out.values_[name] = convert(*flag, text);
  }
  if (positional_ && !positional_given)
    throw UsageError("missing " + positional_->metavar + " (" + positional_->help + ")");
  // Files are checked only once the whole line is known to be well formed, so a typo in a
  // later flag is reported as the usage error it is.
  for (const Flag& f : flags_) {
    if (f.kind != Kind::kPath) continue;
    const std::string& path = std::get<std::string>(out.values_[f.name]);
    if (!path.empty()) check_path(f, path);
  }
  return out;
}

std::string ArgParser::usage() const {
  std::ostringstream os;
  os << "usage: kiln " << command_ << (positional_ ? " " + positional_->metavar : "")
     << " [options]" << (rest_ ? " -- " + rest_->first : "") << "\n\n"
     << summary_ << "\n\n";
  if (positional_) os << "  " << positional_->metavar << "  " << positional_->help << "\n\n";
  if (rest_) os << "  " << rest_->first << "  " << rest_->second << "\n\n";
  os << "options:\n";
  auto left_column = [&](const Flag& f) {
    std::string shorts;
    for (const auto& [letter, name] : shorts_)
      if (name == f.name) shorts += std::string("-") + letter + ", ";
    return shorts + "--" + f.name + (f.metavar.empty() ? "" : " " + f.metavar);
  };
  size_t width = std::string("-h, --help").size();
  for (const Flag& f : flags_) width = std::max(width, left_column(f).size());
  for (const Flag& f : flags_) {
    os << "  " << std::left << std::setw(static_cast<int>(width) + 2) << left_column(f) << f.help;
    switch (f.kind) {
      case Kind::kInt:
        os << " (default " << std::get<int64_t>(f.default_value) << ")";
        break;
      case Kind::kFloat:
        os << " (default " << format_number(std::get<double>(f.default_value)) << ")";
        break;
      case Kind::kString:
      case Kind::kPath: {
        const auto& s = std::get<std::string>(f.default_value);
        if (!s.empty()) os << " (default " << s << ")";
        break;
      }
      case Kind::kSwitch:
        break;
    }
    os << "\n";
  }
  os << "  " << std::left << std::setw(static_cast<int>(width) + 2) << "-h, --help"
     << "print this message\n";
  return os.str();
}

}  // namespace kiln::cli
