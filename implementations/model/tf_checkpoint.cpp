// The TensorFlow tensor-bundle reader and the TF-to-HDF5 checkpoint conversion (tf_checkpoint.h).
#include "model/tf_checkpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/files.h"
#include "model/checkpoint.h"

namespace bertperf {

static_assert(std::endian::native == std::endian::little, "tensor bytes are read as little-endian");

// ---- CRC-32C ------------------------------------------------------------------------------------

namespace {

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    table[i] = c;
  }
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

// Stored CRCs are rotated and offset so that a CRC of data that itself contains CRCs stays strong.
uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tf_dtype_name(int dtype) {
  switch (dtype) {
    case TF_FLOAT: return "float32";
    case TF_DOUBLE: return "float64";
    case TF_INT32: return "int32";
    case TF_INT64: return "int64";
    case 4: return "uint8";
    case 5: return "int16";
    case 6: return "int8";
    case 7: return "string";
    case 10: return "bool";
    case 14: return "bfloat16";
    case 19: return "float16";
    default: return cat("DataType ", dtype);
  }
}

// ---- byte decoding ------------------------------------------------------------------------------

namespace {

// A bounds-checked cursor over bytes; running off the end is the caller's "damaged" error.
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      const uint8_t b = *p++;
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    p = end;
    return 0;
  }
  uint32_t fixed32() {
    if (end - p < 4) return fail32();
    uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    return v;
  }
  uint64_t fixed64() {
    if (end - p < 8) return fail32();
    uint64_t v;
    std::memcpy(&v, p, 8);
    p += 8;
    return v;
  }
  std::string_view bytes(uint64_t n) {
    if (uint64_t(end - p) < n) {
      fail32();
      return {};
    }
    std::string_view s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
  uint32_t fail32() {
    ok = false;
    p = end;
    return 0;
  }
};

Cursor cursor(std::string_view s) {
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  return {b, b + s.size()};
}

// Protocol-buffer wire format: calls on_field(field, wire_type, cursor) for each field; the
// callback consumes the fields it knows and returns false for the rest, which are skipped.
template <typename OnField>
bool parse_proto(std::string_view message, OnField&& on_field) {
  Cursor c = cursor(message);
  while (c.ok && !c.done()) {
    const uint64_t tag = c.varint();
    const int field = static_cast<int>(tag >> 3), wire = static_cast<int>(tag & 7);
    if (on_field(field, wire, c)) continue;
    switch (wire) {
      case 0: c.varint(); break;
      case 1: c.fixed64(); break;
      case 2: c.bytes(c.varint()); break;
      case 5: c.fixed32(); break;
      default: return false;
    }
  }
  return c.ok;
}

bool parse_shape(std::string_view message, std::vector<int64_t>& shape, bool& unknown_rank) {
  return parse_proto(message, [&](int field, int wire, Cursor& c) {
    if (field == 2 && wire == 2) {  // repeated Dim dim
      int64_t size = -1;
      const bool dim_ok = parse_proto(c.bytes(c.varint()), [&](int f, int w, Cursor& d) {
        if (f == 1 && w == 0) {
          size = static_cast<int64_t>(d.varint());
          return true;
        }
        return false;
      });
      if (!dim_ok) c.ok = false;
      shape.push_back(size);
      return true;
    }
    if (field == 3 && wire == 0) {
      unknown_rank = c.varint() != 0;
      return true;
    }
    return false;
  });
}

bool parse_entry(std::string_view message, TfTensorEntry& e) {
  bool unknown_rank = false, shape_ok = true;
  const bool ok = parse_proto(message, [&](int field, int wire, Cursor& c) {
    switch (field * 8 + wire) {
      case 1 * 8 + 0: e.dtype = static_cast<int>(c.varint()); return true;
      case 2 * 8 + 2: shape_ok = parse_shape(c.bytes(c.varint()), e.shape, unknown_rank); return true;
      case 3 * 8 + 0: e.shard = static_cast<int>(c.varint()); return true;
      case 4 * 8 + 0: e.offset = static_cast<int64_t>(c.varint()); return true;
      case 5 * 8 + 0: e.size = static_cast<int64_t>(c.varint()); return true;
      case 6 * 8 + 5: e.masked_crc32c = c.fixed32(); return true;
      case 7 * 8 + 2: e.sliced = true; c.bytes(c.varint()); return true;
      default: return false;
    }
  });
  if (unknown_rank) e.shape = {-1};
  return ok && shape_ok;
}

// ---- the LevelDB-format table of the .index file -----------------------------------------------

constexpr uint64_t kTableMagic = 0xdb4775248b80fb57ull;
constexpr size_t kFooterSize = 48;      // two block handles padded to 40 bytes, then the magic
constexpr size_t kBlockTrailerSize = 5;  // compression type, masked CRC-32C

class IndexFile {
 public:
  IndexFile(std::string path, std::string bytes) : path_(std::move(path)), bytes_(std::move(bytes)) {}

  // Calls on_entry(key, value) for every key of the table, in order.
  template <typename OnEntry>
  void for_each(OnEntry&& on_entry) const {
    if (bytes_.size() < kFooterSize) damaged("too short to be a TensorFlow checkpoint index");
    Cursor footer = cursor(std::string_view(bytes_).substr(bytes_.size() - kFooterSize));
    Cursor magic = cursor(std::string_view(bytes_).substr(bytes_.size() - 8));
    if (magic.fixed64() != kTableMagic) damaged("not a TensorFlow checkpoint index (no table magic number)");
    footer.varint();  // the metaindex block: bundles have no filters or other meta blocks
    footer.varint();
    const uint64_t index_offset = footer.varint(), index_size = footer.varint();
    if (!footer.ok) damaged("damaged table footer");
    for_each_in_block(block(index_offset, index_size), [&](const std::string&, std::string_view handle) {
      Cursor h = cursor(handle);
      const uint64_t offset = h.varint(), size = h.varint();
      if (!h.ok) damaged("damaged block handle in the table index");
      for_each_in_block(block(offset, size), on_entry);
    });
  }

  [[noreturn]] void damaged(const std::string& what) const { throw_input(path_, what); }

 private:
  std::string_view block(uint64_t offset, uint64_t size) const {
    if (offset > bytes_.size() || size + kBlockTrailerSize > bytes_.size() - offset)
      damaged(cat("table block at ", offset, " runs past the end of the file (truncated?)"));
    const std::string_view contents(bytes_.data() + offset, size);
    const uint8_t type = static_cast<uint8_t>(bytes_[offset + size]);
    uint32_t stored;
    std::memcpy(&stored, bytes_.data() + offset + size + 1, 4);
    const uint32_t actual = crc32c(&bytes_[offset + size], 1, crc32c(contents.data(), contents.size()));
    if (crc32c_mask(actual) != stored) damaged(cat("checksum mismatch in the table block at ", offset, " (damaged file)"));
    if (type != 0)
      damaged(cat("table block at ", offset, " is compressed (type ", int(type), "); only uncompressed tables are supported"));
    return contents;
  }

  // Block layout: prefix-compressed entries (shared, non_shared, value_length, key delta, value),
  // then the restart-point array and its length as fixed32s.
  template <typename OnEntry>
  void for_each_in_block(std::string_view block, OnEntry&& on_entry) const {
    if (block.size() < 4) damaged("damaged table block (too short)");
    uint32_t restarts;
    std::memcpy(&restarts, block.data() + block.size() - 4, 4);
    if (restarts > (block.size() - 4) / 4) damaged("damaged table block (restart array)");
    Cursor c = cursor(block.substr(0, block.size() - 4 - 4 * size_t(restarts)));
    std::string key;
    while (!c.done()) {
      const uint64_t shared = c.varint(), non_shared = c.varint(), value_size = c.varint();
      const std::string_view delta = c.bytes(non_shared);
      const std::string_view value = c.bytes(value_size);
      if (!c.ok || shared > key.size()) damaged("damaged table block (entry)");
      key.resize(shared);
      key.append(delta);
      on_entry(key, value);
    }
  }

  std::string path_;
  std::string bytes_;
};

std::string read_whole_file(const std::string& path) {
  return read_file(path, "a TensorFlow checkpoint file");
}

}  // namespace

// ---- the reader ---------------------------------------------------------------------------------

TfCheckpointReader::TfCheckpointReader(std::string prefix) : prefix_(std::move(prefix)) {
  const std::string index_path = prefix_ + ".index";
  const IndexFile index(index_path, read_whole_file(index_path));
  bool have_header = false;
  index.for_each([&](const std::string& key, std::string_view value) {
    if (key.empty()) {  // the BundleHeaderProto
      int endianness = 0;
      const bool ok = parse_proto(value, [&](int field, int wire, Cursor& c) {
        if (field == 1 && wire == 0) num_shards_ = static_cast<int>(c.varint());
        else if (field == 2 && wire == 0) endianness = static_cast<int>(c.varint());
        else return false;
        return true;
      });
      if (!ok) index.damaged("damaged bundle header");
      if (endianness != 0) index.damaged("the checkpoint was written big-endian; only little-endian is supported");
      have_header = true;
      return;
    }
    TfTensorEntry e;
    e.name = key;
    if (!parse_entry(value, e)) index.damaged(cat("damaged entry for tensor '", key, "'"));
    entries_.push_back(std::move(e));
  });
  if (!have_header) index.damaged("no bundle header: not a TensorFlow checkpoint index");
  if (num_shards_ < 1) index.damaged(cat("bundle header says ", num_shards_, " data shards"));
  for (const TfTensorEntry& e : entries_)
    if (e.shard < 0 || e.shard >= num_shards_)
      index.damaged(cat("tensor '", e.name, "' is in shard ", e.shard, " of ", num_shards_));
}

const TfTensorEntry* TfCheckpointReader::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const TfTensorEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

std::string TfCheckpointReader::data_file(int shard) const {
  char suffix[40];
  std::snprintf(suffix, sizeof suffix, ".data-%05d-of-%05d", shard, num_shards_);
  return prefix_ + suffix;
}

void TfCheckpointReader::read_float(const TfTensorEntry& e, float* dst, size_t count) const {
  const std::string path = data_file(e.shard);
  if (e.sliced) throw_input(prefix_, cat("tensor '", e.name, "' is a partitioned variable, which is not supported"));
  if (e.dtype != TF_FLOAT)
    throw_input(prefix_, cat("tensor '", e.name, "' is ", tf_dtype_name(e.dtype), ", expected float32"));
  if (e.size != static_cast<int64_t>(count * sizeof(float)))
    throw_input(prefix_, cat("tensor '", e.name, "' holds ", e.size, " bytes, expected ", count * sizeof(float)));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(path, "cannot be opened (the checkpoint's data file is missing?)");
  in.seekg(e.offset);
  in.read(reinterpret_cast<char*>(dst), e.size);
  if (in.gcount() != e.size) throw_input(path, cat("ends inside tensor '", e.name, "' (truncated file)"));
  if (e.masked_crc32c != 0 && crc32c_mask(crc32c(dst, static_cast<size_t>(e.size))) != e.masked_crc32c)
    throw_input(path, cat("checksum mismatch in tensor '", e.name, "' (damaged file)"));
}

// ---- conversion ---------------------------------------------------------------------------------

TfConversion convert_tf_checkpoint(const std::string& prefix, const TensorTable& table, const std::string& out_path) {
  const TfCheckpointReader reader(prefix);
  FlatTensors params(table);
  TfConversion result;
  for (const TensorInfo& t : table.tensors()) {
    const TfTensorEntry* e = reader.find(t.name);
    if (!e) throw_input(prefix, cat("missing tensor '", t.name, "'"));
    if (e->shape != t.shape)
      throw_input(prefix, cat("tensor '", t.name, "' has shape ", shape_string(e->shape), ", the model needs ",
                              shape_string(t.shape)));
    reader.read_float(*e, params.get(t), t.numel);
    ++result.converted;
  }
  for (const TfTensorEntry& e : reader.entries())
    if (!table.find(e.name)) result.skipped.push_back(e.name);
  save_checkpoint(params, out_path);
  return result;
}

}  // namespace bertperf
