// HDF5 checkpoints keyed by TF variable name (checkpoint.h).
#include "model/checkpoint.h"

#include "core/errors.h"
#include "core/hdf5.h"

namespace bertperf {

namespace {

void write_tensors(h5::File& file, const FlatTensors& tensors) {
  for (const TensorInfo& t : tensors.table().tensors()) file.write(t.name, tensors.get(t), t.shape);
}

// A file whose format attribute, where it has one, names our format at a version this build reads.
h5::File open_checkpoint(const std::string& path) {
  h5::File file = h5::File::open(path);
  if (file.has_attr("", "format")) {
    const std::string format = file.attr_string("", "format");
    if (format != kCheckpointFormat)
      throw_input(path, cat("is a '", format, "' file, not a ", kCheckpointFormat));
    const int64_t version = file.has_attr("", "version") ? file.attr_int("", "version") : 0;
    if (version < 1 || version > kCheckpointVersion)
      throw_input(path, cat("checkpoint version ", version, " is not supported (this build reads 1 to ",
                            kCheckpointVersion, ")"));
  }
  return file;
}

void read_tensors(const h5::File& file, FlatTensors& tensors, const std::string& path, const char* what) {
  for (const TensorInfo& t : tensors.table().tensors()) {
    if (!file.has(t.name)) throw_input(path, cat("missing ", what, "'", t.name, "'"));
    const h5::DatasetInfo info = file.info(t.name);
    if (info.vlen || info.shape != t.shape)
      throw_input(path, cat(what, "'", t.name, "' has shape ", shape_string(info.shape), info.vlen ? " (vlen)" : "",
                            ", the model needs ", shape_string(t.shape)));
    file.read_into(t.name, tensors.get(t), t.numel);
  }
}

}  // namespace

void save_checkpoint(const FlatTensors& params, const std::string& path, const FlatTensors* fp8_state) {
  h5::File file = h5::File::create(path);
  file.set_attr("", "format", std::string(kCheckpointFormat));
  file.set_attr("", "version", kCheckpointVersion);
  write_tensors(file, params);
  if (fp8_state) write_tensors(file, *fp8_state);
  file.commit();
}

void load_checkpoint(FlatTensors& params, const std::string& path) {
  read_tensors(open_checkpoint(path), params, path, "tensor ");
}

bool has_fp8_state(const std::string& path) { return open_checkpoint(path).has(kFp8StateGroup); }

void load_fp8_state(FlatTensors& fp8_state, const std::string& path) {
  read_tensors(open_checkpoint(path), fp8_state, path, "FP8 state ");
}

}  // namespace bertperf
