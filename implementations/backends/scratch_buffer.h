// The growth rule of a backend's working buffers (memory an op needs beyond its arguments), as plain C++ over an
// allocator, so that a CPU test can check it (tests/cpp/test_scratch_buffer.cpp): the CUDA backend instantiates it
// over device memory (cuda/scratch.h), the CPU backends over host memory (cpu/cpu_backend.cpp, cpu/cpu_async.cpp).
//
// A captured graph (Backend::capture) keeps the addresses it was recorded with and writes to them at every
// replay. So a buffer that a graph may point at must outlive every replay: before the first capture, growing frees
// the old buffer (after the allocator waits for the work still using it); from the first capture on, growing keeps
// the old buffer (it is released with the ScratchBuffer), and growing while a capture is being recorded is refused
// with an InternalError naming the buffer (an op met a shape inside a capture that it had not run at before).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/errors.h"

namespace bertperf {

// Whether the backend's queue is being recorded into a graph now, and whether a graph was ever recorded. The
// backend owns one and sets it around each capture; every buffer reads it.
struct CaptureState {
  bool capturing = false;
  bool captured = false;
};

// Allocator: `void* allocate(size_t bytes)` (throws when the memory is not there) and `void release(void* p)
// noexcept`, which waits for the work that may still use p first.
template <typename Allocator>
class ScratchBuffer {
 public:
  ScratchBuffer(Allocator allocator, const CaptureState& capture, const char* name)
      : allocator_(std::move(allocator)), capture_(&capture), name_(name) {}
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() {
    for (void* p : kept_) allocator_.release(p);
    if (data_) allocator_.release(data_);
  }

  // At least `bytes`; contents undefined. The same pointer as the last call unless this one asks for more.
  void* get(size_t bytes) {
    if (bytes <= bytes_) return data_;
    BERT_CHECK(!capture_->capturing, "the ", name_, " buffer would grow from ", bytes_, " to ", bytes,
               " bytes inside a graph capture (an op ran at a shape it had not run at before the capture)");
    void* fresh = allocator_.allocate(bytes);
    if (data_) {
      if (capture_->captured) {
        kept_.push_back(data_);  // a captured graph may still write here
      } else {
        allocator_.release(data_);
      }
    }
    data_ = fresh;
    bytes_ = bytes;
    return data_;
  }
  template <typename T>
  T* as(size_t count) { return static_cast<T*>(get(count * sizeof(T))); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Buffers outgrown after a capture, kept until this one is destroyed.
  size_t kept() const { return kept_.size(); }

 private:
  Allocator allocator_;
  const CaptureState* capture_;
  const char* name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> kept_;
};

}  // namespace bertperf
