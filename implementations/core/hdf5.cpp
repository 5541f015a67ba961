// The HDF5 wrapper (hdf5.h) over the HDF5 C API.
#include "core/hdf5.h"

// Angle brackets: the library header, not core/hdf5.h.
#include <hdf5.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <type_traits>

#include "core/errors.h"

static_assert(std::is_same_v<hid_t, int64_t>, "hdf5.h stores hid_t as int64_t (HDF5 >= 1.10)");

namespace bertperf::h5 {

namespace {

std::recursive_mutex& library_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Takes the library lock and, the first time in each thread, silences HDF5's automatic error-stack
// printing: every failure is reported by us, once, as one line. The thread-safe library keeps one
// error stack, and one printing setting, per thread (a reader's prefetch thread has its own).
class Lock {
 public:
  Lock() : guard_(library_mutex()) {
    // No exit handler: after a failed H5Fclose (a full disk) HDF5 1.10's own exit-time cleanup crashes on the
    // half-closed file. Every file is closed by its File, and only committed files count, so there is nothing
    // left for it to do.
    static const bool no_atexit = [] {
      H5dont_atexit();
      return true;
    }();
    (void)no_atexit;
    thread_local const bool silenced = [] {
      H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      return true;
    }();
    (void)silenced;
  }

 private:
  std::lock_guard<std::recursive_mutex> guard_;
};

// The innermost message on HDF5's error stack (the most specific one, e.g. "bad object header
// version number"), then clears the stack. Empty when there is none.
std::string take_hdf5_error() {
  std::string innermost;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (n == 0 && err->desc) *out = err->desc;
        return 0;
      },
      &innermost);
  H5Eclear2(H5E_DEFAULT);
  // A failed write reads "file write failed: time = ...\n, filename = ..., error message = 'File too large', ...":
  // keep what failed and the system's reason, on one line.
  const size_t reason = innermost.find("error message = '");
  if (reason != std::string::npos) {
    const size_t start = reason + 17, end = innermost.find('\'', start);
    innermost = innermost.substr(0, innermost.find(':')) + ": " + innermost.substr(start, end - start);
  }
  std::replace(innermost.begin(), innermost.end(), '\n', ' ');
  return innermost.empty() ? "" : " (HDF5: " + innermost + ")";
}

// Owns one hid_t and closes it with the matching H5?close.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(Id&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::string normalize(const std::string& key) {
  size_t start = 0;
  while (start < key.size() && key[start] == '/') ++start;
  return key.substr(start);
}

ElementType classify(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      switch (size) {
        case 1: return is_signed ? ElementType::I8 : ElementType::U8;
        case 2: return is_signed ? ElementType::I16 : ElementType::U16;
        case 4: return is_signed ? ElementType::I32 : ElementType::U32;
        case 8: return is_signed ? ElementType::I64 : ElementType::U64;
        default: return ElementType::OTHER;
      }
    }
    case H5T_FLOAT:
      return size == 4 ? ElementType::F32 : size == 8 ? ElementType::F64 : ElementType::OTHER;
    case H5T_STRING:
      return ElementType::STRING;
    default:
      return ElementType::OTHER;
  }
}

bool is_float(ElementType t) { return t == ElementType::F32 || t == ElementType::F64; }
bool is_signed_int(ElementType t) { return t == ElementType::I8 || t == ElementType::I16 || t == ElementType::I32 || t == ElementType::I64; }
bool is_unsigned_int(ElementType t) { return t == ElementType::U8 || t == ElementType::U16 || t == ElementType::U32 || t == ElementType::U64; }
size_t byte_size(ElementType t) {
  switch (t) {
    case ElementType::I8: case ElementType::U8: return 1;
    case ElementType::I16: case ElementType::U16: return 2;
    case ElementType::F32: case ElementType::I32: case ElementType::U32: return 4;
    case ElementType::F64: case ElementType::I64: case ElementType::U64: return 8;
    default: return 0;
  }
}

// Whether every value of `stored` is exactly representable in `wanted`.
bool lossless(ElementType stored, ElementType wanted) {
  if (is_float(stored)) return is_float(wanted) && byte_size(stored) <= byte_size(wanted);
  if (is_signed_int(stored)) return is_signed_int(wanted) && byte_size(stored) <= byte_size(wanted);
  if (is_unsigned_int(stored))
    return (is_unsigned_int(wanted) && byte_size(stored) <= byte_size(wanted)) ||
           (is_signed_int(wanted) && byte_size(stored) < byte_size(wanted));
  return false;
}

template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, int8_t>) return H5T_NATIVE_INT8;
  else if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, int16_t>) return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
  else return H5T_NATIVE_INT64;
}

// The little-endian type written to files, so a file reads the same on any machine.
template <typename T>
hid_t file_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_IEEE_F32LE;
  else if constexpr (std::is_same_v<T, double>) return H5T_IEEE_F64LE;
  else if constexpr (std::is_same_v<T, int8_t>) return H5T_STD_I8LE;
  else if constexpr (std::is_same_v<T, uint8_t>) return H5T_STD_U8LE;
  else if constexpr (std::is_same_v<T, int16_t>) return H5T_STD_I16LE;
  else if constexpr (std::is_same_v<T, int32_t>) return H5T_STD_I32LE;
  else return H5T_STD_I64LE;
}

// Releases the memory HDF5 allocated for variable-length data read into `buf`.
void reclaim_vlen(hid_t mem_type, hid_t mem_space, void* buf) {
#if H5_VERSION_GE(1, 12, 0)
  H5Treclaim(mem_type, mem_space, H5P_DEFAULT, buf);
#else
  H5Dvlen_reclaim(mem_type, mem_space, H5P_DEFAULT, buf);
#endif
}

}  // namespace

const char* type_name(ElementType t) {
  switch (t) {
    case ElementType::F32: return "float32";
    case ElementType::F64: return "float64";
    case ElementType::I8: return "int8";
    case ElementType::U8: return "uint8";
    case ElementType::I16: return "int16";
    case ElementType::U16: return "uint16";
    case ElementType::I32: return "int32";
    case ElementType::U32: return "uint32";
    case ElementType::I64: return "int64";
    case ElementType::U64: return "uint64";
    case ElementType::STRING: return "string";
    default: return "an unsupported type";
  }
}

int64_t DatasetInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// ---- open, create, commit -----------------------------------------------------------------------

File File::open(const std::string& path) {
  Lock lock;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw_input(path, "no such file");
  if (std::filesystem::is_directory(path, ec)) throw_input(path, "is a directory, not an HDF5 file");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 < 0) throw_input(path, "cannot be read" + take_hdf5_error());
  if (is_hdf5 == 0) throw_input(path, "not an HDF5 file");
  File f;
  f.path_ = path;
  f.id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f.id_ < 0) throw_input(path, "cannot be opened as HDF5 (damaged or truncated?)" + take_hdf5_error());
  return f;
}

File File::create(const std::string& path) {
  Lock lock;
  File f;
  f.path_ = path;
  f.temp_path_ = cat(path, ".tmp-", getpid());
  // No object timestamps (the root group is created from the file-creation list): the same content
  // gives the same bytes, so a rerun from a seed reproduces its checkpoint.
  Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Pset_obj_track_times(fcpl.get(), 0);
  f.id_ = H5Fcreate(f.temp_path_.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT);
  if (f.id_ < 0) {
    take_hdf5_error();
    throw_input(path, "cannot create the file (is the directory there and writable?)");
  }
  return f;
}

File::File(File&& other) noexcept
    : id_(other.id_), path_(std::move(other.path_)), temp_path_(std::move(other.temp_path_)) {
  other.id_ = -1;
  other.temp_path_.clear();
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    close();
    id_ = other.id_;
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    other.id_ = -1;
    other.temp_path_.clear();
  }
  return *this;
}

File::~File() { close(); }

void File::close() noexcept {
  Lock lock;
  if (id_ >= 0) H5Fclose(id_);
  id_ = -1;
  if (!temp_path_.empty()) {
    std::error_code ec;
    std::filesystem::remove(temp_path_, ec);
    temp_path_.clear();
  }
}

void File::commit() {
  Lock lock;
  BERT_CHECK(!temp_path_.empty() && id_ >= 0, "commit() on a file not opened by create(): ", path_);
  const herr_t closed = H5Fclose(id_);
  id_ = -1;
  if (closed < 0) {
    const std::string detail = take_hdf5_error();
    close();
    throw_input(path_, "writing failed (disk full?)" + detail);
  }
  std::error_code ec;
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) {
    close();
    throw_input(path_, "cannot move the finished file into place: " + ec.message());
  }
  temp_path_.clear();
}

void File::fail(const std::string& key, const std::string& what) const {
  throw_input(path_, key.empty() ? what : cat("'", key, "': ", what));
}

// ---- lookup and metadata ------------------------------------------------------------------------

bool File::has(const std::string& key) const {
  Lock lock;
  const std::string k = normalize(key);
  if (k.empty()) return true;
  // H5Lexists fails (rather than answering false) when an intermediate group is missing, so walk
  // the path one component at a time.
  size_t pos = 0;
  while (true) {
    const size_t slash = k.find('/', pos);
    const std::string prefix = k.substr(0, slash);
    if (H5Lexists(id_, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
    pos = slash + 1;
  }
}

std::vector<std::string> File::datasets() const {
  Lock lock;
  std::vector<std::string> names;
  auto visit = [](hid_t group, const char* name, const H5L_info_t* info, void* data) -> herr_t {
    if (info->type != H5L_TYPE_HARD) return 0;
    const hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) return -1;
    if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
    H5Oclose(obj);
    return 0;
  };
  if (H5Lvisit(id_, H5_INDEX_NAME, H5_ITER_INC, visit, &names) < 0)
    fail("", "cannot list the datasets, the file is damaged" + take_hdf5_error());
  std::sort(names.begin(), names.end());
  return names;
}

int64_t File::open_dataset(const std::string& key) const {
  const std::string k = normalize(key);
  if (!has(k)) fail(k, "no such dataset");
  const hid_t ds = H5Dopen2(id_, k.c_str(), H5P_DEFAULT);
  if (ds < 0) fail(k, "is not a readable dataset" + take_hdf5_error());
  return ds;
}

int64_t File::open_object(const std::string& key) const {
  const std::string k = normalize(key);
  if (!has(k)) fail(k, "no such object");
  const hid_t obj = H5Oopen(id_, k.empty() ? "/" : k.c_str(), H5P_DEFAULT);
  if (obj < 0) fail(k, "cannot be opened" + take_hdf5_error());
  return obj;
}

namespace {

DatasetInfo describe(hid_t ds) {
  DatasetInfo info;
  Id space(H5Dget_space(ds), H5Sclose);
  Id type(H5Dget_type(ds), H5Tclose);
  if (!space.ok() || !type.ok()) return info;
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank > 0) {
    std::vector<hsize_t> dims(rank);
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    info.shape.assign(dims.begin(), dims.end());
  }
  if (H5Tget_class(type.get()) == H5T_VLEN) {
    Id super(H5Tget_super(type.get()), H5Tclose);
    info.vlen = true;
    info.type = super.ok() ? classify(super.get()) : ElementType::OTHER;
  } else {
    info.type = classify(type.get());
  }
  return info;
}

// The most bytes a dataset's stored elements can expand to: its raw size when stored plain, a deflate
// ratio's worth of its stored size when filtered. A damaged shape claims more, and is refused before
// anything is allocated for it.
constexpr double kMaxFilterRatio = 1100;  // deflate cannot exceed about 1032:1

double element_bound(hid_t ds, double file_bytes) {
  Id plist(H5Dget_create_plist(ds), H5Pclose);
  const int filters = plist.ok() ? H5Pget_nfilters(plist.get()) : 0;
  if (filters <= 0) return file_bytes;
  return double(H5Dget_storage_size(ds)) * kMaxFilterRatio + 1e6;
}

// Little-endian unsigned integer of `n` bytes at `p`.
uint64_t le(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

}  // namespace

// HDF5 1.10 trusts the heap references of variable-length data: a damaged one makes H5Dread copy past its
// buffers (a crash inside H5HG_read). So before reading rows [first, first + count) of a contiguous vlen dataset,
// every reference is checked here against the global heap collection it points into, parsed the way HDF5 parses
// it: the collection lies inside the file and is well formed, the object exists, and its size is the row's
// length times the element size. (Chunked or filtered vlen datasets are read unchecked.)
bool File::check_vlen_references(const std::string& key, int64_t ds, int64_t first, int64_t count,
                                 size_t element_bytes, ValuePlaces* places) const {
  Id plist(H5Dget_create_plist(ds), H5Pclose);
  Id fcpl(H5Fget_create_plist(id_), H5Pclose);
  if (!plist.ok() || !fcpl.ok() || H5Pget_layout(plist.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(plist.get()) > 0)
    return false;
  size_t sizeof_addr = 8, sizeof_size = 8;
  hsize_t userblock = 0;
  H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size);
  H5Pget_userblock(fcpl.get(), &userblock);
  const haddr_t offset = H5Dget_offset(ds);
  if (offset == HADDR_UNDEF) {
    if (count == 0) return true;
    fail(key, "cannot be read, the file is damaged (no data)");
  }
  std::ifstream in(path_, std::ios::binary);
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path_, ec);
  if (!in || ec) fail(key, "cannot be read");
  auto read_at = [&](uint64_t at, uint64_t n) {
    if (at > file_bytes || n > file_bytes - at) fail(key, "cannot be read, the file is damaged (data past its end)");
    std::string bytes(n, '\0');
    in.seekg(static_cast<std::streamoff>(at));
    if (!in.read(bytes.data(), static_cast<std::streamsize>(n))) fail(key, "cannot be read");
    return bytes;
  };
  const size_t ref_bytes = 4 + sizeof_addr + 4;
  const std::string refs = read_at(offset + static_cast<uint64_t>(first) * ref_bytes, static_cast<uint64_t>(count) * ref_bytes);
  struct Object {
    uint64_t size, data;  // its byte size, and where its bytes start in the file
  };
  struct Collection {
    bool ok = false;
    std::map<uint64_t, Object> objects;  // by object index
  };
  std::map<uint64_t, Collection> collections;
  const size_t header = 8 + sizeof_size, object_header = 8 + sizeof_size;
  auto collection = [&](uint64_t addr) -> const Collection& {
    auto [it, fresh] = collections.try_emplace(addr);
    Collection& c = it->second;
    if (!fresh) return c;
    const uint64_t at = addr + userblock;
    if (at >= file_bytes || file_bytes - at < header) return c;
    const std::string head = read_at(at, header);
    const auto* h = reinterpret_cast<const unsigned char*>(head.data());
    const uint64_t size = le(h + 8, sizeof_size);
    if (head.compare(0, 4, "GCOL") != 0 || h[4] != 1 || size < header || size > file_bytes - at) return c;
    const std::string body = read_at(at, size);
    const auto* b = reinterpret_cast<const unsigned char*>(body.data());
    // As HDF5 walks it: objects end to end, a tail too short for a header is free space, and the free-space
    // object (index 0) counts its own header in its size. Every step must advance and stay inside.
    for (uint64_t p = header; p < size;) {
      if (size - p < object_header) break;
      const uint64_t index = le(b + p, 2), object = le(b + p + 8, sizeof_size);
      if (object > size) return c;
      const uint64_t need = index == 0 ? object : object_header + (object + 7) / 8 * 8;
      if (need == 0 || need > size - p) return c;
      if (index != 0) c.objects[index] = {object, at + p + object_header};
      p += need;
    }
    c.ok = true;
    return c;
  };
  if (places) {
    places->row_offsets.assign(static_cast<size_t>(count), 0);
    places->row_sizes.assign(static_cast<size_t>(count), 0);
    places->vlen_header = object_header;
    places->vlen_size_bytes = sizeof_size;
  }
  for (int64_t r = 0; r < count; ++r) {
    const auto* ref = reinterpret_cast<const unsigned char*>(refs.data()) + r * ref_bytes;
    const uint64_t length = le(ref, 4), addr = le(ref + 4, sizeof_addr), index = le(ref + 4 + sizeof_addr, 4);
    if (length == 0) continue;
    const Collection& c = collection(addr);
    const auto object = c.objects.find(index);
    if (!c.ok || object == c.objects.end() || object->second.size != length * element_bytes)
      fail(key, cat("row ", first + r, " cannot be read, the file is damaged (a bad reference to its data)"));
    if (places) {
      places->row_offsets[static_cast<size_t>(r)] = object->second.data;
      places->row_sizes[static_cast<size_t>(r)] = length;
    }
  }
  return true;
}

ValuePlaces File::value_places(const std::string& key) const {
  Lock lock;
  const std::string k = normalize(key);
  Id ds(open_dataset(k), H5Dclose);
  const DatasetInfo info = describe(ds.get());
  ValuePlaces places;
  places.type = info.type;
  Id type(H5Dget_type(ds.get()), H5Tclose);
  Id element(info.vlen ? H5Tget_super(type.get()) : H5Tcopy(type.get()), H5Tclose);
  const bool integers = element.ok() && H5Tget_class(element.get()) == H5T_INTEGER &&
                        (byte_size(info.type) == 1 || H5Tget_order(element.get()) == H5T_ORDER_LE);
  if (!integers || info.shape.empty()) return places;
  if (info.vlen) {
    if (info.shape.size() != 1) return places;
    check_extent(k, ds.get(), double(info.shape[0]), 16);
    places.direct = check_vlen_references(k, ds.get(), 0, info.shape[0], byte_size(info.type), &places);
    return places;
  }
  Id plist(H5Dget_create_plist(ds.get()), H5Pclose);
  if (!plist.ok() || H5Pget_layout(plist.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(plist.get()) > 0) return places;
  check_extent(k, ds.get(), double(info.numel()), double(byte_size(info.type)));
  Id fcpl(H5Fget_create_plist(id_), H5Pclose);
  hsize_t userblock = 0;
  if (fcpl.ok()) H5Pget_userblock(fcpl.get(), &userblock);
  const haddr_t at = H5Dget_offset(ds.get());
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path_, ec);
  const double bytes = double(info.numel()) * double(byte_size(info.type));
  if (info.numel() == 0) return places;
  if (at == HADDR_UNDEF || ec || double(at) + bytes > double(file_bytes))
    fail(k, "cannot be read, the file is damaged (data past its end)");
  places.direct = true;
  places.offset = at;  // H5Dget_offset counts from the start of the file, user block included
  return places;
}

void File::check_extent(const std::string& key, int64_t ds, double elements, double bytes_per_element) const {
  std::error_code ec;
  const double file_bytes = double(std::filesystem::file_size(path_, ec));
  if (ec || !temp_path_.empty()) return;
  const double bound = element_bound(ds, file_bytes);
  if (elements * bytes_per_element > bound)
    fail(key, cat("claims ", elements, " elements (", elements * bytes_per_element, " bytes), more than the file can hold (",
                  file_bytes, " bytes): the file is damaged"));
}

DatasetInfo File::info(const std::string& key) const {
  Lock lock;
  Id ds(open_dataset(key), H5Dclose);
  return describe(ds.get());
}

// ---- fixed-size reads ---------------------------------------------------------------------------

template <typename T>
void File::read_into(const std::string& key, T* dst, size_t count) const {
  Lock lock;
  const std::string k = normalize(key);
  Id ds(open_dataset(k), H5Dclose);
  const DatasetInfo info = describe(ds.get());
  if (info.vlen) fail(k, "is a variable-length dataset, expected fixed-size");
  if (!lossless(info.type, element_type_of<T>()))
    fail(k, cat("holds ", type_name(info.type), ", which cannot be read as ", type_name(element_type_of<T>()),
                " without loss"));
  if (info.numel() != static_cast<int64_t>(count))
    fail(k, cat("has shape ", shape_string(info.shape), " (", info.numel(), " elements), expected ", count,
                " elements"));
  check_extent(k, ds.get(), double(count), double(byte_size(info.type)));
  if (count == 0) return;
  if (H5Dread(ds.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
    fail(k, "cannot be read, the file is damaged" + take_hdf5_error());
}

template <typename T>
std::vector<T> File::read(const std::string& key) const {
  Lock lock;
  const std::string k = normalize(key);
  const DatasetInfo i = info(k);
  if (i.numel() < 0) fail(k, "has a damaged shape " + shape_string(i.shape));
  {
    Id ds(open_dataset(k), H5Dclose);
    check_extent(k, ds.get(), double(i.numel()), double(std::max<size_t>(1, byte_size(i.type))));
  }
  std::vector<T> out(static_cast<size_t>(i.numel()));
  read_into(key, out.data(), out.size());
  return out;
}

template <typename T>
void File::read_rows(const std::string& key, int64_t first, int64_t count, T* dst) const {
  Lock lock;
  const std::string k = normalize(key);
  Id ds(open_dataset(k), H5Dclose);
  const DatasetInfo info = describe(ds.get());
  if (info.vlen) fail(k, "is a variable-length dataset, expected fixed-size");
  if (info.shape.empty()) fail(k, "is a scalar, it has no rows");
  if (!lossless(info.type, element_type_of<T>()))
    fail(k, cat("holds ", type_name(info.type), ", which cannot be read as ", type_name(element_type_of<T>()),
                " without loss"));
  if (first < 0 || count < 0 || first + count > info.shape[0])
    fail(k, cat("rows [", first, ", ", first + count, ") are out of range, it has ", info.shape[0], " rows"));
  if (count == 0) return;
  check_extent(k, ds.get(), double(info.numel()), double(byte_size(info.type)));
  std::vector<hsize_t> start(info.shape.size(), 0), extent(info.shape.begin(), info.shape.end());
  start[0] = static_cast<hsize_t>(first);
  extent[0] = static_cast<hsize_t>(count);
  Id file_space(H5Dget_space(ds.get()), H5Sclose);
  Id mem_space(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), H5Sclose);
  if (!file_space.ok() || !mem_space.ok() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr) < 0 ||
      H5Dread(ds.get(), native_type<T>(), mem_space.get(), file_space.get(), H5P_DEFAULT, dst) < 0)
    fail(k, "cannot be read, the file is damaged" + take_hdf5_error());
}

// ---- variable-length reads ----------------------------------------------------------------------

template <typename T>
Vlen<T> File::read_vlen(const std::string& key) const {
  Lock lock;
  const DatasetInfo i = info(key);
  if (!i.vlen) fail(normalize(key), "is a fixed-size dataset, expected variable-length");
  return read_vlen<T>(key, 0, i.shape.empty() ? 0 : i.shape[0]);
}

template <typename T>
Vlen<T> File::read_vlen(const std::string& key, int64_t first, int64_t count) const {
  Lock lock;
  const std::string k = normalize(key);
  Id ds(open_dataset(k), H5Dclose);
  const DatasetInfo info = describe(ds.get());
  if (!info.vlen) fail(k, "is a fixed-size dataset, expected variable-length");
  if (info.shape.size() != 1) fail(k, cat("has shape ", shape_string(info.shape), ", expected one dimension"));
  if (!lossless(info.type, element_type_of<T>()))
    fail(k, cat("holds vlen ", type_name(info.type), ", which cannot be read as ", type_name(element_type_of<T>()),
                " without loss"));
  if (first < 0 || count < 0 || first + count > info.shape[0])
    fail(k, cat("rows [", first, ", ", first + count, ") are out of range, it has ", info.shape[0], " rows"));
  Vlen<T> out;
  if (count == 0) return out;
  // Each row is stored as a 16-byte reference to its data.
  check_extent(k, ds.get(), double(info.shape[0]), 16);
  check_vlen_references(k, ds.get(), first, count, byte_size(info.type));
  const hsize_t start = static_cast<hsize_t>(first), n = static_cast<hsize_t>(count);
  Id file_space(H5Dget_space(ds.get()), H5Sclose);
  Id mem_space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Id mem_type(H5Tvlen_create(native_type<T>()), H5Tclose);
  std::vector<hvl_t> rows(n);
  if (!file_space.ok() || !mem_space.ok() || !mem_type.ok() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr) < 0 ||
      H5Dread(ds.get(), mem_type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, rows.data()) < 0)
    fail(k, "cannot be read, the file is damaged" + take_hdf5_error());
  // HDF5 allocated each row; give it back even if copying runs out of memory.
  struct Reclaim {
    hid_t type, space;
    void* buf;
    ~Reclaim() { reclaim_vlen(type, space, buf); }
  } reclaim{mem_type.get(), mem_space.get(), rows.data()};
  size_t total = 0;
  for (const hvl_t& r : rows) {
    if (r.len > 0 && !r.p) fail(k, "cannot be read, the file is damaged (a row without data)");
    total += r.len;
  }
  check_extent(k, ds.get(), double(total), double(byte_size(info.type)));
  out.values.reserve(total);
  out.offsets.reserve(n + 1);
  for (const hvl_t& r : rows) out.append(static_cast<const T*>(r.p), r.len);
  return out;
}

// ---- writes -------------------------------------------------------------------------------------

namespace {

// Link-creation properties that create missing intermediate groups.
Id intermediate_groups() {
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return lcpl;
}

// Dataset-creation properties without object timestamps (reproducible bytes).
Id untimed_dataset() {
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_obj_track_times(dcpl.get(), 0);
  return dcpl;
}

// Creates the groups above `key` without timestamps (intermediate groups made by the link-creation
// list would carry them).
void create_parent_groups(hid_t file, const std::string& key) {
  Id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_obj_track_times(gcpl.get(), 0);
  for (size_t slash = key.find('/', 1); slash != std::string::npos; slash = key.find('/', slash + 1)) {
    const std::string group = key.substr(0, slash);
    if (H5Lexists(file, group.c_str(), H5P_DEFAULT) > 0) continue;
    Id g(H5Gcreate2(file, group.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
  }
}

}  // namespace

template <typename T>
void File::write(const std::string& key, const T* data, const std::vector<int64_t>& shape) {
  Lock lock;
  const std::string k = normalize(key);
  BERT_CHECK(!temp_path_.empty(), "write to a file not opened by create(): ", path_);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Id space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
           H5Sclose);
  create_parent_groups(id_, k);
  Id lcpl = intermediate_groups();
  Id dcpl = untimed_dataset();
  Id ds(H5Dcreate2(id_, k.c_str(), file_type<T>(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!space.ok() || !ds.ok()) fail(k, "cannot create the dataset" + take_hdf5_error());
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel > 0 && H5Dwrite(ds.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(k, "cannot be written (disk full?)" + take_hdf5_error());
}

template <typename T>
void File::write_vlen(const std::string& key, const Vlen<T>& rows) {
  Lock lock;
  const std::string k = normalize(key);
  BERT_CHECK(!temp_path_.empty(), "write to a file not opened by create(): ", path_);
  const hsize_t n = rows.rows();
  std::vector<hvl_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = {rows.row_size(i), const_cast<T*>(rows.row(i))};
  Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Id stored(H5Tvlen_create(file_type<T>()), H5Tclose);
  Id mem(H5Tvlen_create(native_type<T>()), H5Tclose);
  create_parent_groups(id_, k);
  Id lcpl = intermediate_groups();
  Id dcpl = untimed_dataset();
  Id ds(H5Dcreate2(id_, k.c_str(), stored.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail(k, "cannot create the dataset" + take_hdf5_error());
  if (n > 0 && H5Dwrite(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
    fail(k, "cannot be written (disk full?)" + take_hdf5_error());
}

// ---- attributes ---------------------------------------------------------------------------------

bool File::has_attr(const std::string& key, const std::string& name) const {
  Lock lock;
  Id obj(open_object(key), H5Oclose);
  const htri_t exists = H5Aexists(obj.get(), name.c_str());
  if (exists < 0) fail(normalize(key), cat("attribute '", name, "' cannot be read", take_hdf5_error()));
  return exists > 0;
}

namespace {

// Creates (replacing any old one) a scalar attribute of `type` on `obj`.
hid_t create_scalar_attr(hid_t obj, const std::string& name, hid_t type) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Id space(H5Screate(H5S_SCALAR), H5Sclose);
  return H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT);
}

}  // namespace

void File::set_attr(const std::string& key, const std::string& name, const std::string& value) {
  Lock lock;
  Id obj(open_object(key), H5Oclose);
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Id attr(create_scalar_attr(obj.get(), name, type.get()), H5Aclose);
  const char* text = value.c_str();
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), &text) < 0)
    fail(normalize(key), cat("cannot write attribute '", name, "'", take_hdf5_error()));
}

void File::set_attr(const std::string& key, const std::string& name, int64_t value) {
  Lock lock;
  Id obj(open_object(key), H5Oclose);
  Id attr(create_scalar_attr(obj.get(), name, H5T_STD_I64LE), H5Aclose);
  if (!attr.ok() || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    fail(normalize(key), cat("cannot write attribute '", name, "'", take_hdf5_error()));
}

std::string File::attr_string(const std::string& key, const std::string& name) const {
  Lock lock;
  const std::string k = normalize(key);
  if (!has_attr(k, name)) fail(k, cat("has no attribute '", name, "'"));
  Id obj(open_object(k), H5Oclose);
  Id attr(H5Aopen(obj.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  Id type(H5Aget_type(attr.get()), H5Tclose);
  Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!attr.ok() || !type.ok() || !space.ok()) fail(k, cat("attribute '", name, "' cannot be read", take_hdf5_error()));
  if (H5Tget_class(type.get()) != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1)
    fail(k, cat("attribute '", name, "' is not a single string"));
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* text = nullptr;
    if (H5Aread(attr.get(), mem.get(), &text) < 0)
      fail(k, cat("attribute '", name, "' cannot be read", take_hdf5_error()));
    std::string out = text ? text : "";
    H5free_memory(text);
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  H5Tset_size(mem.get(), size);
  H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
  std::string out(size, '\0');
  if (H5Aread(attr.get(), mem.get(), out.data()) < 0)
    fail(k, cat("attribute '", name, "' cannot be read", take_hdf5_error()));
  out.resize(std::min(out.find('\0'), out.size()));
  return out;
}

// One scalar numeric attribute: `accepts` decides which stored types may be read as `memory_type`
// (described as `what` in the error).
template <typename T>
T File::attr_scalar(const std::string& key, const std::string& name, bool (*accepts)(hid_t), hid_t memory_type,
                    const char* what) const {
  Lock lock;
  const std::string k = normalize(key);
  if (!has_attr(k, name)) fail(k, cat("has no attribute '", name, "'"));
  Id obj(open_object(k), H5Oclose);
  Id attr(H5Aopen(obj.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  Id type(H5Aget_type(attr.get()), H5Tclose);
  Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!attr.ok() || !type.ok() || !space.ok()) fail(k, cat("attribute '", name, "' cannot be read", take_hdf5_error()));
  if (!accepts(type.get()) || H5Sget_simple_extent_npoints(space.get()) != 1)
    fail(k, cat("attribute '", name, "' is not ", what));
  T value{};
  if (H5Aread(attr.get(), memory_type, &value) < 0)
    fail(k, cat("attribute '", name, "' cannot be read", take_hdf5_error()));
  return value;
}

int64_t File::attr_int(const std::string& key, const std::string& name) const {
  return attr_scalar<int64_t>(
      key, name,
      [](hid_t type) { return H5Tget_class(type) == H5T_INTEGER && classify(type) != ElementType::U64; },
      H5T_NATIVE_INT64, "a single integer");
}

double File::attr_double(const std::string& key, const std::string& name) const {
  return attr_scalar<double>(
      key, name,
      [](hid_t type) { return H5Tget_class(type) == H5T_FLOAT || H5Tget_class(type) == H5T_INTEGER; },
      H5T_NATIVE_DOUBLE, "a single number");
}

// ---- the element types we support --------------------------------------------------------------

#define BERTPERF_H5_INSTANTIATE(T)                                                                  \
  template void File::read_into<T>(const std::string&, T*, size_t) const;                          \
  template std::vector<T> File::read<T>(const std::string&) const;                                 \
  template void File::read_rows<T>(const std::string&, int64_t, int64_t, T*) const;                \
  template Vlen<T> File::read_vlen<T>(const std::string&) const;                                   \
  template Vlen<T> File::read_vlen<T>(const std::string&, int64_t, int64_t) const;                 \
  template void File::write<T>(const std::string&, const T*, const std::vector<int64_t>&);         \
  template void File::write_vlen<T>(const std::string&, const Vlen<T>&);
BERTPERF_H5_INSTANTIATE(float)
BERTPERF_H5_INSTANTIATE(double)
BERTPERF_H5_INSTANTIATE(int8_t)
BERTPERF_H5_INSTANTIATE(uint8_t)
BERTPERF_H5_INSTANTIATE(int16_t)
BERTPERF_H5_INSTANTIATE(int32_t)
BERTPERF_H5_INSTANTIATE(int64_t)
#undef BERTPERF_H5_INSTANTIATE

std::string library_version() {
  Lock lock;
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return cat(major, ".", minor, ".", release);
}

}  // namespace bertperf::h5
