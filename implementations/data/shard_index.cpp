// The length index of a shard and reading its rows through it (shard_index.h).
#include "data/shard_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/errors.h"
#include "core/hdf5.h"
#include "data/batch.h"

namespace bertperf {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "bertperf shard length index 1";
constexpr size_t kVlenHeader = 16;

// What a row of a column holds, by which the reader knows how many values to read.
enum class Count { TOKENS, PREDICTIONS, SEQUENCES, ONE, MASK };

struct ColumnSpec {
  const char* key;
  Count count;
};

// The datasets of each layout (data/layouts.h), in the order the index keeps them.
std::vector<ColumnSpec> columns_of(ShardLayout layout) {
  switch (layout) {
    case ShardLayout::FIXED:
      return {{"input_ids", Count::TOKENS}, {"input_mask", Count::MASK}, {"segment_ids", Count::TOKENS},
              {"masked_lm_positions", Count::PREDICTIONS}, {"masked_lm_ids", Count::PREDICTIONS},
              {"next_sentence_labels", Count::ONE}};
    case ShardLayout::VARLENGTH:
      return {{"input_ids", Count::TOKENS}, {"segment_ids", Count::TOKENS},
              {"masked_lm_positions", Count::PREDICTIONS}, {"masked_lm_ids", Count::PREDICTIONS},
              {"next_sentence_labels", Count::ONE}};
    case ShardLayout::PACKED:
      return {{"input_ids", Count::TOKENS}, {"segment_ids", Count::TOKENS},
              {"packed_input_len", Count::SEQUENCES}, {"masked_lm_positions", Count::PREDICTIONS},
              {"masked_lm_ids", Count::PREDICTIONS}, {"packed_masked_lm_len", Count::SEQUENCES},
              {"next_sentence_labels", Count::SEQUENCES}};
  }
  return {};
}

struct FileStamp {
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
};

FileStamp stamp_of(const std::string& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec) throw_input(path, "no such file, or it cannot be read");
  const auto time = fs::last_write_time(path, ec);
  if (ec) throw_input(path, "cannot be read");
  return {bytes, std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count()};
}

bool is_signed(h5::ElementType t) {
  return t == h5::ElementType::I8 || t == h5::ElementType::I16 || t == h5::ElementType::I32 ||
         t == h5::ElementType::I64;
}

int element_bytes(h5::ElementType t) {
  switch (t) {
    case h5::ElementType::I8: case h5::ElementType::U8: return 1;
    case h5::ElementType::I16: case h5::ElementType::U16: return 2;
    case h5::ElementType::I32: case h5::ElementType::U32: return 4;
    case h5::ElementType::I64: case h5::ElementType::U64: return 8;
    default: return 0;
  }
}

// n little-endian integers of `bytes` bytes at p into int32; false when one does not fit.
bool widen(const unsigned char* p, size_t n, int bytes, bool is_signed, int32_t* out) {
  for (size_t i = 0; i < n; ++i, p += bytes) {
    uint64_t u = 0;
    for (int b = bytes; b-- > 0;) u = (u << 8) | p[b];
    int64_t v = static_cast<int64_t>(u);
    if (is_signed && bytes < 8 && (u >> (8 * bytes - 1)) != 0) v -= int64_t{1} << (8 * bytes);
    if (!is_signed && bytes == 8 && (u >> 63) != 0) return false;
    if (v < INT32_MIN || v > INT32_MAX) return false;
    out[i] = static_cast<int32_t>(v);
  }
  return true;
}

}  // namespace

struct ShardIndex::Column {
  std::string key;
  Count count = Count::ONE;
  bool vlen = false;
  int element_bytes = 0;
  bool is_signed = true;
  int64_t offset = 0;  // fixed-size: element 0's place in the file
  int64_t width = 1;   // fixed-size: elements per row
};

ShardIndex::ShardIndex() = default;
ShardIndex::~ShardIndex() = default;

std::string ShardIndex::path_of(const std::string& shard) { return shard + ".lengths"; }

std::shared_ptr<ShardIndex> ShardIndex::build(const std::string& shard) {
  auto index = std::shared_ptr<ShardIndex>(new ShardIndex());
  ShardIndex& x = *index;
  x.shard_ = shard;
  const FileStamp stamp = stamp_of(shard);
  x.shard_bytes_ = stamp.bytes;
  x.shard_mtime_ns_ = stamp.mtime_ns;
  // Every record checked as the reader checks it (the limits of a run are checked against the lengths later).
  const ShardData data = read_shard(shard, ShardLimits{0, 0, 0});
  x.layout_ = data.layout;
  x.sequences_ = static_cast<int64_t>(data.sequences.size());
  const size_t rows = data.rows();
  x.tokens_.resize(rows);
  x.predictions_.resize(rows);
  x.row_sequences_.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    size_t tokens = 0, predictions = 0;
    for (size_t q = data.row_offsets[r]; q < data.row_offsets[r + 1]; ++q) {
      tokens += data.sequences.length(q);
      predictions += data.sequences.predictions(q);
    }
    const size_t sequences = data.row_offsets[r + 1] - data.row_offsets[r];
    if (tokens > 32767 || predictions > 32767 || sequences > 127)
      throw_input(shard, cat("row ", r, ": ", tokens, " tokens, ", predictions, " predictions and ", sequences,
                             " sequences are more than a row may hold"));
    for (size_t q = data.row_offsets[r]; q < data.row_offsets[r + 1]; ++q) {
      for (int32_t id : data.sequences.tokens(q))
        if (id > x.largest_token_.value) x.largest_token_ = {id, static_cast<int64_t>(r)};
      for (int32_t id : data.sequences.labels(q))
        if (id > x.largest_label_.value) x.largest_label_ = {id, static_cast<int64_t>(r)};
    }
    x.tokens_[r] = static_cast<int16_t>(tokens);
    x.predictions_[r] = static_cast<int16_t>(predictions);
    x.row_sequences_[r] = static_cast<int8_t>(sequences);
  }
  // Where every column's values lie.
  const h5::File file = h5::File::open(shard);
  std::vector<const std::vector<uint64_t>*> vlen_places;
  std::vector<h5::ValuePlaces> places;
  places.reserve(8);
  x.direct_ = true;
  for (const ColumnSpec& spec : columns_of(x.layout_)) {
    Column c;
    c.key = spec.key;
    c.count = spec.count;
    const h5::DatasetInfo info = file.info(spec.key);
    c.vlen = info.vlen;
    c.element_bytes = element_bytes(info.type);
    c.is_signed = is_signed(info.type);
    if (!c.vlen && info.shape.size() == 2) c.width = info.shape[1];
    places.push_back(file.value_places(spec.key));
    const h5::ValuePlaces& p = places.back();
    // Plain reads know the usual heap object header only (16 bytes: 8-byte lengths, what HDF5 writes by default).
    x.direct_ = x.direct_ && p.direct && c.element_bytes > 0 &&
                (!c.vlen || (p.vlen_header == kVlenHeader && p.vlen_size_bytes == 8));
    c.offset = static_cast<int64_t>(p.offset);
    if (c.vlen) vlen_places.push_back(&p.row_offsets);
    x.columns_.push_back(std::move(c));
  }
  if (x.direct_ && !vlen_places.empty()) {
    const size_t V = vlen_places.size();
    x.places_.resize(rows * V);
    for (size_t v = 0; v < V; ++v)
      for (size_t r = 0; r < rows; ++r) x.places_[r * V + v] = static_cast<int64_t>((*vlen_places[v])[r]);
  }
  return index;
}

void ShardIndex::save(const std::string& index_path) const {
  h5::File f = h5::File::create(index_path);
  const auto rows = static_cast<int64_t>(this->rows());
  f.write("tokens", tokens_, {rows});
  f.write("predictions", predictions_, {rows});
  f.write("sequences", row_sequences_, {rows});
  std::vector<int64_t> offsets, widths;
  std::vector<int8_t> bytes, signs;
  for (const Column& c : columns_) {
    offsets.push_back(c.offset);
    widths.push_back(c.width);
    bytes.push_back(static_cast<int8_t>(c.element_bytes));
    signs.push_back(c.is_signed ? 1 : 0);
  }
  const auto C = static_cast<int64_t>(columns_.size());
  f.write("column_offsets", offsets, {C});
  f.write("column_widths", widths, {C});
  f.write("column_bytes", bytes, {C});
  f.write("column_signed", signs, {C});
  if (!places_.empty()) f.write("places", places_, {rows, static_cast<int64_t>(places_.size()) / rows});
  f.set_attr("", "format", kFormat);
  f.set_attr("", "layout", layout_name(layout_));
  f.set_attr("", "shard_bytes", static_cast<int64_t>(shard_bytes_));
  f.set_attr("", "shard_mtime_ns", shard_mtime_ns_);
  f.set_attr("", "sequences", sequences_);
  f.set_attr("", "direct", int64_t{direct_ ? 1 : 0});
  f.set_attr("", "largest_token", largest_token_.value);
  f.set_attr("", "largest_token_row", largest_token_.row);
  f.set_attr("", "largest_label", largest_label_.value);
  f.set_attr("", "largest_label_row", largest_label_.row);
  f.commit();
}

std::shared_ptr<ShardIndex> ShardIndex::read(const std::string& shard, const std::string& index_path) {
  auto index = std::shared_ptr<ShardIndex>(new ShardIndex());
  ShardIndex& x = *index;
  x.shard_ = shard;
  const h5::File f = h5::File::open(index_path);
  const auto bad = [&](const std::string& what) {
    throw_input(index_path, cat("is not the length index of ", shard, ": ", what,
                                " (remove it, and it is built again on the next open)"));
  };
  if (!f.has_attr("", "format") || f.attr_string("", "format") != kFormat) bad("not a bertperf length index");
  x.layout_ = parse_layout(f.attr_string("", "layout"), index_path);
  x.shard_bytes_ = static_cast<uint64_t>(f.attr_int("", "shard_bytes"));
  x.shard_mtime_ns_ = f.attr_int("", "shard_mtime_ns");
  x.sequences_ = f.attr_int("", "sequences");
  x.direct_ = f.attr_int("", "direct") != 0;
  x.largest_token_ = {f.attr_int("", "largest_token"), f.attr_int("", "largest_token_row")};
  x.largest_label_ = {f.attr_int("", "largest_label"), f.attr_int("", "largest_label_row")};
  x.tokens_ = f.read<int16_t>("tokens");
  x.predictions_ = f.read<int16_t>("predictions");
  x.row_sequences_ = f.read<int8_t>("sequences");
  const size_t rows = x.tokens_.size();
  if (x.predictions_.size() != rows || x.row_sequences_.size() != rows) bad("its per-row lengths differ in count");
  int64_t sequences = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (x.tokens_[r] <= 0 || x.predictions_[r] < 0 || x.row_sequences_[r] <= 0 ||
        (x.layout_ != ShardLayout::PACKED && x.row_sequences_[r] != 1))
      bad(cat("row ", r, " has impossible lengths"));
    sequences += x.row_sequences_[r];
  }
  if (sequences != x.sequences_) bad("its rows' sequences do not add up to its count");
  const auto offsets = f.read<int64_t>("column_offsets");
  const auto widths = f.read<int64_t>("column_widths");
  const auto bytes = f.read<int8_t>("column_bytes");
  const auto signs = f.read<int8_t>("column_signed");
  const std::vector<ColumnSpec> specs = columns_of(x.layout_);
  if (offsets.size() != specs.size() || widths.size() != specs.size() || bytes.size() != specs.size() ||
      signs.size() != specs.size())
    bad("its columns are not the layout's");
  size_t vlen_columns = 0;
  for (size_t c = 0; c < specs.size(); ++c) {
    Column col;
    col.key = specs[c].key;
    col.count = specs[c].count;
    col.vlen = x.layout_ == ShardLayout::PACKED ||
               (x.layout_ == ShardLayout::VARLENGTH && specs[c].count != Count::ONE);
    col.offset = offsets[c];
    col.width = widths[c];
    col.element_bytes = bytes[c];
    col.is_signed = signs[c] != 0;
    if (col.offset < 0 || col.width < 1 ||
        (col.element_bytes != 1 && col.element_bytes != 2 && col.element_bytes != 4 && col.element_bytes != 8))
      bad(cat("column '", col.key, "' is described impossibly"));
    vlen_columns += col.vlen;
    x.columns_.push_back(std::move(col));
  }
  x.bytes_ = rows * 5;
  if (x.direct_ && vlen_columns > 0) {
    const h5::DatasetInfo info = f.info("places");
    if (info.shape != std::vector<int64_t>{static_cast<int64_t>(rows), static_cast<int64_t>(vlen_columns)})
      bad("its places are not one per row and column");
    const h5::ValuePlaces places = f.value_places("places");
    if (places.direct && element_bytes(places.type) == 8) {
      x.places_file_ = index_path;
      x.places_offset_ = places.offset;
    } else {
      x.places_ = f.read<int64_t>("places");
      x.bytes_ += x.places_.size() * 8;
    }
  }
  return index;
}

bool ShardIndex::same_rows(const ShardIndex& o) const {
  if (layout_ != o.layout_ || tokens_ != o.tokens_ || predictions_ != o.predictions_ ||
      largest_token_.value != o.largest_token_.value || largest_label_.value != o.largest_label_.value ||
      row_sequences_ != o.row_sequences_ || direct_ != o.direct_ || columns_.size() != o.columns_.size())
    return false;
  for (size_t c = 0; c < columns_.size(); ++c)
    if (columns_[c].offset != o.columns_[c].offset || columns_[c].width != o.columns_[c].width ||
        columns_[c].element_bytes != o.columns_[c].element_bytes)
      return false;
  // Where the rows lie: both in memory, or this one's read from its file.
  if (!places_.empty() && !o.places_.empty()) return places_ == o.places_;
  const ShardIndex& in_file = places_.empty() ? *this : o;
  const ShardIndex& in_memory = places_.empty() ? o : *this;
  if (in_file.places_file_.empty()) return in_memory.places_.empty();
  const h5::File f = h5::File::open(in_file.places_file_);
  return f.read<int64_t>("places") == in_memory.places_;
}

std::shared_ptr<const ShardIndex> ShardIndex::open(const std::string& shard) {
  const FileStamp stamp = stamp_of(shard);
  const std::string index_path = path_of(shard);
  if (fs::exists(index_path)) {
    auto index = read(shard, index_path);
    if (index->shard_bytes_ != stamp.bytes)
      throw_input(shard, cat("changed after its length index ", index_path, " was written (", stamp.bytes,
                             " bytes, the index says ", index->shard_bytes_,
                             "): remove the index to build it again from the shard as it is now"));
    if (index->shard_mtime_ns_ == stamp.mtime_ns) return index;
    // Touched or copied since: the same rows in the same places, or a changed shard.
    auto fresh = build(shard);
    if (!fresh->same_rows(*index))
      throw_input(shard, cat("changed after its length index ", index_path,
                             " was written (its rows differ from the index's): remove the index to build it again "
                             "from the shard as it is now"));
    return fresh;
  }
  auto fresh = build(shard);
  try {
    fresh->save(index_path);
  } catch (const std::exception& e) {
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "bertperf: cannot write the length index beside %s (%s): indexes are kept in memory for "
                           "this run (bertperf data --index writes them where the shards are)\n",
                   shard.c_str(), e.what());
    });
  }
  return fresh;
}

void ShardIndex::write(const std::string& shard) { build(shard)->save(path_of(shard)); }

// ---- rows ---------------------------------------------------------------------------------------

struct ShardRows::Impl {
  int shard_fd = -1, index_fd = -1;
  std::unique_ptr<h5::File> file;              // a shard read through the library (not direct)
  std::vector<int> slot;                       // per column: its place among the row's vlen places (-1: fixed)
  size_t vlen_columns = 0;
  std::vector<unsigned char> bytes;            // one column's raw bytes of a row
  std::vector<int64_t> places;                 // the row's vlen places
  std::vector<int32_t> lens, mlm_lens, nsp, values;  // a packed row's lengths and labels; a library read's values

  ~Impl() {
    if (shard_fd >= 0) ::close(shard_fd);
    if (index_fd >= 0) ::close(index_fd);
  }
};

ShardRows::ShardRows(std::shared_ptr<const ShardIndex> index, Limits limits)
    : index_(std::move(index)), limits_(limits), impl_(std::make_unique<Impl>()) {
  const ShardIndex& x = *index_;
  Impl& m = *impl_;
  for (const ShardIndex::Column& c : x.columns_) m.slot.push_back(c.vlen ? static_cast<int>(m.vlen_columns++) : -1);
  if (x.direct_) {
    m.shard_fd = ::open(x.shard_.c_str(), O_RDONLY | O_CLOEXEC);
    if (m.shard_fd < 0) throw_input(x.shard_, "cannot be opened for reading");
    if (!x.places_file_.empty()) {
      m.index_fd = ::open(x.places_file_.c_str(), O_RDONLY | O_CLOEXEC);
      if (m.index_fd < 0) throw_input(x.places_file_, "cannot be opened for reading");
    }
  } else {
    m.file = std::make_unique<h5::File>(h5::File::open(x.shard_));
  }
}

ShardRows::~ShardRows() = default;

namespace {

void read_at(int fd, void* dst, size_t n, uint64_t at, const std::string& file) {
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd, p + done, n - done, static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw_input(file, cat("cannot be read at byte ", at + done, got == 0 ? " (past its end)" : ""));
    done += static_cast<size_t>(got);
  }
}

}  // namespace

namespace {

// A row whose values are not what the index says: the index is not this shard's, or the shard changed under it.
std::string disagrees(const std::string& what) {
  return what + ": the shard and its length index disagree (remove the index to build it again from the shard)";
}

}  // namespace

void ShardRows::column(size_t c, size_t row, size_t first, size_t count, int32_t* dst) {
  const ShardIndex& x = *index_;
  const ShardIndex::Column& col = x.columns_[c];
  Impl& m = *impl_;
  const auto fail = [&](const std::string& what) { throw_input(x.shard_, cat("row ", row, ": ", what)); };
  if (!x.direct_) {  // through the library
    if (col.vlen) {
      const auto v = m.file->read_vlen<int32_t>(col.key, static_cast<int64_t>(row), 1);
      if (v.values.size() != first + count && first == 0)
        fail(disagrees(cat("'", col.key, "' holds ", v.values.size(), " values, the index ", count)));
      std::copy_n(v.values.begin() + static_cast<std::ptrdiff_t>(first), count, dst);
    } else {
      m.values.resize(static_cast<size_t>(col.width));
      m.file->read_rows<int32_t>(col.key, static_cast<int64_t>(row), 1, m.values.data());
      std::copy_n(m.values.begin() + static_cast<std::ptrdiff_t>(first), count, dst);
    }
    return;
  }
  const size_t eb = static_cast<size_t>(col.element_bytes);
  const unsigned char* values = nullptr;
  if (col.vlen) {
    const int64_t place = m.places[static_cast<size_t>(m.slot[c])];
    if (count == 0) {
      if (place != 0) fail(disagrees(cat("'", col.key, "' holds values, the index none")));
      return;
    }
    if (place < static_cast<int64_t>(kVlenHeader)) fail(disagrees(cat("'", col.key, "' holds none, the index ", count)));
    // The heap object's header ends in its byte size: the row holds what the index says, or the shard changed.
    m.bytes.resize(kVlenHeader + count * eb);
    read_at(m.shard_fd, m.bytes.data(), m.bytes.size(), static_cast<uint64_t>(place) - kVlenHeader, x.shard_);
    uint64_t stored = 0;
    for (int b = 8; b-- > 0;) stored = (stored << 8) | m.bytes[8 + static_cast<size_t>(b)];
    if (stored != count * eb) fail(disagrees(cat("'", col.key, "' holds ", stored / eb, " values, the index ", count)));
    values = m.bytes.data() + kVlenHeader;
  } else {
    m.bytes.resize(count * eb);
    const uint64_t at = static_cast<uint64_t>(col.offset) + (row * static_cast<uint64_t>(col.width) + first) * eb;
    read_at(m.shard_fd, m.bytes.data(), m.bytes.size(), at, x.shard_);
    values = m.bytes.data();
  }
  shard_bytes_read_ += m.bytes.size();
  if (!widen(values, count, col.element_bytes, col.is_signed, dst)) fail(cat("a value of '", col.key, "' does not fit int32"));
}

void ShardRows::read(size_t row, BatchWriter& out) {
  const ShardIndex& x = *index_;
  Impl& m = *impl_;
  const auto fail = [&](const std::string& what) { throw_input(x.shard_, cat("row ", row, ": ", what)); };
  if (row >= x.rows()) fail(cat("is past the shard's ", x.rows(), " rows"));
  const int tokens = x.tokens_[row], predictions = x.predictions_[row], sequences = x.row_sequences_[row];
  for (size_t c = 0; c < x.columns_.size(); ++c) {
    const ShardIndex::Column& col = x.columns_[c];
    const int values = col.count == Count::TOKENS        ? tokens
                       : col.count == Count::PREDICTIONS ? predictions
                       : col.count == Count::SEQUENCES   ? sequences
                       : col.count == Count::ONE         ? 1
                                                         : 0;  // the mask: not read for its values
    value_bytes_read_ += static_cast<uint64_t>(values) * static_cast<uint64_t>(col.element_bytes);
  }
  if (x.direct_ && m.vlen_columns > 0) {  // the row's vlen places: in memory, or one read of the index file
    m.places.resize(m.vlen_columns);
    if (!x.places_.empty()) {
      std::memcpy(m.places.data(), x.places_.data() + row * m.vlen_columns, m.vlen_columns * 8);
    } else {
      read_at(m.index_fd, m.places.data(), m.vlen_columns * 8, x.places_offset_ + row * m.vlen_columns * 8,
              x.places_file_);
      index_bytes_read_ += m.vlen_columns * 8;
    }
  }
  const int32_t vocab = limits_.vocab_size;
  const auto check_tokens = [&](const BatchWriter::Sequence& q, int n) {
    for (int j = 0; j < n; ++j) {
      if (q.input_ids[j] < 0 || (vocab > 0 && q.input_ids[j] >= vocab))
        fail(cat("token id ", q.input_ids[j], " is outside the vocabulary of ", vocab));
      if (q.segment_ids[j] != 0 && q.segment_ids[j] != 1) fail(cat("segment id ", q.segment_ids[j], " is not 0 or 1"));
    }
  };
  const auto check_labels = [&](const BatchWriter::Sequence& q, int count) {
    for (int j = 0; j < count; ++j)
      if (q.mlm_labels[j] < 0 || (vocab > 0 && q.mlm_labels[j] >= vocab))
        fail(cat("masked-LM label ", q.mlm_labels[j], " is outside the vocabulary of ", vocab));
  };
  const auto check_nsp = [&](int32_t v) {
    if (v != 0 && v != 1) fail(cat("next_sentence_label ", v, " is not 0 or 1"));
  };
  const auto check_predictions = [&](int count) {
    if (limits_.max_predictions > 0 && count > limits_.max_predictions)
      fail(cat(count, " masked-LM predictions, more than the maximum ", limits_.max_predictions));
  };

  if (x.layout_ != ShardLayout::PACKED) {
    const bool fixed = x.layout_ == ShardLayout::FIXED;
    const size_t ids = 0, seg = fixed ? 2 : 1, pos = seg + 1, lab = seg + 2, nsp = seg + 3;
    check_predictions(predictions);
    const BatchWriter::Sequence q = out.add_sequence(tokens, predictions);
    column(ids, row, 0, static_cast<size_t>(tokens), q.input_ids);
    column(seg, row, 0, static_cast<size_t>(tokens), q.segment_ids);
    if (fixed) {
      // The mask is ones up to the index's length, then zeros; real predictions come first, then position 0.
      const auto width = static_cast<int>(x.columns_[1].width), P = static_cast<int>(x.columns_[pos].width);
      const int mask_values = tokens < width ? 2 : 1;
      m.values.resize(2);
      column(1, row, static_cast<size_t>(tokens - 1), static_cast<size_t>(mask_values), m.values.data());
      if (m.values[0] != 1 || (mask_values == 2 && m.values[1] != 0))
        fail(disagrees(cat("'input_mask' does not end at the index's ", tokens, " tokens")));
      const int position_values = predictions < P ? predictions + 1 : predictions;
      m.values.resize(static_cast<size_t>(position_values));
      column(pos, row, 0, static_cast<size_t>(position_values), m.values.data());
      if (position_values > predictions && m.values[static_cast<size_t>(predictions)] != 0)
        fail(disagrees(cat("'masked_lm_positions' holds more than the index's ", predictions, " predictions")));
      std::copy_n(m.values.begin(), predictions, q.mlm_positions);
    } else {
      column(pos, row, 0, static_cast<size_t>(predictions), q.mlm_positions);
    }
    column(lab, row, 0, static_cast<size_t>(predictions), q.mlm_labels);
    column(nsp, row, 0, 1, q.nsp_label);
    check_tokens(q, tokens);
    check_labels(q, predictions);
    check_nsp(*q.nsp_label);
    for (int j = 0; j < predictions; ++j) {
      const int32_t p = q.mlm_positions[j];
      if (p < 0 || p >= tokens) fail(cat("masked-LM position ", p, " is outside the sequence of ", tokens));
      q.mlm_positions[j] = q.first_token + p;
    }
    return;
  }

  // A packed row: its sequences' lengths and labels, then its values end to end (contiguous in the batch too).
  const auto k = static_cast<size_t>(sequences);
  m.lens.resize(k);
  m.mlm_lens.resize(k);
  m.nsp.resize(k);
  column(2, row, 0, k, m.lens.data());
  column(5, row, 0, k, m.mlm_lens.data());
  column(6, row, 0, k, m.nsp.data());
  int64_t total = 0, total_predictions = 0;
  for (size_t j = 0; j < k; ++j) {
    if (m.lens[j] <= 0) fail(cat("packed_input_len ", m.lens[j], " is not positive"));
    if (m.mlm_lens[j] < 0) fail(cat("packed_masked_lm_len ", m.mlm_lens[j], " is negative"));
    check_predictions(m.mlm_lens[j]);
    total += m.lens[j];
    total_predictions += m.mlm_lens[j];
  }
  if (total != tokens || total_predictions != predictions)
    fail(disagrees(cat("'packed_input_len' and 'packed_masked_lm_len' add up to ", total, " tokens and ",
                       total_predictions, " predictions, the index ", tokens, " and ", predictions)));
  BatchWriter::Sequence first{};
  for (size_t j = 0; j < k; ++j) {
    const BatchWriter::Sequence q = out.add_sequence(m.lens[j], m.mlm_lens[j]);
    if (j == 0) first = q;
    check_nsp(m.nsp[j]);
    *q.nsp_label = m.nsp[j];
  }
  column(0, row, 0, static_cast<size_t>(tokens), first.input_ids);
  column(1, row, 0, static_cast<size_t>(tokens), first.segment_ids);
  column(3, row, 0, static_cast<size_t>(predictions), first.mlm_positions);
  column(4, row, 0, static_cast<size_t>(predictions), first.mlm_labels);
  check_tokens(first, tokens);
  check_labels(first, predictions);
  // Stored positions count from the row's start; each must lie in its own sequence.
  int32_t start = 0, slot = 0;
  for (size_t j = 0; j < k; ++j) {
    for (int32_t e = slot + m.mlm_lens[j]; slot < e; ++slot) {
      const int32_t p = first.mlm_positions[slot];
      if (p < start || p >= start + m.lens[j])
        fail(cat("masked-LM position ", p, " is outside its sequence [", start, ", ", start + m.lens[j], ")"));
      first.mlm_positions[slot] = first.first_token + p;
    }
    start += m.lens[j];
  }
}

}  // namespace bertperf
