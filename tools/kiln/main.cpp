// The `kiln` command-line program: `kiln train`, `kiln sample`, `kiln bench`, `kiln fuzz`,
// `kiln report`, `kiln version`.
// Everything but this entry point lives in kiln_cli_lib (see cli.h), so tests can link it.
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  return kiln::cli::run_cli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
