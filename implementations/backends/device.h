// The device part of a backend (backend.h): its memory kinds, copies, the order work runs in (events), what it can
// do (capabilities), and capture. The communication layer (comm/) sees a backend only through this part; the model
// sees the op vocabulary too.
//
// Asynchrony is explicit. A backend may run ops, copies and fills after they are issued, in issue order on one
// queue (a CUDA stream; cpu-async's worker thread); Capabilities::asynchronous says whether it does. Then:
//  - upload from PINNED memory reads the host buffer when the copy runs: the host must not rewrite it before an
//    event recorded after the upload has completed (host_wait). An upload from any other host memory has read it
//    when upload returns.
//  - download lands in host memory when it runs: the host reads it only after an event recorded after the download
//    has completed, or after synchronize(). (On a synchronous backend both hold at once.)
//  - deallocate waits for the work issued before it that may touch the memory.
// An Event marks a point in a backend's queue: record() places it after everything issued so far, wait() makes
// work issued later start after it, host_wait() blocks the calling thread until it has passed. (A GPU backend's
// events are the GPU runtime's, gpu/runtime.h, which a library ordering its own stream with the backend's work asks
// for.) Events are made once, outside the step (make_event allocates).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "backends/dtype.h"
#include "backends/ops.h"

namespace bertperf {

// DEVICE: where ops run (plain host memory on a CPU backend). HOST: pageable host memory. PINNED: page-locked host
// memory, for copies that overlap with compute.
enum class MemoryKind : uint8_t { DEVICE, HOST, PINNED };

// The collective library that sums this backend's DEVICE memory across ranks (comm/transport.h): MPI where it is host
// memory, NCCL where it is a GPU's.
enum class Collectives : uint8_t { MPI, NCCL };

// What a backend can do, fixed when it is built.
struct Capabilities {
  bool static_shapes = false;  // every batch runs at its full capacity (a captured step replays one shape)
  bool asynchronous = false;   // work runs after it is issued (see above); false: done when the call returns
  bool capture = false;        // capture() records work for replay
  bool host_functions = false; // enqueue_host_function() runs host code in the queue's order, captured like an op
  bool host_memory = true;     // DEVICE memory is host memory, which host code (MPI) may read and write once the
                               // work that touches it has completed
  Collectives collectives = Collectives::MPI;  // the transport that reads and writes DEVICE memory
  // Ops whose results may differ between two runs on the same inputs (a library's non-deterministic algorithm);
  // every other op gives the same bits every time.
  ops::OpMask nondeterministic;
  // Ops whose dropout masks come from the backend's own generator rather than core/philox.h (a fused library kernel
  // with its own RNG): same rate and scale, other masks.
  ops::OpMask own_dropout_masks;
};

// A point in a backend's queue of work (see above).
class Event {
 public:
  virtual ~Event() = default;
};

// Work recorded once and replayed with the same pointers and sizes (a CUDA graph); what it reads from backend memory
// (the step's scalars, a staged batch) may change between replays.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
  virtual void replay() = 0;  // issued like any op
};

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const Capabilities& capabilities() const = 0;

  // ---- memory and copies ----
  // Aligned to 256 bytes; zero-filled. Throws InputError when the memory is not there.
  virtual void* allocate(size_t bytes, MemoryKind kind) = 0;
  virtual void deallocate(void* p, MemoryKind kind) noexcept = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;    // host (HOST or PINNED) -> DEVICE
  virtual void download(void* dst, const void* src, size_t bytes) = 0;  // DEVICE -> host
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;      // DEVICE -> DEVICE
  virtual void fill_zero(void* p, size_t bytes) = 0;                    // DEVICE
  // dst[i] = src[i] converted, n elements of DEVICE memory (round to nearest even, once).
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) = 0;
  // Waits for every piece of work issued so far.
  virtual void synchronize() = 0;

  // ---- order ----
  virtual std::unique_ptr<Event> make_event() = 0;
  virtual void record(Event& event) = 0;
  virtual void wait(Event& event) = 0;
  virtual void host_wait(Event& event) = 0;

  // Records the work `issue` makes, without running it, for replay; null where the backend cannot
  // (capabilities().capture false). Inside `issue`: ops, fill_zero, copy and events only; no allocation, upload,
  // download or synchronize, and every op at a shape it has run at before (libraries plan on a shape's first call).
  // A capture is its thread's: other threads' calls meanwhile (a wait for an earlier event) run as outside it.
  virtual std::unique_ptr<CapturedOps> capture(const std::function<void()>& issue) { return nullptr; }

  // Queues fn(arg) to run on the host in this backend's order, as an op is (capabilities().host_functions): after the
  // work issued before it, before the work issued after it; a capture records it (a CUDA graph's host node; a task on
  // cpu-async's worker), so `arg` must outlive every replay. fn must not call the backend. An exception fn throws is
  // a failure of the backend's work (cpu-async: rethrown by the next wait; CUDA: the process ends). InternalError
  // where the backend has none.
  using HostFunction = void (*)(void* arg);
  virtual void enqueue_host_function(HostFunction fn, void* arg);

  // How many times the host has waited for this backend's work so far: synchronize(), host_wait(), and an upload
  // that returns only once its copy has run (pageable memory on an asynchronous backend), from any thread. A
  // synchronous backend counts the same calls, so a step's waits read the same on every backend (bench-step's
  // host_waits_per_step).
  int64_t host_waits() const { return host_waits_.load(std::memory_order_relaxed); }
  // The waits the calling thread has made, on any backend: a step's thread is told from a batch pipeline's reader,
  // whose wait for the upload that last read a pinned block (model/batch_stage.h) holds the reader back while the
  // device works through the steps queued before that upload (the device is not left without work).
  static int64_t host_waits_of_this_thread() { return this_threads_waits(); }

 protected:
  void count_host_wait() {
    host_waits_.fetch_add(1, std::memory_order_relaxed);
    ++this_threads_waits();
  }

 private:
  std::atomic<int64_t> host_waits_{0};
  static int64_t& this_threads_waits() {
    static thread_local int64_t waits = 0;
    return waits;
  }
};

// One allocation of device memory, released with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& device, size_t bytes, MemoryKind kind = MemoryKind::DEVICE)
      : device_(&device), data_(device.allocate(bytes, kind)), bytes_(bytes), kind_(kind) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(device_, o.device_);
      std::swap(data_, o.data_);
      std::swap(bytes_, o.bytes_);
      std::swap(kind_, o.kind_);
    }
    return *this;
  }
  void reset() noexcept {
    if (data_) device_->deallocate(data_, kind_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::DEVICE;
};

}  // namespace bertperf
