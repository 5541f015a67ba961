// Reading, writing and checksumming the MLPerf BERT HDF5 layouts (layouts.h), through core/hdf5.h.
#include "data/layouts.h"

#include <algorithm>

#include "core/errors.h"
#include "core/hdf5.h"
#include "data/md5.h"

namespace bertperf {

const char* layout_name(ShardLayout layout) {
  switch (layout) {
    case ShardLayout::FIXED: return "fixed";
    case ShardLayout::VARLENGTH: return "varlength";
    case ShardLayout::PACKED: return "packed";
  }
  return "?";
}

ShardLayout parse_layout(const std::string& name, const std::string& where) {
  for (ShardLayout layout : {ShardLayout::FIXED, ShardLayout::VARLENGTH, ShardLayout::PACKED})
    if (name == layout_name(layout)) return layout;
  throw_input(where, "layout must be 'fixed', 'varlength' or 'packed', got '" + name + "'");
}

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) { throw_input(path, what); }

ShardLayout detect(const h5::File& file) {
  const std::string& path = file.path();
  for (const char* key : {"input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels"})
    if (!file.has(key)) bad(path, cat("missing dataset '", key, "': not an MLPerf BERT shard"));
  if (file.has("packed_input_len")) {
    if (!file.has("packed_masked_lm_len")) bad(path, "missing dataset 'packed_masked_lm_len' of the packed layout");
    return ShardLayout::PACKED;
  }
  const h5::DatasetInfo ids = file.info("input_ids");
  if (ids.vlen) return ShardLayout::VARLENGTH;
  if (!file.has("input_mask")) bad(path, "missing dataset 'input_mask' of the fixed-length layout");
  return ShardLayout::FIXED;
}

// Shape checks that name the dataset.
void expect_rows(const h5::File& f, const char* key, int64_t rows, bool vlen, int64_t width = -1) {
  const h5::DatasetInfo info = f.info(key);
  if (info.vlen != vlen)
    bad(f.path(), cat("dataset '", key, "' is ", info.vlen ? "variable-length" : "fixed-size", ", expected ",
                      vlen ? "variable-length" : "fixed-size"));
  const bool ok = width < 0 ? (info.shape.size() == 1 && info.shape[0] == rows)
                            : (info.shape.size() == 2 && info.shape[0] == rows && info.shape[1] == width);
  if (!ok) {
    std::string shape;
    for (auto d : info.shape) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    bad(f.path(), cat("dataset '", key, "' has shape [", shape, "], expected [", rows,
                      width < 0 ? "" : cat(",", width), "]"));
  }
}

// Value checks shared by all layouts, for sequence i of `s` (from row `row` of the file).
void check_sequence(const SequenceStore& s, size_t i, const ShardLimits& limits, const std::string& path, size_t row) {
  const auto where = [&](const std::string& what) { bad(path, cat("row ", row, ": ", what)); };
  const size_t n = s.length(i);
  if (n == 0) where("empty sequence");
  if (limits.max_seq_length > 0 && n > static_cast<size_t>(limits.max_seq_length))
    where(cat("sequence of ", n, " tokens is longer than the maximum ", limits.max_seq_length));
  for (int32_t id : s.tokens(i))
    if (id < 0 || (limits.vocab_size > 0 && id >= limits.vocab_size))
      where(cat("token id ", id, " is outside the vocabulary of ", limits.vocab_size));
  for (int8_t seg : s.segments(i))
    if (seg != 0 && seg != 1) where(cat("segment id ", int(seg), " is not 0 or 1"));
  if (limits.max_predictions > 0 && s.predictions(i) > static_cast<size_t>(limits.max_predictions))
    where(cat(s.predictions(i), " masked-LM predictions, more than the maximum ", limits.max_predictions));
  for (int32_t p : s.positions(i))
    if (p < 0 || static_cast<size_t>(p) >= n) where(cat("masked-LM position ", p, " is outside the sequence of ", n));
  for (int32_t id : s.labels(i))
    if (id < 0 || (limits.vocab_size > 0 && id >= limits.vocab_size))
      where(cat("masked-LM label ", id, " is outside the vocabulary of ", limits.vocab_size));
  if (s.nsp_labels[i] != 0 && s.nsp_labels[i] != 1) where(cat("next_sentence_label ", int(s.nsp_labels[i]), " is not 0 or 1"));
}

// Segment ids and next-sentence labels are 0 or 1.
int8_t small_flag(const h5::File& f, int32_t v, size_t row, const char* what) {
  if (v != 0 && v != 1) bad(f.path(), cat("row ", row, ": ", what, " ", v, " is not 0 or 1"));
  return static_cast<int8_t>(v);
}

ShardData read_fixed(const h5::File& f, const ShardLimits& limits) {
  const h5::DatasetInfo info = f.info("input_ids");
  if (info.shape.size() != 2) bad(f.path(), "dataset 'input_ids' of the fixed-length layout must be 2-D [N, S]");
  const int64_t rows = info.shape[0], width = info.shape[1];
  expect_rows(f, "input_mask", rows, false, width);
  expect_rows(f, "segment_ids", rows, false, width);
  const h5::DatasetInfo pinfo = f.info("masked_lm_positions");
  if (pinfo.vlen || pinfo.shape.size() != 2)
    bad(f.path(), "dataset 'masked_lm_positions' of the fixed-length layout must be 2-D [N, P]");
  const int64_t preds = pinfo.shape[1];
  expect_rows(f, "masked_lm_positions", rows, false, preds);
  expect_rows(f, "masked_lm_ids", rows, false, preds);
  expect_rows(f, "next_sentence_labels", rows, false);
  const auto ids = f.read<int32_t>("input_ids");
  const auto mask = f.read<int32_t>("input_mask");
  const auto seg = f.read<int32_t>("segment_ids");
  const auto pos = f.read<int32_t>("masked_lm_positions");
  const auto lab = f.read<int32_t>("masked_lm_ids");
  const auto nsp = f.read<int32_t>("next_sentence_labels");
  ShardData out;
  out.layout = ShardLayout::FIXED;
  SequenceStore& s = out.sequences;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r * width);
    int64_t len = 0;
    while (len < width && mask[base + len] == 1) ++len;
    for (int64_t t = len; t < width; ++t)
      if (mask[base + t] != 0) bad(f.path(), cat("row ", r, ": input_mask is not ones followed by zeros"));
    for (int64_t t = 0; t < len; ++t) {
      s.input_ids.push_back(ids[base + t]);
      s.segment_ids.push_back(small_flag(f, seg[base + t], static_cast<size_t>(r), "segment id"));
    }
    s.token_offsets.push_back(s.input_ids.size());
    // Padding slots hold position 0 ([CLS] is never a prediction): the real ones come first.
    const size_t pbase = static_cast<size_t>(r * preds);
    for (int64_t k = 0; k < preds && pos[pbase + k] != 0; ++k) {
      s.mlm_positions.push_back(pos[pbase + k]);
      s.mlm_ids.push_back(lab[pbase + k]);
    }
    s.mlm_offsets.push_back(s.mlm_positions.size());
    s.nsp_labels.push_back(small_flag(f, nsp[r], static_cast<size_t>(r), "next_sentence_label"));
    check_sequence(s, s.size() - 1, limits, f.path(), static_cast<size_t>(r));
    out.row_offsets.push_back(s.size());
  }
  return out;
}

template <typename T>
void same_row_sizes(const h5::File& f, const h5::Vlen<T>& a, const char* a_key, const h5::Vlen<int32_t>& b,
                    const char* b_key) {
  for (size_t r = 0; r < a.rows(); ++r)
    if (a.row_size(r) != b.row_size(r))
      bad(f.path(), cat("row ", r, ": '", a_key, "' has ", a.row_size(r), " entries but '", b_key, "' has ", b.row_size(r)));
}

ShardData read_varlength(const h5::File& f, const ShardLimits& limits) {
  const h5::DatasetInfo info = f.info("input_ids");
  if (info.shape.size() != 1) bad(f.path(), "dataset 'input_ids' of the variable-length layout must be 1-D");
  const int64_t rows = info.shape[0];
  for (const char* key : {"segment_ids", "masked_lm_positions", "masked_lm_ids"}) expect_rows(f, key, rows, true);
  expect_rows(f, "next_sentence_labels", rows, false);
  const auto ids = f.read_vlen<int32_t>("input_ids");
  const auto seg = f.read_vlen<int32_t>("segment_ids");
  const auto pos = f.read_vlen<int32_t>("masked_lm_positions");
  const auto lab = f.read_vlen<int32_t>("masked_lm_ids");
  const auto nsp = f.read<int32_t>("next_sentence_labels");
  same_row_sizes(f, seg, "segment_ids", ids, "input_ids");
  same_row_sizes(f, lab, "masked_lm_ids", pos, "masked_lm_positions");
  ShardData out;
  out.layout = ShardLayout::VARLENGTH;
  SequenceStore& s = out.sequences;
  s.input_ids = ids.values;
  s.token_offsets = ids.offsets;
  s.segment_ids.reserve(seg.values.size());
  for (size_t r = 0; r < seg.rows(); ++r)
    for (size_t t = 0; t < seg.row_size(r); ++t) s.segment_ids.push_back(small_flag(f, seg.row(r)[t], r, "segment id"));
  s.mlm_positions = pos.values;
  s.mlm_ids = lab.values;
  s.mlm_offsets = pos.offsets;
  for (size_t r = 0; r < nsp.size(); ++r) s.nsp_labels.push_back(small_flag(f, nsp[r], r, "next_sentence_label"));
  for (size_t r = 0; r < s.size(); ++r) {
    check_sequence(s, r, limits, f.path(), r);
    out.row_offsets.push_back(r + 1);
  }
  return out;
}

ShardData read_packed(const h5::File& f, const ShardLimits& limits) {
  const h5::DatasetInfo info = f.info("input_ids");
  if (info.shape.size() != 1 || !info.vlen) bad(f.path(), "dataset 'input_ids' of the packed layout must be 1-D variable-length");
  const int64_t rows = info.shape[0];
  for (const char* key : {"segment_ids", "packed_input_len", "masked_lm_positions", "masked_lm_ids",
                          "packed_masked_lm_len", "next_sentence_labels"})
    expect_rows(f, key, rows, true);
  const auto ids = f.read_vlen<int32_t>("input_ids");
  const auto seg = f.read_vlen<int32_t>("segment_ids");
  const auto lens = f.read_vlen<int32_t>("packed_input_len");
  const auto pos = f.read_vlen<int32_t>("masked_lm_positions");
  const auto lab = f.read_vlen<int32_t>("masked_lm_ids");
  const auto mlm_lens = f.read_vlen<int32_t>("packed_masked_lm_len");
  const auto nsp = f.read_vlen<int32_t>("next_sentence_labels");
  same_row_sizes(f, seg, "segment_ids", ids, "input_ids");
  same_row_sizes(f, lab, "masked_lm_ids", pos, "masked_lm_positions");
  same_row_sizes(f, mlm_lens, "packed_masked_lm_len", lens, "packed_input_len");
  same_row_sizes(f, nsp, "next_sentence_labels", lens, "packed_input_len");
  ShardData out;
  out.layout = ShardLayout::PACKED;
  SequenceStore& s = out.sequences;
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    const auto fail = [&](const std::string& what) { bad(f.path(), cat("row ", r, ": ", what)); };
    const size_t k = lens.row_size(r);
    if (k == 0) fail("a packed row with no sequences");
    int64_t total = 0, total_preds = 0;
    for (size_t j = 0; j < k; ++j) {
      if (lens.row(r)[j] <= 0) fail(cat("packed_input_len ", lens.row(r)[j], " is not positive"));
      if (mlm_lens.row(r)[j] < 0) fail(cat("packed_masked_lm_len ", mlm_lens.row(r)[j], " is negative"));
      total += lens.row(r)[j];
      total_preds += mlm_lens.row(r)[j];
    }
    if (total != static_cast<int64_t>(ids.row_size(r)))
      fail(cat("packed_input_len adds up to ", total, " but the row has ", ids.row_size(r), " tokens"));
    if (total_preds != static_cast<int64_t>(pos.row_size(r)))
      fail(cat("packed_masked_lm_len adds up to ", total_preds, " but the row has ", pos.row_size(r), " predictions"));
    if (limits.max_seq_length > 0 && total > limits.max_seq_length)
      fail(cat("packed row of ", total, " tokens is longer than the maximum ", limits.max_seq_length));
    size_t start = 0, pstart = 0;
    for (size_t j = 0; j < k; ++j) {
      const size_t len = static_cast<size_t>(lens.row(r)[j]), np = static_cast<size_t>(mlm_lens.row(r)[j]);
      for (size_t t = 0; t < len; ++t) {
        s.input_ids.push_back(ids.row(r)[start + t]);
        s.segment_ids.push_back(small_flag(f, seg.row(r)[start + t], r, "segment id"));
      }
      s.token_offsets.push_back(s.input_ids.size());
      // Stored positions count from the row's start; ours count from the sequence's.
      for (size_t q = 0; q < np; ++q) {
        const int64_t p = static_cast<int64_t>(pos.row(r)[pstart + q]) - static_cast<int64_t>(start);
        if (p < 0 || p >= static_cast<int64_t>(len))
          fail(cat("masked-LM position ", pos.row(r)[pstart + q], " is outside its sequence [", start, ", ", start + len, ")"));
        s.mlm_positions.push_back(static_cast<int32_t>(p));
        s.mlm_ids.push_back(lab.row(r)[pstart + q]);
      }
      s.mlm_offsets.push_back(s.mlm_positions.size());
      s.nsp_labels.push_back(small_flag(f, nsp.row(r)[j], r, "next_sentence_label"));
      check_sequence(s, s.size() - 1, limits, f.path(), r);
      start += len;
      pstart += np;
    }
    out.row_offsets.push_back(s.size());
  }
  return out;
}

void require_int16(const std::string& path, int64_t value, const char* what) {
  if (value < -32768 || value > 32767)
    throw_input(path, cat(what, " ", value, " does not fit the layout's int16 type"));
}

}  // namespace

ShardLayout detect_layout(const std::string& path) { return detect(h5::File::open(path)); }

ShardData read_shard(const std::string& path, const ShardLimits& limits) {
  const h5::File file = h5::File::open(path);
  switch (detect(file)) {
    case ShardLayout::FIXED: return read_fixed(file, limits);
    case ShardLayout::VARLENGTH: return read_varlength(file, limits);
    case ShardLayout::PACKED: return read_packed(file, limits);
  }
  BERT_CHECK(false, "unknown layout");
}

ShardCounts count_shard(const std::string& path) {
  const h5::File file = h5::File::open(path);
  ShardCounts c{detect(file)};
  const h5::DatasetInfo ids = file.info("input_ids");
  c.rows = ids.shape.empty() ? 0 : ids.shape[0];
  if (c.layout == ShardLayout::PACKED) {
    expect_rows(file, "next_sentence_labels", c.rows, true);
    c.sequences = static_cast<int64_t>(file.read_vlen<int32_t>("next_sentence_labels").values.size());
  } else {
    c.sequences = c.rows;
  }
  return c;
}

// The identity when `order` is empty.
std::vector<size_t> order_or_all(const SequenceStore& s, const std::vector<size_t>& order) {
  if (!order.empty()) return order;
  std::vector<size_t> all(s.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

void write_fixed(const std::string& path, const SequenceStore& s, int max_seq_length, int max_predictions,
                 const std::vector<size_t>& order_in) {
  const std::vector<size_t> order = order_or_all(s, order_in);
  const size_t n = order.size(), S = static_cast<size_t>(max_seq_length), P = static_cast<size_t>(max_predictions);
  require_int16(path, max_seq_length - 1, "position");
  std::vector<int16_t> ids(n * S, 0), pos(n * P, 0), lab(n * P, 0);
  std::vector<int8_t> mask(n * S, 0), seg(n * S, 0), nsp(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const size_t q = order[i];
    if (s.length(q) > S) throw_input(path, cat("instance ", i, " has ", s.length(q), " tokens, more than ", S));
    if (s.predictions(q) > P) throw_input(path, cat("instance ", i, " has more than ", P, " predictions"));
    const auto t = s.tokens(q);
    const auto g = s.segments(q);
    for (size_t j = 0; j < t.size(); ++j) {
      require_int16(path, t[j], "token id");
      ids[i * S + j] = static_cast<int16_t>(t[j]);
      mask[i * S + j] = 1;
      seg[i * S + j] = g[j];
    }
    const auto p = s.positions(q);
    const auto l = s.labels(q);
    for (size_t j = 0; j < p.size(); ++j) {
      require_int16(path, l[j], "token id");
      pos[i * P + j] = static_cast<int16_t>(p[j]);
      lab[i * P + j] = static_cast<int16_t>(l[j]);
    }
    nsp[i] = s.nsp_labels[q];
  }
  h5::File f = h5::File::create(path);
  const int64_t N = static_cast<int64_t>(n);
  f.write("input_ids", ids, {N, max_seq_length});
  f.write("input_mask", mask, {N, max_seq_length});
  f.write("segment_ids", seg, {N, max_seq_length});
  f.write("masked_lm_positions", pos, {N, max_predictions});
  f.write("masked_lm_ids", lab, {N, max_predictions});
  f.write("next_sentence_labels", nsp, {N});
  f.commit();
}

// Appends `v` to a vlen row set as int16, checking the range once per row.
void append_int16(h5::Vlen<int16_t>& rows, std::span<const int32_t> v, const std::string& path, const char* what) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  if (!v.empty()) {
    require_int16(path, *lo, what);
    require_int16(path, *hi, what);
  }
  const size_t at = rows.values.size();
  rows.values.resize(at + v.size());
  std::copy(v.begin(), v.end(), rows.values.begin() + static_cast<std::ptrdiff_t>(at));
  rows.offsets.push_back(rows.values.size());
}

void write_varlength(const std::string& path, const SequenceStore& s, const std::vector<size_t>& order_in) {
  const std::vector<size_t> order = order_or_all(s, order_in);
  h5::Vlen<int16_t> ids, pos, lab;
  h5::Vlen<int8_t> seg;
  std::vector<int8_t> nsp;
  ids.values.reserve(s.input_ids.size());
  seg.values.reserve(s.input_ids.size());
  pos.values.reserve(s.mlm_positions.size());
  lab.values.reserve(s.mlm_positions.size());
  for (auto* v : {&ids.offsets, &pos.offsets, &lab.offsets}) v->reserve(order.size() + 1);
  seg.offsets.reserve(order.size() + 1);
  nsp.reserve(order.size());
  for (size_t i : order) {
    append_int16(ids, s.tokens(i), path, "token id");
    seg.append(s.segments(i).data(), s.length(i));
    append_int16(pos, s.positions(i), path, "position");
    append_int16(lab, s.labels(i), path, "token id");
    nsp.push_back(s.nsp_labels[i]);
  }
  h5::File f = h5::File::create(path);
  f.write_vlen("input_ids", ids);
  f.write_vlen("segment_ids", seg);
  f.write_vlen("masked_lm_positions", pos);
  f.write_vlen("masked_lm_ids", lab);
  f.write("next_sentence_labels", nsp, {static_cast<int64_t>(nsp.size())});
  f.commit();
}

void write_packed(const std::string& path, const SequenceStore& s, int seq_len, const PackingLimits& limits,
                  const std::vector<size_t>& order_in) {
  const std::vector<size_t> order = order_or_all(s, order_in);
  std::vector<uint32_t> tokens, predictions;
  for (size_t i : order) {
    tokens.push_back(static_cast<uint32_t>(s.length(i)));
    predictions.push_back(static_cast<uint32_t>(s.predictions(i)));
  }
  PackedRows rows;
  pack_sequences(tokens, predictions, seq_len, limits, rows);
  h5::Vlen<int16_t> ids, lens, pos, lab, mlm_lens;
  h5::Vlen<int8_t> seg, nsp;
  std::vector<int32_t> row_ids, row_positions, row_labels, row_lens, row_mlm_lens;
  std::vector<int8_t> row_seg, row_nsp;
  for (size_t r = 0; r < rows.rows(); ++r) {
    for (auto* v : {&row_ids, &row_positions, &row_labels, &row_lens, &row_mlm_lens}) v->clear();
    row_seg.clear();
    row_nsp.clear();
    // One row's values, sequence after sequence; positions count from the row's first token.
    for (size_t k = rows.row_starts[r]; k < rows.row_starts[r + 1]; ++k) {
      const size_t q = order[rows.members[k]];
      const auto start = static_cast<int32_t>(row_ids.size());
      for (int32_t p : s.positions(q)) row_positions.push_back(start + p);
      row_ids.insert(row_ids.end(), s.tokens(q).begin(), s.tokens(q).end());
      row_seg.insert(row_seg.end(), s.segments(q).begin(), s.segments(q).end());
      row_labels.insert(row_labels.end(), s.labels(q).begin(), s.labels(q).end());
      row_lens.push_back(static_cast<int32_t>(s.length(q)));
      row_mlm_lens.push_back(static_cast<int32_t>(s.predictions(q)));
      row_nsp.push_back(s.nsp_labels[q]);
    }
    append_int16(ids, row_ids, path, "token id");
    seg.append(row_seg.data(), row_seg.size());
    append_int16(lens, row_lens, path, "sequence length");
    append_int16(pos, row_positions, path, "position");
    append_int16(lab, row_labels, path, "token id");
    append_int16(mlm_lens, row_mlm_lens, path, "prediction count");
    nsp.append(row_nsp.data(), row_nsp.size());
  }
  h5::File f = h5::File::create(path);
  f.write_vlen("input_ids", ids);
  f.write_vlen("segment_ids", seg);
  f.write_vlen("packed_input_len", lens);
  f.write_vlen("masked_lm_positions", pos);
  f.write_vlen("masked_lm_ids", lab);
  f.write_vlen("packed_masked_lm_len", mlm_lens);
  f.write_vlen("next_sentence_labels", nsp);
  f.commit();
}

std::string hdf5_md5(const std::string& path) {
  const h5::File f = h5::File::open(path);
  if (!f.has("input_ids")) throw_input(path, "missing dataset 'input_ids'");
  const h5::DatasetInfo info = f.info("input_ids");
  std::vector<std::string> rows;
  if (info.vlen) {
    const auto ids = f.read_vlen<int32_t>("input_ids");
    for (size_t r = 0; r < ids.rows(); ++r) rows.push_back(python_list_md5(ids.row(r), ids.row_size(r)));
  } else {
    if (info.shape.size() != 2) throw_input(path, "dataset 'input_ids' is neither variable-length nor 2-D");
    const auto ids = f.read<int32_t>("input_ids");
    const size_t width = static_cast<size_t>(info.shape[1]);
    for (size_t r = 0; r < static_cast<size_t>(info.shape[0]); ++r) rows.push_back(python_list_md5(ids.data() + r * width, width));
  }
  return python_str_list_md5(rows);
}

std::string hdf5_md5(const SequenceStore& s, bool fixed_layout, int max_seq_length, const std::vector<size_t>& order) {
  std::vector<std::string> rows;
  rows.reserve(s.size());
  std::vector<int32_t> padded;
  for (size_t i : order_or_all(s, order)) {
    const auto t = s.tokens(i);
    if (fixed_layout) {
      padded.assign(t.begin(), t.end());
      padded.resize(static_cast<size_t>(max_seq_length), 0);
      rows.push_back(python_list_md5(padded.data(), padded.size()));
    } else {
      rows.push_back(python_list_md5(t.data(), t.size()));
    }
  }
  return python_str_list_md5(rows);
}

}  // namespace bertperf
