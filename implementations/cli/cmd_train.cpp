// `bertperf train`: trains from a hyperparameter config without MLPerf logging, printing one line
// per optimizer step and, optionally, evaluating and saving a checkpoint. For experiments and for
// the test suite; timed MLPerf runs go through `bertperf run`.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "harness/train_session.h"

namespace bertperf::cli {

int cmd_train(const Args& args, DistContext& dist) {
  const Options opt(args, {"config", "seed", "steps", "save"}, {"eval", "help"});
  if (opt.flag("help")) {
    std::cout << "usage: bertperf train --config CONFIG.json [--seed N] [--steps N] [--eval] [--save CKPT.h5]\n"
                 "  Trains N optimizer steps (default: the config's max_samples) and prints the loss of each.\n"
                 "  --eval evaluates masked-LM accuracy at the end; --save writes the parameters.\n";
    return 0;
  }
  if (!opt.positional().empty()) throw_input("command line", "unexpected argument '" + opt.positional()[0] + "'");
  const TrainConfig config = load_train_config(opt.required("config"));
  const int64_t seed = opt.integer("seed", 1);
  const int64_t steps = opt.integer("steps", 0);
  if (steps < 0) throw_input("command line", "option --steps must not be negative");
  const int64_t target = steps > 0 ? steps * config.global_batch_size() : config.max_samples;

  TrainSession session(config, static_cast<uint64_t>(seed));
  const TrainProgress done = session.train_until(target, [](const TrainProgress& p) {
    // 9 significant digits print an fp32 loss exactly, so runs can be compared as text.
    std::printf("step %lld samples %lld loss %.9g lr %.6g\n", static_cast<long long>(p.optimizer_steps),
                static_cast<long long>(p.samples_trained), p.last_loss, p.learning_rate);
    std::fflush(stdout);
  });
  if (done.non_finite_loss) {
    std::fprintf(stderr, "bertperf train: error: the loss became %s at step %lld; stopping\n",
                 std::isnan(done.last_loss) ? "NaN" : "infinite", static_cast<long long>(done.optimizer_steps + 1));
    return 3;
  }
  if (opt.flag("eval")) {
    const EvalResult r = session.evaluate();
    std::printf("eval samples %lld mlm_accuracy %.6f mlm_loss %.6f\n", static_cast<long long>(r.samples),
                r.mlm_accuracy, r.mlm_loss);
  }
  if (auto path = opt.get("save")) session.save_checkpoint(*path);
  return 0;
}

}  // namespace bertperf::cli
