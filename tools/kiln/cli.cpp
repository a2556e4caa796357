// Dispatch of `kiln <command> [options]` and the mapping of errors to exit statuses.
#include "cli.h"

#include <functional>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "cli_args.h"
#include "commands.h"
#include "kiln/core/error.h"
#include "kiln/ops/linalg.h"

namespace kiln::cli {

namespace {

struct Command {
  const char* name;
  const char* summary;
  std::function<ArgParser()> parser;
  std::function<int(const ParsedArgs&, std::ostream&, std::ostream&)> run;
};

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {"train", "train a character-level GPT on a text file", train_parser,
       [](const ParsedArgs& a, std::ostream& out, std::ostream& err) {
         return run_train(TrainOptions::from_args(a), out, err);
       }},
      {"sample", "generate text from a trained checkpoint", sample_parser,
       [](const ParsedArgs& a, std::ostream& out, std::ostream& err) {
         return run_sample(SampleOptions::from_args(a), out, err);
       }},
      {"bench", "time the benchmark workloads and print a table of medians", bench_parser,
       run_bench},
      {"fuzz", "compare compiled runs of random programs with eager mode", fuzz_parser, run_fuzz},
      {"report", "write an HTML page of what a debug run (KILN_DEBUG_DIR) compiled", report_parser,
       run_report},
      {"minify", "shrink a failing repro folder to the ops that still fail", minify_parser,
       run_minify},
      {"launch", "start the processes of a data-parallel run (kiln::distributed)", launch_parser,
       run_launch},
      {"prepare", "precompile what the inductor backend's generated code includes", prepare_parser,
       run_prepare},
  };
  return all;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

int run_command(const Command& cmd, const std::vector<std::string>& args, std::ostream& out,
                std::ostream& err) {
  const ArgParser parser = cmd.parser();
  try {
    ParsedArgs parsed = parser.parse(args);
    if (parsed.help_requested()) {
      out << parser.usage();
      return kExitOk;
    }
    return cmd.run(parsed, out, err);
  } catch (const UsageError& e) {
    err << "kiln " << cmd.name << ": " << e.what() << "\n\n" << parser.usage();
    return kExitUsage;
  } catch (const kiln::Error& e) {
    err << "kiln " << cmd.name << ": error: " << e.what() << "\n";
    return kExitError;
  } catch (const std::exception& e) {
    // Not a user mistake (out of memory, a bug): still a message and a status, not an abort.
    err << "kiln " << cmd.name << ": internal error: " << e.what() << "\n";
    return kExitError;
  }
}

}  // namespace

std::string top_level_usage() {
  std::ostringstream os;
  os << "usage: kiln <command> [options]\n\ncommands:\n";
  for (const Command& c : commands()) {
    os << "  " << c.name << std::string(10 - std::string(c.name).size(), ' ') << c.summary << "\n";
  }
  os << "  version   print the version and the BLAS that products run on\n"
     << "  help      print this message; 'kiln help <command>' prints a command's options\n"
     << "\nRun 'kiln <command> --help' for the options of a command.\n";
  return os.str();
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << top_level_usage();
    return kExitUsage;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.size() >= 2) {
      if (const Command* c = find_command(args[1])) {
        out << c->parser().usage();
        return kExitOk;
      }
      err << "kiln: unknown command '" << args[1] << "'\n\n" << top_level_usage();
      return kExitUsage;
    }
    out << top_level_usage();
    return kExitOk;
  }
  if (name == "version" || name == "--version") {
    // (The BLAS line says which kernels products run on: worth having in a bug report.)
    out << "kiln 0.1.0\nBLAS: " << blas_config() << "\n";
    return kExitOk;
  }
  const Command* cmd = find_command(name);
  if (cmd == nullptr) {
    err << "kiln: unknown command '" << name << "'\n\n" << top_level_usage();
    return kExitUsage;
  }
  return run_command(*cmd, std::vector<std::string>(args.begin() + 1, args.end()), out, err);
}

}  // namespace kiln::cli
