// `kiln report`: one self-contained HTML page from a debug run folder (KILN_DEBUG_DIR,
// kiln::set_debug_dir), in the spirit of PyTorch's tlparse. docs/debugging.md shows a page.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln::cli::report {

// One line of index.jsonl: a flat JSON object, every value kept as text (numbers as written).
using Event = std::map<std::string, std::string>;

// Parses one index line; throws kiln::Error saying what is wrong with it.
Event parse_event(const std::string& line);

struct Options {
  std::string dot = "dot";         // the Graphviz program that draws the graphs
  size_t max_picture_nodes = 400;  // larger graphs are listed, not drawn (dot gets slow)
};

// The page for the run in `run_dir`. Throws kiln::Error when `run_dir` is not a debug run
// (no index.jsonl); everything else that is missing or broken becomes a note on the page.
std::string render_html(const std::string& run_dir, const Options& options);

// Text made safe inside HTML elements and attribute values.
std::string html_escape(const std::string& text);

}  // namespace kiln::cli::report
