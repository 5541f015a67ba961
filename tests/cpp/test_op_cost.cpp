// The op-cost recorder (backends/op_cost.h), which the roofline of bench-step prices: a GEMM's FLOPs against the
// closed form 2 m n k and its bytes against its operands counted by hand, attention's FLOPs from the batch's
// sequence lengths, and the FLOPs of a whole training step of a tiny BERT against a hand count of its matrix
// products (the encoder's linears, attention, the pooler, NSP, the MLM transform and decoder; forward, dinp and
// dweight), with every encoder linear marked and no head's.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "backends/op_cost.h"
#include "harness/train_stack.h"
#include "model/batch_pipeline.h"
#include "tiny_bert.h"

namespace bertperf {
namespace {

TEST(OpCost, LinearIsTwoMnkAndItsOperands) {
  OpCostRecorder r;  // bf16 activations and weights, fp32 master: 2, 2 and 4 bytes
  const int m = 5, k = 7, n = 11;
  r.linear_forward({.out = nullptr, .pre = nullptr, .inp = nullptr, .weight = nullptr, .bias = &r, .N = m, .I = k,
                    .O = n, .groups = 3});
  ASSERT_EQ(r.costs().size(), 1u);
  EXPECT_STREQ(r.costs()[0].name, "linear_forward");
  EXPECT_DOUBLE_EQ(r.costs()[0].flops, 2.0 * m * (3 * n) * k);
  // inp (m, k), weight (k, 3n), bias (3n), out (m, 3n), two bytes each
  EXPECT_DOUBLE_EQ(r.costs()[0].bytes, 2.0 * (m * k + k * 3 * n + 3 * n + m * 3 * n));
  // in FP8: inp and weight one byte each, bias and out as before
  EXPECT_DOUBLE_EQ(r.costs()[0].fp8_bytes, 1.0 * (m * k + k * 3 * n) + 2.0 * (3 * n + m * 3 * n));

  r.linear_backward({.dinp = &r, .dweight = &r, .dbias = nullptr, .dout = nullptr, .inp = nullptr,
                     .weight = nullptr, .N = m, .I = k, .O = n});
  EXPECT_DOUBLE_EQ(r.costs()[1].flops, 2 * 2.0 * m * n * k);  // dinp and dweight
  // dinp: dout, weight read, dinp written (bf16); dweight: dout, inp read (bf16), dweight read and written (fp32)
  EXPECT_DOUBLE_EQ(r.costs()[1].bytes, 2.0 * (m * n + k * n + m * k) + 2.0 * (m * n + m * k) + 4.0 * 2 * k * n);
  r.linear_backward({.dinp = nullptr, .dweight = &r, .dbias = nullptr, .dout = nullptr, .inp = nullptr,
                     .weight = nullptr, .N = m, .I = k, .O = n});
  EXPECT_DOUBLE_EQ(r.costs()[2].flops, 2.0 * m * n * k);  // dweight only
}

TEST(OpCost, AttentionCountsEachSequenceByItsLength) {
  OpCostRecorder r;
  const int heads = 2, D = 4, S = 16;
  const int32_t cu[] = {0, 3, 3, 8, 8};  // lengths 3, 0, 5 and a filler sequence of 0
  DeviceBuffer cu_seqlens(r, sizeof cu);
  r.upload(cu_seqlens.data(), cu, sizeof cu);
  const ops::AttentionForward f{.ctx = nullptr, .saved = nullptr, .qkv = nullptr,
                                .cu_seqlens = cu_seqlens.as<int32_t>(), .N = 2 * S, .sequences = 4,
                                .max_seqlen = S, .heads = heads, .head_dim = D, .dropout = {}};
  r.attention_forward(f);
  r.attention_backward({.dqkv = nullptr, .workspace = nullptr, .dctx = nullptr, .ctx = nullptr, .qkv = nullptr,
                        .saved = nullptr, .cu_seqlens = f.cu_seqlens, .N = f.N, .sequences = 4, .max_seqlen = S,
                        .heads = heads, .head_dim = D, .dropout = {}});
  const double squares = 3 * 3 + 5 * 5;
  EXPECT_DOUBLE_EQ(r.costs()[0].flops, 2 * 2.0 * squares * D * heads);  // q.k and p.v
  EXPECT_DOUBLE_EQ(r.costs()[1].flops, 5 * 2.0 * squares * D * heads);  // scores again, dv, dp, dq, dk
}

TEST(OpCost, TinyStepMatchesAHandCount) {
  const BertConfig c = testing::tiny_bert({.vocab = 50, .hidden = 16, .layers = 2, .heads = 2, .intermediate = 24});
  // Two packed rows of 16 tokens: sequences of 9 and 5, and of 12.
  const Packing rows = {{{9, 2}, {5, 1}}, {{12, 3}}};
  const BatchShape shape{true, {.tokens = 32, .sequences = 4, .predictions = 8, .max_seqlen = 16}};
  SyntheticSource source(shape, {rows}, c.vocab_size, 3);
  auto owned = std::make_unique<OpCostRecorder>();
  OpCostRecorder& r = *owned;
  TrainStackSpec spec;
  spec.model = c;
  spec.backend.capture = false;
  spec.lamb.learning_rate = 1e-4;
  spec.lamb.train_steps = 100;
  spec.train_capacity = shape.capacity;
  std::unique_ptr<DistContext> dist = DistContext::single();
  TrainStack stack(spec, *dist, std::move(owned));
  BatchPipeline pipeline(r, source, 1, LossWeighting::MEAN);
  StagedStep step;
  ASSERT_TRUE(pipeline.next(step));
  r.clear();
  stack.step().launch(step, 0);  // the recorder runs no op: no record to read

  // The recorder has static shapes (the CUDA backend's): every batch at its capacity of tokens (T), sequences (Q)
  // and predictions (M); attention over the real sequences only.
  const double T = 32, Q = 4, M = 8, H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const double L = c.num_hidden_layers, squares = 9 * 9 + 5 * 5 + 12 * 12;
  const double encoder_linear = 2 * T * (3 * H * H + H * H + H * I + I * H);  // QKV, output, FFN in and out
  const double heads = 2 * Q * (H * H + H * 2) + 2 * M * (H * H + H * V);     // pooler, NSP, transform, decoder
  const double attention = 2 * 2 * squares * H + 5 * 2 * squares * H;       // forward and backward
  const double hand = 3 * (L * encoder_linear + heads) + L * attention;

  double flops = 0;
  std::map<std::string, int> count;
  int encoder_linears = 0;
  for (const OpCost& op : r.costs()) {
    flops += op.flops;
    ++count[op.name];
    encoder_linears += op.encoder_linear;
  }
  EXPECT_DOUBLE_EQ(flops, hand);
  EXPECT_EQ(count["linear_forward"], 4 * L + 4);
  EXPECT_EQ(count["linear_backward"], 4 * L + 4);
  EXPECT_EQ(count["attention_forward"], L);
  EXPECT_EQ(count["lamb_moments"], 1);
  EXPECT_EQ(count["lamb_apply"], 1);
  EXPECT_EQ(encoder_linears, 2 * 4 * L);  // forward and backward of the encoder's four linears, and no head's
  for (const OpCost& op : r.costs()) EXPECT_GT(op.bytes, 0) << op.name << " " << op.shape;
}

}  // namespace
}  // namespace bertperf
