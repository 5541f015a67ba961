// MD5 (RFC 1321) and the row checksums NVIDIA publishes for the MLPerf BERT HDF5 files
// (hdf5_md5.py: the md5 of Python's str() of each row's input_ids, then the md5 of str() of the
// list of those hex digests), so users can check our output and the official data byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bertperf {

class Md5 {
 public:
  Md5();
  void update(std::string_view bytes);
  // The lower-case hex digest; the object must not be updated afterwards.
  std::string hex();

 private:
  void block(const unsigned char* p);
  uint32_t state_[4];
  uint64_t length_ = 0;
  unsigned char buffer_[64];
  size_t buffered_ = 0;
};

std::string md5_hex(std::string_view bytes);

// md5 of Python's str(list_of_ints): "[101, 2023, 102]".
std::string python_list_md5(const int32_t* values, size_t count);
// md5 of Python's str(list_of_str): "['ab12...', 'cd34...']".
std::string python_str_list_md5(const std::vector<std::string>& digests);

}  // namespace bertperf
