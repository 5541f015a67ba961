// The whole model against the PyTorch reference dump (tests/reference/make_bert_golden.py): a tiny
// BERT's logits, losses and every gradient, then the parameters after 3 LAMB steps (through the one training step,
// harness/train_step.h), all within 1e-4 relative error of the float64 reference. The dump's batch is in the
// reference's padded (rows, seq_len) form; it is compacted here into the reader's form (data/batch.h).
#include <gtest/gtest.h>

#include <cmath>

#include "core/hdf5.h"
#include "harness/train_stack.h"
#include "optim/lr_schedule.h"
#include "registry/registry.h"
#include "staged_steps.h"

namespace bertperf {
namespace {

const std::string kGolden = std::string(BERTPERF_SOURCE_DIR) + "/tests/golden/bert_tiny_golden.h5";

// Relative error of a tensor: max |ours - ref| / max(max |ref|, floor). One scale per tensor keeps
// near-zero entries of a large tensor from dominating. The floor matters only for tensors whose
// exact value is zero, such as the key biases' gradient (softmax ignores a shift of every score):
// there fp32 rounding leaves ~1e-9 against the reference's ~1e-18.
double relative_error(const float* ours, const std::vector<double>& ref, double floor = 1e-12) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(double(ours[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return diff / scale;
}

// The padded rows of the dump (seq_id 0 = padding, k = the k-th sequence of a row) as a compacted Batch. Padded
// prediction slots (weight 0) keep pointing at their row's first token.
Batch compact(const h5::File& file) {
  const auto shape = file.info("batch/input_ids").shape;
  const int B = static_cast<int>(shape[0]), S = static_cast<int>(shape[1]);
  const auto ids = file.read<int32_t>("batch/input_ids"), segments = file.read<int32_t>("batch/segment_ids"),
             positions = file.read<int32_t>("batch/position_ids"), seq_id = file.read<int32_t>("batch/seq_id"),
             mlm_positions = file.read<int32_t>("batch/mlm_positions"), mlm_labels = file.read<int32_t>("batch/mlm_labels"),
             cls_positions = file.read<int32_t>("batch/cls_positions"), nsp_labels = file.read<int32_t>("batch/nsp_labels");
  const auto mlm_weights = file.read<float>("batch/mlm_weights");
  const int M = static_cast<int>(mlm_positions.size()), Q = static_cast<int>(cls_positions.size());
  Batch b;
  b.capacity = {B * S, Q, M, S};
  std::vector<int32_t> index(size_t(B) * S, -1);  // padded flat index -> compacted token
  b.cu_seqlens.push_back(0);
  for (int r = 0; r < B; ++r)
    for (int k = 1; k <= S; ++k) {
      bool any = false;
      for (int t = 0; t < S; ++t) {
        const size_t flat = size_t(r) * S + t;
        if (seq_id[flat] != k) continue;
        any = true;
        index[flat] = static_cast<int32_t>(b.input_ids.size());
        b.input_ids.push_back(ids[flat]);
        b.segment_ids.push_back(segments[flat]);
        b.position_ids.push_back(positions[flat]);
      }
      if (!any) break;
      b.cu_seqlens.push_back(static_cast<int32_t>(b.input_ids.size()));
    }
  b.tokens = static_cast<int>(b.input_ids.size());
  b.sequences = static_cast<int>(b.cu_seqlens.size()) - 1;
  EXPECT_EQ(b.sequences, Q);
  for (int q = 0; q < Q; ++q) EXPECT_EQ(index[cls_positions[q]], b.cu_seqlens[q]) << "sequence " << q;
  b.nsp_labels = nsp_labels;
  for (int i = 0; i < M; ++i) {
    const int32_t at = index[mlm_positions[i]];
    EXPECT_TRUE(at >= 0 || mlm_weights[i] == 0) << "a real prediction on padding";
    b.mlm_positions.push_back(at >= 0 ? at : b.cu_seqlens[mlm_positions[i] / S]);
    b.mlm_labels.push_back(mlm_labels[i]);
    b.mlm_weights.push_back(mlm_weights[i]);
  }
  b.predictions = M;
  b.input_ids.resize(b.capacity.tokens, 0);
  b.segment_ids.resize(b.capacity.tokens, 0);
  b.position_ids.resize(b.capacity.tokens, 0);
  return b;
}

struct Golden {
  h5::File file = h5::File::open(kGolden);
  BertConfig config = bert_config_from_json(Json::parse(file.attr_string("", "bert_config")), kGolden);
  Batch batch = compact(file);
  std::unique_ptr<DistContext> dist = DistContext::single();
  // The training stack on the CPU (dropout seed 0), sized for the dump's batch, from the dump's parameters.
  TrainStack stack{spec(), *dist};
  const TensorTable& table = stack.table();
  Backend& backend = stack.backend();

  Golden() {
    FlatTensors host(table);
    load(host, "param/");
    stack.params().upload(host);
  }
  TrainStackSpec spec() const {
    TrainStackSpec s;
    s.model = config;
    s.backend = backend_spec("cpu");
    s.lamb = lamb();
    s.train_capacity = batch.capacity;
    return s;
  }

  void load(FlatTensors& flat, const std::string& prefix) const {
    for (const TensorInfo& t : table.tensors()) {
      const auto values = file.read<double>(prefix + t.name);
      ASSERT_EQ(values.size(), t.numel) << t.name;
      std::copy(values.begin(), values.end(), flat.get(t));
    }
  }
  LambHyperparams lamb() const {
    LambHyperparams hp;
    hp.learning_rate = read_double("lamb_learning_rate");
    hp.beta1 = read_double("lamb_beta1");
    hp.beta2 = read_double("lamb_beta2");
    hp.epsilon = read_double("lamb_epsilon");
    hp.weight_decay = read_double("lamb_weight_decay");
    hp.max_grad_norm = read_double("lamb_max_grad_norm");
    hp.poly_power = read_double("lamb_poly_power");
    hp.train_steps = file.attr_int("", "lamb_train_steps");
    hp.warmup_steps = file.attr_int("", "lamb_warmup_steps");
    hp.start_warmup_step = file.attr_int("", "lamb_start_warmup_step");
    return hp;
  }
  double read_double(const std::string& name) const { return file.attr_double("", name); }
};

// Rows of `rows` x `cols` values at row stride `stride` on the backend, as host floats.
std::vector<float> download_rows(Backend& backend, const void* src, int rows, int cols, int stride) {
  std::vector<float> all(size_t(rows) * stride), out;
  backend.download(all.data(), src, all.size() * sizeof(float));
  backend.synchronize();
  for (int r = 0; r < rows; ++r) out.insert(out.end(), all.begin() + size_t(r) * stride, all.begin() + size_t(r) * stride + cols);
  return out;
}

TEST(BertGolden, LogitsLossesAndGradientsMatchPyTorch) {
  Golden g;
  FlatTensors grads(g.table);
  ParamBuffers& params = g.stack.params();
  BertModel& model = g.stack.model();
  BatchStage stage(g.backend, g.batch.capacity);
  const DeviceBatch& batch = stage.stage(g.batch, LossWeighting::MEAN);
  model.zero_stats();
  model.forward(batch, params.weights(), /*training=*/false, nullptr, 0);
  const LossStats out = model.read_stats();

  EXPECT_NEAR(out.mlm_loss, g.read_double("mlm_loss"), 1e-4 * out.mlm_loss);
  EXPECT_NEAR(out.nsp_loss, g.read_double("nsp_loss"), 1e-4 * out.nsp_loss);
  const std::vector<float> mlm = download_rows(g.backend, model.mlm_logits(), g.batch.predictions,
                                               g.config.vocab_size, model.mlm_logits_stride());
  EXPECT_LT(relative_error(mlm.data(), g.file.read<double>("mlm_logits")), 1e-4);
  const std::vector<float> nsp = download_rows(g.backend, model.nsp_logits(), g.batch.sequences, 2, 2);
  EXPECT_LT(relative_error(nsp.data(), g.file.read<double>("nsp_logits")), 1e-4);

  g.backend.fill_zero(params.grads(), params.elements() * sizeof(float));
  model.backward(batch, params.weights(), params.grads(), 1.0f);
  params.download_grads(grads);
  for (const TensorInfo& t : g.table.tensors()) {
    // Gradients here are of order 1e-2 to 1: 1e-3 is far below any of them.
    EXPECT_LT(relative_error(grads.get(t), g.file.read<double>("grad/" + t.name), 1e-3), 1e-4) << t.name;
  }
}

// Three reference LAMB steps on the same batch, through the training step: clip to max_grad_norm, schedule,
// update.
TEST(BertGolden, ThreeLambStepsMatchPyTorch) {
  Golden g;
  const LambHyperparams hp = g.lamb();
  const auto ref_loss = g.file.read<double>("lamb_steps/loss");
  const auto ref_lr = g.file.read<double>("lamb_steps/lr");
  const auto ref_norm = g.file.read<double>("lamb_steps/grad_norm");
  const int steps = static_cast<int>(g.file.attr_int("", "lamb_steps"));
  ParamBuffers& params = g.stack.params();
  BertModel& model = g.stack.model();
  testing::StagedSteps staged(g.stack, {g.batch});
  for (int s = 0; s < steps; ++s) {
    // The dump's model has no dropout, so the training step's forward is the reference's.
    const StepStats out = staged.run(s);
    const double loss = out.loss.mlm_loss + out.loss.nsp_loss;
    EXPECT_NEAR(loss, ref_loss[s], 1e-4 * ref_loss[s]) << "step " << s;
    EXPECT_NEAR(out.grad_norm, ref_norm[s], 1e-4 * ref_norm[s]) << "step " << s;
    EXPECT_NEAR(learning_rate(hp, s), ref_lr[s], 1e-12) << "step " << s;
  }
  BatchStage stage(g.backend, g.batch.capacity);
  model.zero_stats();
  model.forward(stage.stage(g.batch, LossWeighting::MEAN), params.weights(), false, nullptr, 0);
  const LossStats final_out = model.read_stats();
  EXPECT_NEAR(final_out.mlm_loss + final_out.nsp_loss, ref_loss[steps], 1e-4 * ref_loss[steps]);
  FlatTensors host(g.table);
  params.download(host);
  for (const TensorInfo& t : g.table.tensors()) {
    EXPECT_LT(relative_error(host.get(t), g.file.read<double>("lamb3/" + t.name)), 1e-4) << t.name;
  }
}

}  // namespace
}  // namespace bertperf
