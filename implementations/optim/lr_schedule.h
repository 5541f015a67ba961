// The reference's learning-rate schedule (bert-reference.md section 4.2): linear warmup from
// start_warmup_step, then polynomial decay to 0 at train_steps. The arithmetic is kernel_math.h's, shared with the
// device.
#pragma once

#include <cstdint>

#include "backends/kernel_math.h"
#include "optim/hyperparams.h"

namespace bertperf {

// The learning rate of the update made when `step` updates have already been applied (the
// reference's global_step before its increment: 0 on the first update). `step` is counted in the
// same unit as hp.train_steps, hp.warmup_steps and hp.start_warmup_step (optimizer steps in our
// configs).
//
// Exactly the reference, including its quirks:
//  - warmup, when warmup_steps W != 0, covers s' = step - start_warmup_step < W, lr = lr0 * s' / W;
//    so with start_warmup_step = 0 the first update has lr 0 (it still moves the LAMB moments);
//  - after warmup the decay lr0 * (1 - min(step, T) / T)^p is taken at `step`, not at s', so the
//    schedule jumps at the warmup boundary when start_warmup_step != 0;
//  - a step before start_warmup_step would give a negative rate, as in the reference; the config
//    loader keeps start_warmup_step <= 0 in practice.
double learning_rate(const LambHyperparams& hp, int64_t step);

// The schedule's constants from hp, for the shared schedule math (backends/kernel_math.h), which learning_rate and
// Lamb::fill_scalars compute with. Needs hp.train_steps > 0.
kmath::StepSchedule step_schedule(const LambHyperparams& hp);

}  // namespace bertperf
