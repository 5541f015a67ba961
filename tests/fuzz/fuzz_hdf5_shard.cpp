// Fuzz target: the MLPerf HDF5 layout reader (data/layouts.h) on arbitrary file bytes, through HDF5, as training
// reads a shard: its length index built from it (data/shard_index.h: every record checked by read_shard, then where
// the values lie) and every row read with plain reads into a batch. Every outcome but rows or an InputError is a finding; so is HDF5 printing its own error stack
// (checked by the script).
#include "core/errors.h"
#include "data/layouts.h"
#include "data/shard_index.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertperf;
  const std::string path = fuzz::write_file("shard.hdf5", data, size);
  try {
    (void)count_shard(path);
    const auto index = ShardIndex::build(path);  // read_shard's checks of every record, then the places
    ShardRows rows(index, {30522, 76});
    Batch batch;
    for (size_t r = 0; r < index->rows(); ++r) {
      // A batch of the row's own size: the index's lengths are what a reader sizes its batches by.
      BatchView view = view_of(batch, {index->tokens(r), index->row_sequences(r), index->predictions(r) + 1,
                                       index->tokens(r)});
      BatchWriter writer(view, false, 0);
      rows.read(r, writer);
      writer.end_row();
      writer.finish();
    }
  } catch (const InputError&) {
  }
  return 0;
}
