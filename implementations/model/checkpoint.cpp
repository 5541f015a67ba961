// HDF5 checkpoints keyed by TF variable name (checkpoint.h).
#include "model/checkpoint.h"

#include "core/errors.h"
#include "core/hdf5.h"

namespace bertperf {

void save_checkpoint(const FlatTensors& params, const std::string& path) {
  h5::File file = h5::File::create(path);
  file.set_attr("", "format", std::string(kCheckpointFormat));
  file.set_attr("", "version", kCheckpointVersion);
  for (const TensorInfo& t : params.table().tensors()) file.write(t.name, params.get(t), t.shape);
  file.commit();
}

void load_checkpoint(FlatTensors& params, const std::string& path) {
  const h5::File file = h5::File::open(path);
  if (file.has_attr("", "format")) {
    const std::string format = file.attr_string("", "format");
    if (format != kCheckpointFormat)
      throw_input(path, cat("is a '", format, "' file, not a ", kCheckpointFormat));
    const int64_t version = file.has_attr("", "version") ? file.attr_int("", "version") : 0;
    if (version < 1 || version > kCheckpointVersion)
      throw_input(path, cat("checkpoint version ", version, " is not supported (this build reads 1 to ",
                            kCheckpointVersion, ")"));
  }
  for (const TensorInfo& t : params.table().tensors()) {
    if (!file.has(t.name)) throw_input(path, cat("missing tensor '", t.name, "'"));
    const h5::DatasetInfo info = file.info(t.name);
    if (info.vlen || info.shape != t.shape)
      throw_input(path, cat("tensor '", t.name, "' has shape ", shape_string(info.shape), info.vlen ? " (vlen)" : "",
                            ", the model needs ", shape_string(t.shape)));
    file.read_into(t.name, params.get(t), t.numel);
  }
}

}  // namespace bertperf
