// A short fixed-seed run of the reader fuzzer (reader_fuzz.h): every mutated safetensors file
// and graph text is either read or rejected with kiln::Error. Long runs: kiln_reader_fuzz.
#include <gtest/gtest.h>

#include "io/reader_fuzz.h"

namespace kiln {
namespace {

TEST(ReaderFuzz, MutatedInputsAreReadOrRejectedWithKilnError) {
  const reader_fuzz::Stats st = reader_fuzz::run(/*seed=*/1, /*iterations=*/20000);
  for (const std::string& f : st.findings) ADD_FAILURE() << f;
  // The mutations must exercise both outcomes, or the run proves little.
  EXPECT_GT(st.rejected, st.inputs / 4);
  EXPECT_GT(st.accepted, 100);
}

TEST(ReaderFuzz, SeedsAreValid) {
  for (const std::string& b : reader_fuzz::safetensors_seeds())
    EXPECT_NO_THROW(safetensors_from_bytes(b));
  const auto graphs = reader_fuzz::graph_seeds();
  // Four plain graphs, then AOT autograd's forward and backward halves.
  EXPECT_EQ(graphs.size(), 6u);
  for (const std::string& t : graphs) EXPECT_NO_THROW(ir::parse_graph(t)) << t;
  // The forward half AOT autograd is handed records which call outputs require grad.
  EXPECT_NE(graphs[4].find(" grad "), std::string::npos) << graphs[4];
}

}  // namespace
}  // namespace kiln
