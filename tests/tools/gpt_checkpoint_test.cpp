// The GPT checkpoint carries the optimizer's state (tensors and metadata) under "optim.".
#include "gpt_checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace kiln::cli {
namespace {

TEST(GPTCheckpoint, OptimizerStateRoundTrip) {
  std::string dir = (std::filesystem::path(::testing::TempDir()) / "kiln_ckpt_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/c.safetensors";

  Tensor w = tensor({1.0, -2.0, 0.5}, DType::Float32);
  w.requires_grad_();
  optim::AdamW opt({w}, {.lr = 0.01, .weight_decay = 0.1});
  w.set_grad(tensor({0.3, 0.1, -0.2}, DType::Float32));
  opt.step();

  GPTCheckpoint c;
  c.vocab = CharVocab::from_string("\nab");
  c.config.vocab_size = 3;
  c.config.block_size = 8;
  c.step = 1;
  c.model = {{"w", w.detach()}};
  c.optimizer = opt.state_dict();
  c.extra["seed"] = "7";
  save_gpt_checkpoint(path, c);

  GPTCheckpoint r = load_gpt_checkpoint(path);
  EXPECT_EQ(r.optimizer.metadata, c.optimizer.metadata);
  ASSERT_EQ(r.optimizer.tensors.size(), c.optimizer.tensors.size());
  EXPECT_EQ(r.extra, (std::map<std::string, std::string>{{"seed", "7"}}));

  Tensor w2 = r.model[0].second.clone();
  w2.requires_grad_();
  optim::AdamW resumed({w2});
  resumed.load_state_dict(r.optimizer);
  EXPECT_EQ(resumed.step_count(0), 1);
  EXPECT_EQ(resumed.options().weight_decay, 0.1);
  w.set_grad(tensor({0.5, 0.5, 0.5}, DType::Float32));
  w2.set_grad(tensor({0.5, 0.5, 0.5}, DType::Float32));
  opt.step();
  resumed.step();
  EXPECT_EQ(w.to_vector<float>(), w2.to_vector<float>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::cli
