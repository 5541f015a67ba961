// The MLPerf BERT HDF5 layouts (bert-reference.md 2.3), in one place: which keys, dtypes and shapes
// each layout has, how to tell them apart, and how to read and write them.
//  - fixed:     input_ids int16 [N,S], input_mask int8 [N,S], segment_ids int8 [N,S],
//               masked_lm_positions int16 [N,P], masked_lm_ids int16 [N,P], next_sentence_labels int8 [N]
//  - varlength: h5py vlen rows [N]: input_ids int16, segment_ids int8, masked_lm_positions int16,
//               masked_lm_ids int16; next_sentence_labels int8 [N]
//  - packed:    vlen rows [R], up to 3 sequences per row: input_ids int16, segment_ids int8,
//               packed_input_len int16, masked_lm_positions int16 (row offsets), masked_lm_ids int16,
//               packed_masked_lm_len int16, next_sentence_labels int8 (one per sequence)
// Readers accept any integer type that holds the values losslessly, check every value they use
// (token ids below the vocabulary size, segment ids 0/1, positions inside their sequence, lengths
// that add up) and report the first bad record as one InputError naming the file, key and row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/packing.h"
#include "data/samples.h"

namespace bertperf {

enum class ShardLayout { FIXED, VARLENGTH, PACKED };
const char* layout_name(ShardLayout layout);  // "fixed", "varlength", "packed"
// The layout a name gives; an InputError naming `where` for any other name.
ShardLayout parse_layout(const std::string& name, const std::string& where);

// Decides the layout from the keys present; an InputError names the file when it fits none.
ShardLayout detect_layout(const std::string& path);

// Sequences of one shard, with the file's packing: row r holds sequences
// [row_offsets[r], row_offsets[r+1]) (one per row for the unpacked layouts).
struct ShardData {
  ShardLayout layout = ShardLayout::VARLENGTH;
  SequenceStore sequences;
  std::vector<size_t> row_offsets{0};
  size_t rows() const { return row_offsets.size() - 1; }
};

struct ShardLimits {
  int32_t vocab_size = 0;       // token ids and labels must be below this (0: no check)
  int max_seq_length = 512;     // a row (packed or not) may not be longer
  int max_predictions = 76;     // per sequence
};

ShardData read_shard(const std::string& path, const ShardLimits& limits);
// Number of sequences and rows without reading the token data.
struct ShardCounts {
  ShardLayout layout;
  int64_t sequences = 0, rows = 0;
};
ShardCounts count_shard(const std::string& path);

// Writers; both write atomically (a temporary beside `path`, renamed when complete). Token ids and
// positions must fit int16 (an InputError says so otherwise). `order` names the sequences to write,
// in order (empty: all, as stored), so a shuffled set is written without first copying it.
void write_fixed(const std::string& path, const SequenceStore& sequences, int max_seq_length, int max_predictions,
                 const std::vector<size_t>& order = {});
void write_varlength(const std::string& path, const SequenceStore& sequences, const std::vector<size_t>& order = {});
// The packed layout: the sequences (in `order`) packed greedily into rows of at most seq_len tokens within `limits`
// (data/packing.h, the reader's packer).
void write_packed(const std::string& path, const SequenceStore& sequences, int seq_len, const PackingLimits& limits,
                  const std::vector<size_t>& order = {});

// The checksum NVIDIA's hdf5_md5.py prints for a file: per row, md5 of str(input_ids row as a
// Python list) (fixed rows include their padding), then md5 of str(list of those hex digests).
std::string hdf5_md5(const std::string& path);
// The same computed from sequences about to be written in `layout`.
std::string hdf5_md5(const SequenceStore& sequences, bool fixed_layout, int max_seq_length,
                     const std::vector<size_t>& order = {});

}  // namespace bertperf
