// Fuzz target: the MLPerf HDF5 layout reader (data/layouts.h) on arbitrary file bytes, through HDF5, and the reader
// training uses: the shard's length index built from it (data/shard_index.h) and its rows read with plain reads into
// a batch. Every outcome but batches or an InputError is a finding; so is HDF5 printing its own error stack
// (checked by the script).
#include <filesystem>

#include "core/errors.h"
#include "data/layouts.h"
#include "data/reader.h"
#include "data/shard_index.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertperf;
  const std::string path = fuzz::write_file("shard.hdf5", data, size);
  std::filesystem::remove(ShardIndex::path_of(path));  // the last input's
  try {
    (void)count_shard(path);
    (void)read_shard(path, ShardLimits{30522, 512, 76});
    ReaderOptions o;
    o.files = {path};
    o.batch_rows = 4;
    o.seq_len = 512;
    o.vocab_size = 30522;
    o.shuffle = o.repeat = o.drop_last = false;
    PretrainingReader reader(o);
    Batch b;
    for (int i = 0; i < 64 && reader.next(b); ++i) {
    }
  } catch (const InputError&) {
  }
  return 0;
}
