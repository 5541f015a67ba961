// Aligned, fixed-size host memory: the one allocation primitive behind flat parameter memory and
// the activation arena. 256-byte alignment matches what cuBLASLt and vector loads want, so the same
// offsets work when a buffer is mirrored on a GPU.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "core/errors.h"

namespace bertperf {

inline constexpr size_t kAlignment = 256;

inline size_t align_up(size_t n, size_t alignment = kAlignment) {
  return (n + alignment - 1) / alignment * alignment;
}

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) { resize(count); }

  void resize(size_t count) {
    count_ = count;
    const size_t bytes = align_up(count * sizeof(T) + 1);
    data_.reset(static_cast<T*>(std::aligned_alloc(kAlignment, bytes)));
    if (!data_) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_.get()), 0, bytes);
  }
  void zero() { std::memset(static_cast<void*>(data_.get()), 0, count_ * sizeof(T)); }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return count_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t count_ = 0;
};

// Activations: one block of memory carved up at start-up. `take` hands out aligned slices; the model takes all of
// its buffers once, so nothing is allocated inside a training step. The block may be any memory (host, or a
// backend's device memory): the arena only does the arithmetic.
// A measuring arena (the default constructor) hands out null pointers and only counts, so a model can size its
// real block by running the same carving code once.
class Arena {
 public:
  Arena() = default;
  Arena(void* base, size_t bytes) : base_(static_cast<unsigned char*>(base)), capacity_(bytes), measuring_(false) {}

  template <typename T>
  T* take(size_t count) {
    return static_cast<T*>(take_bytes(count * sizeof(T)));
  }
  void* take_bytes(size_t bytes) {
    bytes = align_up(bytes);
    if (measuring_) {
      used_ += bytes;
      return nullptr;
    }
    BERT_CHECK(used_ + bytes <= capacity_, "arena exhausted: need ", used_ + bytes, " bytes, have ", capacity_);
    void* out = base_ + used_;
    used_ += bytes;
    return out;
  }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }

 private:
  unsigned char* base_ = nullptr;
  size_t capacity_ = 0;
  bool measuring_ = true;
  size_t used_ = 0;
};

}  // namespace bertperf
