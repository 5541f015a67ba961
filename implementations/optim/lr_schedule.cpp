// The reference learning-rate schedule (lr_schedule.h).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"

namespace bertperf {

double learning_rate(const LambHyperparams& hp, int64_t step) {
  BERT_CHECK(hp.train_steps > 0, "learning_rate needs train_steps > 0, got ", hp.train_steps);
  const double T = static_cast<double>(hp.train_steps);
  const double decayed =
      hp.learning_rate * std::pow(1.0 - static_cast<double>(std::min(step, hp.train_steps)) / T, hp.poly_power);
  if (hp.warmup_steps == 0) return decayed;
  const int64_t since_start = step - hp.start_warmup_step;
  if (since_start < hp.warmup_steps)
    return hp.learning_rate * static_cast<double>(since_start) / static_cast<double>(hp.warmup_steps);
  return decayed;
}

}  // namespace bertperf
