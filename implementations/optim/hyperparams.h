// The optimizer's hyperparameters: the reference's LAMB and learning-rate schedule, as a config names them.
#pragma once

#include <cstdint>

namespace bertperf {

struct LambHyperparams {
  double learning_rate = 0;       // opt_base_learning_rate
  double beta1 = 0.9;             // opt_lamb_beta_1
  double beta2 = 0.999;           // opt_lamb_beta_2
  double epsilon = 1e-6;          // opt_lamb_epsilon
  double weight_decay = 0.01;     // opt_lamb_weight_decay_rate
  double max_grad_norm = 1.0;     // global-norm clip
  int64_t train_steps = 0;        // opt_learning_rate_training_steps (T, in optimizer steps)
  int64_t warmup_steps = 0;       // opt_learning_rate_warmup_steps / num_warmup_steps
  int64_t start_warmup_step = 0;  // start_warmup_step
  double poly_power = 1.0;        // opt_learning_rate_decay_poly_power (reference: 1.0)
};

}  // namespace bertperf
