// Reading TensorFlow checkpoints (the "tensor bundle" format of TF1 Saver V2 and TF2), without
// TensorFlow: enough to load the MLPerf phase-1 checkpoint model.ckpt-28252 and convert it to our
// HDF5 checkpoint (model/checkpoint.h).
//
// A checkpoint named by its prefix P is
//   P.index                  a LevelDB-format table (sorted string keys; data blocks, an index
//                            block and a 48-byte footer), mapping each tensor name to a serialized
//                            BundleEntryProto (dtype, shape, shard_id, offset, size, crc32c), plus
//                            the empty key for the BundleHeaderProto (num_shards, endianness);
//   P.data-SSSSS-of-NNNNN    raw little-endian tensor bytes at the entries' offsets.
// We decode the few protobuf fields we need by hand and verify every block and tensor checksum
// (masked CRC-32C, as TF writes them). Snappy-compressed table blocks (TF never writes them for
// bundles) and sliced (partitioned) variables are refused with a clear message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_table.h"

namespace bertperf {

// TensorFlow's DataType enum values for the types a checkpoint of ours can hold.
enum TfDType : int { TF_FLOAT = 1, TF_DOUBLE = 2, TF_INT32 = 3, TF_INT64 = 9 };
std::string tf_dtype_name(int dtype);  // "float32", "int64", ..., "DataType 19"

struct TfTensorEntry {
  std::string name;
  int dtype = 0;               // TF DataType enum
  std::vector<int64_t> shape;  // empty for a scalar
  int shard = 0;
  int64_t offset = 0, size = 0;  // bytes in the shard's data file
  uint32_t masked_crc32c = 0;    // as stored; 0 when absent
  bool sliced = false;           // a partitioned variable (not supported for reading)
};

class TfCheckpointReader {
 public:
  // Reads and checks `<prefix>.index`. Errors (missing file, not a table, bad checksum, a
  // big-endian bundle) are InputErrors naming the file.
  explicit TfCheckpointReader(std::string prefix);

  const std::string& prefix() const { return prefix_; }
  int num_shards() const { return num_shards_; }
  // Every tensor of the checkpoint, in key (name) order.
  const std::vector<TfTensorEntry>& entries() const { return entries_; }
  const TfTensorEntry* find(const std::string& name) const;

  // Reads a float32 tensor of exactly `count` elements into dst, verifying its size and checksum.
  void read_float(const TfTensorEntry& entry, float* dst, size_t count) const;

  std::string data_file(int shard) const;

 private:
  std::string prefix_;
  int num_shards_ = 1;
  std::vector<TfTensorEntry> entries_;
};

struct TfConversion {
  size_t converted = 0;                  // tensors written (the whole table)
  std::vector<std::string> skipped;      // checkpoint tensors not in the table (optimizer slots, ...)
};

// Converts the TF checkpoint at `prefix` into our HDF5 checkpoint at `out_path` for the tensors of
// `table` (e.g. bert_parameter_table(config)). Every table tensor must be in the checkpoint as
// float32 with the table's shape; one InputError names the first that is missing or differs.
// Everything else (LAMB/Adam slots, global_step, beta powers) is skipped and listed.
TfConversion convert_tf_checkpoint(const std::string& prefix, const TensorTable& table, const std::string& out_path);

// CRC-32C (Castagnoli) and TF/LevelDB's masking of stored CRCs; exposed for tests.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_mask(uint32_t crc);

}  // namespace bertperf
