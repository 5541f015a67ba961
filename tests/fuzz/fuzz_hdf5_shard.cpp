// Fuzz target: the MLPerf HDF5 layout reader (data/layouts.h) on arbitrary file bytes, through HDF5. Every outcome
// but a shard or an InputError is a finding; so is HDF5 printing its own error stack (checked by the script).
#include "core/errors.h"
#include "data/layouts.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertperf;
  const std::string path = fuzz::write_file("shard.hdf5", data, size);
  try {
    (void)count_shard(path);
    (void)read_shard(path, ShardLimits{30522, 512, 76});
  } catch (const InputError&) {
  }
  return 0;
}
