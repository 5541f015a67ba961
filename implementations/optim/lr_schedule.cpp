// The reference learning-rate schedule (lr_schedule.h).
#include "optim/lr_schedule.h"

#include "core/errors.h"

namespace bertperf {

kmath::StepSchedule step_schedule(const LambHyperparams& hp) {
  BERT_CHECK(hp.train_steps > 0, "learning_rate needs train_steps > 0, got ", hp.train_steps);
  return {.learning_rate = hp.learning_rate, .beta1 = hp.beta1, .beta2 = hp.beta2, .poly_power = hp.poly_power,
          .train_steps = hp.train_steps, .warmup_steps = hp.warmup_steps, .start_warmup_step = hp.start_warmup_step};
}

double learning_rate(const LambHyperparams& hp, int64_t step) {
  return kmath::scheduled_learning_rate(step_schedule(hp), step);
}

}  // namespace bertperf
