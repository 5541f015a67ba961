// Training steps on given host batches, staged through the batch pipeline as a training session stages them
// (harness/train_session.cpp): the batches in turn, micro_batches a step, the next step's asked for while a step
// runs where the pipeline reads ahead (an asynchronous backend).
#pragma once

#include <vector>

#include "data/batch_source.h"
#include "harness/train_stack.h"
#include "model/batch_pipeline.h"

namespace bertperf::testing {

class StagedSteps {
 public:
  StagedSteps(TrainStack& stack, std::vector<Batch> batches, int micro_batches = 1)
      : stack_(stack),
        source_([&] {
          const BatchShape shape{false, batches.at(0).capacity};
          return CachedSource(shape, std::move(batches), true);
        }()),
        pipeline_(stack.backend(), source_, micro_batches, LossWeighting::MEAN) {}

  // One step launched, its record not read.
  void launch(int64_t updates_done) {
    if (ahead_ready_) {
      std::swap(current_, ahead_);
    } else {
      BERT_CHECK(pipeline_.next(current_), "no batches");
    }
    stack_.step().launch(current_, updates_done);
    ahead_ready_ = pipeline_.reads_ahead() && pipeline_.next(ahead_);
  }
  // One step and its record.
  StepStats run(int64_t updates_done) {
    launch(updates_done);
    return stack_.step().read().back();
  }

 private:
  TrainStack& stack_;
  CachedSource source_;
  BatchPipeline pipeline_;
  StagedStep current_, ahead_;
  bool ahead_ready_ = false;
};

}  // namespace bertperf::testing
