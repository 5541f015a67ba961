// `bertperf convert-checkpoint`: a TensorFlow checkpoint (such as the MLPerf phase-1
// model.ckpt-28252) to our HDF5 checkpoint, for the parameter table of a bert_config.json.
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/bert_config.h"
#include "model/bert_params.h"
#include "model/tf_checkpoint.h"

namespace bertperf::cli {

namespace {

constexpr const char* kUsage =
    "usage: bertperf convert-checkpoint --tf1 PREFIX --bert-config JSON --out HDF5\n"
    "\n"
    "Converts the TensorFlow checkpoint PREFIX (the files PREFIX.index and\n"
    "PREFIX.data-00000-of-00001, e.g. model.ckpt-28252 of the MLPerf phase-1 checkpoint) into an\n"
    "HDF5 checkpoint with one float32 dataset per TF variable name, which `init_checkpoint` in a\n"
    "training config accepts. Every trainable variable of the model described by JSON must be present\n"
    "with its shape; optimizer slots (LAMB, Adam), global_step and other extras are skipped, as the\n"
    "reference does when it starts from this checkpoint. The output is written atomically.\n";

}  // namespace

int cmd_convert_checkpoint(const Args& args, DistContext&) {
  const Options opts(args, {"tf1", "bert-config", "out"}, {"help"});
  if (opts.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!opts.positional().empty())
    throw_input("command line", "unexpected argument '" + opts.positional().front() + "'");
  const std::string prefix = opts.required("tf1");
  const BertConfig config = load_bert_config(opts.required("bert-config"));
  const std::string out = opts.required("out");
  const TensorTable table = bert_parameter_table(config);
  const TfConversion result = convert_tf_checkpoint(prefix, table, out);
  std::cout << "wrote " << out << ": " << result.converted << " tensors; skipped " << result.skipped.size()
            << " checkpoint entries not in the model (optimizer slots, global_step, ...)\n";
  return 0;
}

}  // namespace bertperf::cli
