// The whole model against the PyTorch reference dump (tests/reference/make_bert_golden.py): a tiny
// BERT's logits, losses and every gradient, then the parameters after 3 LAMB steps, all within
// 1e-4 relative error of the float64 reference.
#include <gtest/gtest.h>

#include <cmath>

#include "core/hdf5.h"
#include "model/bert.h"
#include "optim/lamb.h"
#include "optim/lr_schedule.h"

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

struct Golden {
  h5::File file = h5::File::open(kGolden);
  BertConfig config = bert_config_from_json(Json::parse(file.attr_string("", "bert_config")), kGolden);
  TensorTable table = bert_parameter_table(config);
  Batch batch;

  Golden() {
    const auto ids = file.info("batch/input_ids").shape;
    batch.rows = static_cast<int>(ids[0]);
    batch.seq_len = static_cast<int>(ids[1]);
    batch.input_ids = file.read<int32_t>("batch/input_ids");
    batch.segment_ids = file.read<int32_t>("batch/segment_ids");
    batch.position_ids = file.read<int32_t>("batch/position_ids");
    batch.seq_id = file.read<int32_t>("batch/seq_id");
    batch.mlm_positions = file.read<int32_t>("batch/mlm_positions");
    batch.mlm_labels = file.read<int32_t>("batch/mlm_labels");
    batch.mlm_weights = file.read<float>("batch/mlm_weights");
    batch.cls_positions = file.read<int32_t>("batch/cls_positions");
    batch.nsp_labels = file.read<int32_t>("batch/nsp_labels");
  }

  void load(FlatTensors& flat, const std::string& prefix) const {
    for (const TensorInfo& t : table.tensors()) {
      const auto values = file.read<double>(prefix + t.name);
      ASSERT_EQ(values.size(), t.numel) << t.name;
      std::copy(values.begin(), values.end(), flat.get(t));
    }
  }
  BatchShape shape() const {
    return {batch.rows, batch.seq_len, batch.predictions(), batch.sequences()};
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

TEST(BertGolden, LogitsLossesAndGradientsMatchPyTorch) {
  Golden g;
  FlatTensors params(g.table), grads(g.table);
  g.load(params, "param/");
  BertModel model(g.config, g.shape());
  const BertOutputs out = model.forward(params, g.batch, /*training=*/false, 0, 0);

  EXPECT_NEAR(out.mlm_loss, g.read_double("mlm_loss"), 1e-4 * out.mlm_loss);
  EXPECT_NEAR(out.nsp_loss, g.read_double("nsp_loss"), 1e-4 * out.nsp_loss);
  EXPECT_LT(relative_error(model.mlm_logits(), g.file.read<double>("mlm_logits")), 1e-4);
  EXPECT_LT(relative_error(model.nsp_logits(), g.file.read<double>("nsp_logits")), 1e-4);

  grads.zero();
  model.backward(params, grads, g.batch);
  for (const TensorInfo& t : g.table.tensors()) {
    // Gradients here are of order 1e-2 to 1: 1e-3 is far below any of them.
    EXPECT_LT(relative_error(grads.get(t), g.file.read<double>("grad/" + t.name), 1e-3), 1e-4) << t.name;
  }
}

// Three reference LAMB steps on the same batch: clip to max_grad_norm, schedule, update.
TEST(BertGolden, ThreeLambStepsMatchPyTorch) {
  Golden g;
  FlatTensors params(g.table), grads(g.table);
  g.load(params, "param/");
  const LambHyperparams hp = g.lamb();
  const auto ref_loss = g.file.read<double>("lamb_steps/loss");
  const auto ref_lr = g.file.read<double>("lamb_steps/lr");
  const auto ref_norm = g.file.read<double>("lamb_steps/grad_norm");
  const int steps = static_cast<int>(g.file.attr_int("", "lamb_steps"));
  BertModel model(g.config, g.shape());
  Lamb lamb(g.table, hp);
  GradAccumulator accumulator(g.table, 1, hp.max_grad_norm);
  for (int step = 0; step < steps; ++step) {
    const BertOutputs out = model.forward(params, g.batch, false, 0, step);
    EXPECT_NEAR(out.total_loss, ref_loss[step], 1e-4 * ref_loss[step]) << "step " << step;
    grads.zero();
    model.backward(params, grads, g.batch);
    accumulator.reset();
    const double norm = accumulator.add(grads);
    EXPECT_NEAR(norm, ref_norm[step], 1e-4 * ref_norm[step]) << "step " << step;
    const double lr = learning_rate(hp, lamb.steps_taken());
    EXPECT_NEAR(lr, ref_lr[step], 1e-12) << "step " << step;
    lamb.step(params, accumulator.gradient(), lr);
  }
  const BertOutputs final_out = model.forward(params, g.batch, false, 0, steps);
  EXPECT_NEAR(final_out.total_loss, ref_loss[steps], 1e-4 * ref_loss[steps]);
  for (const TensorInfo& t : g.table.tensors()) {
    EXPECT_LT(relative_error(params.get(t), g.file.read<double>("lamb3/" + t.name)), 1e-4) << t.name;
  }
}

}  // namespace
}  // namespace bertperf
