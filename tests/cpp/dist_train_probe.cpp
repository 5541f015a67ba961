// Data-parallel training for test_dist_training.cpp, run as one process or under mpirun (also across the hosts of
// scripts/netns_hosts.sh): the training step of a session (harness/train_step.h) with the reducer and LAMB a config's
// "distributed" block chooses, fed so that W ranks of n micro-batches see exactly the micro-batches of one rank with
// n x W. Every process reads the config's train data in file order (no shuffle); step s uses the n x W batches
// s*n*W .. s*n*W + n*W - 1, of which rank r takes numbers m*W + r (m < n): the micro-batch one rank runs as number
// m*W + r, with the same dropout masks (the step keys them so). The session's reader deals rows to ranks
// differently, which is why this probe feeds the step itself.
//
//   dist_train_probe CONFIG STEPS OUT   prints "step S loss L" (rank 0, L summed over micro-batches and ranks and
//                                       divided by their number, as the session does) and writes the final fp32
//                                       master weights to OUT (rank 0), then "reduction: ..." on stderr
//   BERTPERF_PROBE_NAN=R:S              rank R's first micro-batch of step S (from 0) gets a NaN count weight, so its
//                                       loss and gradient are NaN on that rank alone
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "core/errors.h"
#include "comm/context.h"
#include "harness/reader_plan.h"
#include "harness/train_config.h"
#include "harness/train_stack.h"
#include "staged_steps.h"

using namespace bertperf;

namespace {

int train(DistContext& dist, const std::string& config_path, int steps, const std::string& out) {
  const TrainConfig c = load_train_config(config_path);
  const int W = dist.size(), r = dist.rank(), n = c.grad_accum_steps;
  check_job_ranks(c, W);

  // The config's data as one rank of one reads it, in file order.
  ReaderPlan data = reader_plan(c, DataSet::TRAIN, 0, 1);
  data.options.shuffle = false;
  data.options.balance = false;
  data.options.micro_batches = 1;
  PretrainingReader reader(data.options);
  const int read = std::max(steps, 1);  // STEPS 0: the initial parameters, from a model sized by one batch
  std::vector<Batch> batches(static_cast<size_t>(read) * n);  // this rank's, step by step
  for (int s = 0; s < read; ++s)
    for (int j = 0; j < n * W; ++j) {
      Batch b;
      BERT_CHECK(reader.next(b), "the reader ran dry");
      if (j % W == r) batches[static_cast<size_t>(s) * n + j / W] = std::move(b);
    }

  if (const char* nan = std::getenv("BERTPERF_PROBE_NAN")) {
    int nan_rank = -1, nan_step = -1;
    BERT_CHECK(std::sscanf(nan, "%d:%d", &nan_rank, &nan_step) == 2 && nan_step >= 0 && nan_step < read,
               "BERTPERF_PROBE_NAN is RANK:STEP, got ", nan);
    if (nan_rank == r) batches[static_cast<size_t>(nan_step) * n].mlm_weights[0] = std::nanf("");
  }

  TrainStack stack(stack_spec(c, 7, data.capacity), dist);
  std::cerr << cat("rank ", r, ": reduction: ", stack.reducer().describe(), "; LAMB state ", stack.lamb().state_bytes(),
                   " bytes; step: ", stack.step().describe_capture(), "\n");

  testing::StagedSteps staged(stack, std::move(batches), n);
  for (int s = 0; s < steps; ++s) {
    const StepStats stats = staged.run(s);  // summed over the ranks
    const double loss = stats.loss.mlm_loss + stats.loss.nsp_loss;
    if (dist.is_root()) std::printf("step %d loss %.17g\n", s + 1, loss / (n * W));
  }
  if (stack.step().captured()) std::cerr << cat("rank ", r, ": replayed captured steps\n");
  FlatTensors host(stack.table());
  stack.params().download(host);
  if (dist.is_root()) {
    std::ofstream file(out, std::ios::binary);
    file.write(reinterpret_cast<const char*>(host.data()),
               static_cast<std::streamsize>(stack.table().total_elements() * sizeof(float)));
    BERT_CHECK(file.good(), "writing ", out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_job("dist_train_probe", [&](DistContext& dist) {
    if (argc != 4) throw_input("command line", "usage: dist_train_probe CONFIG STEPS OUT");
    return train(dist, argv[1], std::stoi(argv[2]), argv[3]);
  });
}
