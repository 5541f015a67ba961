// The one HDF5 layer of bertperf: a small RAII wrapper over the HDF5 C API that every HDF5 user
// (checkpoints, the data reader and writer, tests) goes through.
//
// Why a wrapper and not the C API at each call site:
//  - every failure caused by the file (missing, not HDF5, corrupt, a key absent, a wrong dtype or
//    shape) becomes one InputError line naming the file and the key, never HDF5's own error-stack
//    dump on stderr (switched off here, once) and never a crash;
//  - reads are only allowed where they are lossless (int16 data may be read as int32, float64 may
//    not be read as float32), so a file in an unexpected layout is refused instead of silently
//    truncated;
//  - files are written atomically: File::create writes a temporary next to the target and commit()
//    renames it into place, so a crash never leaves a half-written checkpoint or shard behind;
//  - the serial HDF5 library is not thread-safe, so every entry point takes one process-wide lock
//    (a data-reader prefetch thread and a checkpoint save may then run concurrently).
//
// Keys are slash-separated paths ("bert/encoder/layer_0/output/dense/kernel"); writing creates the
// intermediate groups. Variable-length datasets are the h5py `vlen` kind, held here as one flat value
// array plus row offsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bertperf::h5 {

// The element types of a stored dataset that we know by name (the backends' DType, backends/device.h, is another
// thing: the types a backend computes in). OTHER covers everything else (compound, enum, ...).
enum class ElementType { F32, F64, I8, U8, I16, U16, I32, U32, I64, U64, STRING, OTHER };

const char* type_name(ElementType t);  // "float32", "int16", ...

// The version of the HDF5 library loaded, "1.10.8".
std::string library_version();

template <typename T>
constexpr ElementType element_type_of();
template <> constexpr ElementType element_type_of<float>() { return ElementType::F32; }
template <> constexpr ElementType element_type_of<double>() { return ElementType::F64; }
template <> constexpr ElementType element_type_of<int8_t>() { return ElementType::I8; }
template <> constexpr ElementType element_type_of<uint8_t>() { return ElementType::U8; }
template <> constexpr ElementType element_type_of<int16_t>() { return ElementType::I16; }
template <> constexpr ElementType element_type_of<int32_t>() { return ElementType::I32; }
template <> constexpr ElementType element_type_of<int64_t>() { return ElementType::I64; }

struct DatasetInfo {
  std::vector<int64_t> shape;  // empty for a scalar
  ElementType type = ElementType::OTHER;  // for a vlen dataset: the element type
  bool vlen = false;
  int64_t numel() const;  // 1 for a scalar; -1 when a damaged shape overflows
};

// Rows of a vlen dataset: row i is values[offsets[i] .. offsets[i+1]).
template <typename T>
struct Vlen {
  std::vector<T> values;
  std::vector<size_t> offsets{0};
  size_t rows() const { return offsets.size() - 1; }
  size_t row_size(size_t i) const { return offsets[i + 1] - offsets[i]; }
  const T* row(size_t i) const { return values.data() + offsets[i]; }
  void append(const T* data, size_t n) {
    values.insert(values.end(), data, data + n);
    offsets.push_back(values.size());
  }
};

// Where a dataset's values lie in the file, so that single rows can be read with plain reads, byte for byte (the
// data layer's shard index, data/shard_index.h): HDF5's own read of one vlen row reads the whole heap collection it
// lies in, 4 KiB or more for a row of a few bytes. Given (`direct`) for a contiguous, unfiltered dataset of
// little-endian integers; any other is read through the library. A vlen row's values follow its heap object's
// header (`vlen_header` bytes, ending in the values' byte size in `vlen_size_bytes` bytes, little-endian), which a
// reader checks to know it reads the row it meant.
struct ValuePlaces {
  bool direct = false;
  ElementType type = ElementType::OTHER;
  uint64_t offset = 0;                // fixed-size: the file offset of element 0 (rows follow one another)
  std::vector<uint64_t> row_offsets;  // vlen: the file offset of each row's first value (0 for an empty row)
  std::vector<uint64_t> row_sizes;    // vlen: each row's value count, from its reference
  size_t vlen_header = 0, vlen_size_bytes = 0;
};

// An open HDF5 file. Move-only; closes on destruction.
class File {
 public:
  // Opens an existing file read-only. A missing, unreadable or non-HDF5 file is an InputError
  // naming `path`.
  static File open(const std::string& path);
  // Starts writing `path` atomically: the data goes to a temporary file beside it; commit() closes
  // it and renames it over `path`. Destroying an uncommitted file removes the temporary.
  static File create(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }

  // Whether a dataset (or group) exists at `key`.
  bool has(const std::string& key) const;
  // Every dataset in the file, as full keys without a leading slash, sorted.
  std::vector<std::string> datasets() const;
  DatasetInfo info(const std::string& key) const;
  // Where the values of `key` lie (ValuePlaces above); every vlen reference is checked as a read checks it.
  ValuePlaces value_places(const std::string& key) const;

  // Whole fixed-size datasets. The stored type must convert losslessly to T; `count` must equal
  // the dataset's element count. Failures name the file and the key.
  template <typename T>
  void read_into(const std::string& key, T* dst, size_t count) const;
  template <typename T>
  std::vector<T> read(const std::string& key) const;
  // Rows [first, first + count) along the first dimension, into dst (count * row elements).
  template <typename T>
  void read_rows(const std::string& key, int64_t first, int64_t count, T* dst) const;

  // Variable-length (h5py vlen) one-dimensional datasets: all rows, or rows [first, first + count).
  template <typename T>
  Vlen<T> read_vlen(const std::string& key) const;
  template <typename T>
  Vlen<T> read_vlen(const std::string& key, int64_t first, int64_t count) const;

  // Writers (file from create() only). The stored type is T, little-endian.
  template <typename T>
  void write(const std::string& key, const T* data, const std::vector<int64_t>& shape);
  template <typename T>
  void write(const std::string& key, const std::vector<T>& data, const std::vector<int64_t>& shape) {
    write(key, data.data(), shape);
  }
  template <typename T>
  void write_vlen(const std::string& key, const Vlen<T>& rows);

  // Attributes of the object at `key` ("" or "/" = the file's root group). Strings are stored as
  // variable-length UTF-8 (what h5py writes for str); fixed-length strings are read as well.
  bool has_attr(const std::string& key, const std::string& name) const;
  void set_attr(const std::string& key, const std::string& name, const std::string& value);
  void set_attr(const std::string& key, const std::string& name, int64_t value);
  std::string attr_string(const std::string& key, const std::string& name) const;
  int64_t attr_int(const std::string& key, const std::string& name) const;
  // A single integer or floating-point attribute, as double.
  double attr_double(const std::string& key, const std::string& name) const;

  // Flushes, closes and renames the temporary into place (files from create() only).
  void commit();

 private:
  File() = default;
  void close() noexcept;
  int64_t open_dataset(const std::string& key) const;  // an hid_t the caller must close
  int64_t open_object(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  // Refuses a dataset (hid_t `ds`) whose shape claims more data than the file can hold (hdf5.cpp).
  void check_extent(const std::string& key, int64_t ds, double elements, double bytes_per_element) const;
  // Refuses damaged references of a vlen dataset's rows before HDF5 follows them (hdf5.cpp); with `places`, also
  // says where each row's values lie. False when the dataset is not contiguous and unfiltered (nothing checked).
  bool check_vlen_references(const std::string& key, int64_t ds, int64_t first, int64_t count, size_t element_bytes,
                             ValuePlaces* places = nullptr) const;
  template <typename T>
  T attr_scalar(const std::string& key, const std::string& name, bool (*accepts)(int64_t), int64_t memory_type,
                const char* what) const;

  int64_t id_ = -1;         // hid_t
  std::string path_;        // the path the user named
  std::string temp_path_;   // non-empty while an uncommitted create() is open
};

}  // namespace bertperf::h5
