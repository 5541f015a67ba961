// MD5 per RFC 1321, and the hdf5_md5-style list digests (md5.h).
#include "data/md5.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

namespace bertperf {

namespace {
// Per-round shift amounts and the sine-derived constants of RFC 1321.
constexpr int kShift[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                            5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                            4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                            6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};
struct SineTable {
  uint32_t k[64];
  SineTable() {
    for (int i = 0; i < 64; ++i) k[i] = static_cast<uint32_t>(std::floor(std::fabs(std::sin(i + 1.0)) * 4294967296.0));
  }
};
const SineTable kSine;
}  // namespace

Md5::Md5() : state_{0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u} {}

void Md5::block(const unsigned char* p) {
  uint32_t m[16];
  for (int i = 0; i < 16; ++i)
    m[i] = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 | uint32_t(p[4 * i + 2]) << 16 | uint32_t(p[4 * i + 3]) << 24;
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  for (int i = 0; i < 64; ++i) {
    uint32_t f;
    int g;
    if (i < 16) {
      f = (b & c) | (~b & d);
      g = i;
    } else if (i < 32) {
      f = (d & b) | (~d & c);
      g = (5 * i + 1) % 16;
    } else if (i < 48) {
      f = b ^ c ^ d;
      g = (3 * i + 5) % 16;
    } else {
      f = c ^ (b | ~d);
      g = (7 * i) % 16;
    }
    const uint32_t next = b + std::rotl(a + f + kSine.k[i] + m[g], kShift[i]);
    a = d;
    d = c;
    c = b;
    b = next;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
}

void Md5::update(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  length_ += n;
  if (buffered_) {
    const size_t take = std::min(n, 64 - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < 64) return;
    block(buffer_);
    buffered_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) block(p);
  std::memcpy(buffer_, p, n);
  buffered_ = n;
}

std::string Md5::hex() {
  const uint64_t bits = length_ * 8;
  unsigned char pad[72] = {0x80};
  const size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
  update(std::string_view(reinterpret_cast<const char*>(pad), pad_len));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(bits >> (8 * i));
  update(std::string_view(reinterpret_cast<const char*>(len), 8));
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint32_t word : state_)
    for (int i = 0; i < 4; ++i) {
      const unsigned byte = (word >> (8 * i)) & 0xffu;
      out += digits[byte >> 4];
      out += digits[byte & 15];
    }
  return out;
}

std::string md5_hex(std::string_view bytes) {
  Md5 h;
  h.update(bytes);
  return h.hex();
}

std::string python_list_md5(const int32_t* values, size_t count) {
  thread_local std::string text;  // reused: this runs once per row of a shard
  text.assign(1, '[');
  char digits[16];
  for (size_t i = 0; i < count; ++i) {
    if (i) text += ", ";
    const auto end = std::to_chars(digits, digits + sizeof digits, values[i]).ptr;
    text.append(digits, end);
  }
  text += ']';
  return md5_hex(text);
}

std::string python_str_list_md5(const std::vector<std::string>& digests) {
  std::string text = "[";
  for (size_t i = 0; i < digests.size(); ++i) {
    if (i) text += ", ";
    text += "'" + digests[i] + "'";
  }
  text += "]";
  return md5_hex(text);
}

}  // namespace bertperf
