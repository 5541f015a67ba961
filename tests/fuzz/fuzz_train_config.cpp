// Fuzz target: the hyperparameter-config loader (harness/train_config.h) on arbitrary config.json bytes, beside a
// valid benchmark.json. Every outcome but a config or an InputError is a finding.
#include "core/errors.h"
#include "fuzz_common.h"
#include "harness/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertperf;
  static const bool benchmark = [] {
    std::ofstream(fuzz::scratch() / "benchmark.json") << R"({"name": "mini", "submission_benchmark": "bert",
      "division": "open", "target_accuracy": 0.5, "eval_samples": 64, "runs": 2,
      "eval_interval": {"scale": 1.0, "per_global_batch_sample": 0.0, "offset": 256, "round_down_to": 1}})";
    return true;
  }();
  (void)benchmark;
  const std::string path = fuzz::write_file("config.json", data, size);
  try {
    const TrainConfig c = load_train_config(path, false);
    (void)estimate_memory(c);
  } catch (const InputError&) {
  }
  return 0;
}
