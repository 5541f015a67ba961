// `bertperf train`: trains from a hyperparameter config without MLPerf logging, printing one line
// per optimizer step and, optionally, evaluating and saving a checkpoint. For experiments and for
// the test suite; timed MLPerf runs go through `bertperf run`.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "cli/args.h"
#include "harness/train_session.h"

namespace bertperf::cli {

int cmd_train(const Args& args, DistContext& dist) {
  const Options opt(args, {"config", "seed", "steps", "save"}, {"eval", "help"});
  if (opt.flag("help")) {
    std::cout << "usage: bertperf train --config CONFIG.json [--seed N] [--steps N] [--eval] [--save CKPT.h5]\n"
                 "  Trains N optimizer steps (default: the config's train_steps, or until its max_samples) and\n"
                 "  prints the loss of each. Samples are sequences, in every data layout.\n"
                 "  --eval evaluates masked-LM accuracy at the end; --save writes the parameters (and an FP8 run's\n"
                 "  scaling state, which a run with \"init_checkpoint\" naming the file resumes).\n";
    return 0;
  }
  if (!opt.positional().empty()) throw_input("command line", "unexpected argument '" + opt.positional()[0] + "'");
  const TrainConfig config = load_train_config(opt.required("config"));
  const int64_t seed = opt.integer("seed", 1);
  const int64_t steps = opt.integer("steps", 0);
  if (steps < 0) throw_input("command line", "option --steps must not be negative");
  // N means N optimizer steps whatever the layout: a packed row holds several sequences, so a sample count
  // would not say how many steps it takes.
  const int64_t target = steps > 0 ? std::numeric_limits<int64_t>::max() : config.max_samples;
  const int64_t max_steps = steps > 0 ? steps : config.lamb.train_steps;

  TrainSession session(config, static_cast<uint64_t>(seed), dist);
  if (dist.size() > 1 || config.reduction.shard_optimizer)
    std::cerr << cat("bertperf train: rank ", dist.rank(), ": reduction: ", session.reduction_description(),
                     "\nbertperf train: rank ", dist.rank(), ": step: ", session.capture_description(), "\n");  // one write
  const TrainProgress done = session.train_until(target, [&dist](const TrainProgress& p) {
    if (!dist.is_root()) return;
    // 9 significant digits print an fp32 loss exactly, so runs can be compared as text.
    std::printf("step %lld samples %lld loss %.9g lr %.6g\n", static_cast<long long>(p.optimizer_steps),
                static_cast<long long>(p.samples_trained), p.last_loss, p.learning_rate);
    std::fflush(stdout);
  }, max_steps);
  if (done.non_finite_loss) {
    std::fprintf(stderr, "bertperf train: error: the loss became %s at step %lld; stopping\n",
                 std::isnan(done.last_loss) ? "NaN" : "infinite", static_cast<long long>(done.optimizer_steps + 1));
    return 3;
  }
  if (opt.flag("eval")) {
    const EvalResult r = session.evaluate();
    if (dist.is_root())
      std::printf("eval samples %lld mlm_accuracy %.6f mlm_loss %.6f\n", static_cast<long long>(r.samples),
                r.mlm_accuracy, r.mlm_loss);
  }
  if (auto path = opt.get("save")) session.save_checkpoint(*path);
  return 0;
}

}  // namespace bertperf::cli
