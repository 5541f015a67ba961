// cpu-async (cpu_async.h): the CPU fp32 backend's work, queued in issue order on a worker thread of its own.
#include "backends/cpu/cpu_async.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/scratch_buffer.h"
#include "core/errors.h"

namespace bertperf {

namespace {

// One piece of queued work: a closure over trivially copyable values (an op's parameter struct, pointers, sizes),
// held in place, so that queuing it allocates nothing.
class Task {
 public:
  static constexpr size_t kBytes = 256;

  Task() = default;
  template <typename F>
  explicit Task(const F& f) {
    static_assert(sizeof(F) <= kBytes && alignof(F) <= alignof(std::max_align_t), "a queued closure is too large");
    static_assert(std::is_trivially_copyable_v<F> && std::is_trivially_destructible_v<F>,
                  "a queued closure holds values only (an op's parameter struct, pointers)");
    new (storage_) F(f);
    run_ = [](const void* f) { (*static_cast<const F*>(f))(); };
  }
  void operator()() const { run_(storage_); }

 private:
  alignas(std::max_align_t) unsigned char storage_[kBytes];
  void (*run_)(const void*) = nullptr;
};

// The worker thread and its ring of tasks. A task's position is its 1-based number in issue order; everything up to
// completed() has run.
class WorkQueue {
 public:
  WorkQueue(size_t capacity, int threads, int64_t delay_us, uint64_t delay_seed)
      : ring_(capacity), delay_us_(delay_us), rng_(delay_seed) {
    worker_ = std::thread([this, threads] { work(threads); });
  }
  ~WorkQueue() {
    drain();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    has_work_.notify_all();
    worker_.join();
    // A failure no wait ever saw is said rather than lost (a destructor cannot throw it).
    if (failure_ && !reported_) {
      try {
        std::rethrow_exception(failure_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cpu-async: queued work failed and no wait saw it: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "cpu-async: queued work failed and no wait saw it\n");
      }
    }
  }

  // Queues `task` (waiting while the ring is full) and returns its position.
  uint64_t push(const Task& task) {
    std::unique_lock<std::mutex> lock(mutex_);
    has_space_.wait(lock, [this] { return issued_ - taken_ < ring_.size(); });
    ring_[issued_ % ring_.size()] = task;
    const uint64_t at = ++issued_;
    lock.unlock();
    has_work_.notify_one();
    return at;
  }
  uint64_t issued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_;
  }
  // Blocks until the task at `position` and all before it have run; rethrows the first failure of any task.
  void wait(uint64_t position) {
    std::unique_lock<std::mutex> lock(mutex_);
    progressed_.wait(lock, [&] { return completed_ >= position; });
    if (failure_) {
      reported_ = true;
      std::rethrow_exception(failure_);
    }
  }
  // Blocks until everything issued so far has run, whatever failed.
  void drain() noexcept {
    std::unique_lock<std::mutex> lock(mutex_);
    progressed_.wait(lock, [this] { return completed_ >= issued_; });
  }

 private:
  void work(int threads) {
    omp_set_num_threads(threads);  // this thread's OpenMP teams, as the backend's owner asked for
    std::uniform_int_distribution<int64_t> delay(0, delay_us_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      has_work_.wait(lock, [this] { return stop_ || taken_ < issued_; });
      if (taken_ == issued_) return;  // stopping, and nothing is left
      const Task task = ring_[taken_ % ring_.size()];
      ++taken_;
      const bool skip = failure_ != nullptr;  // the queue is lost after a failure: nothing more runs
      lock.unlock();
      has_space_.notify_one();
      std::exception_ptr failed;
      if (!skip) {
        if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay(rng_)));
        try {
          task();
        } catch (...) {
          failed = std::current_exception();
        }
      }
      lock.lock();
      if (failed && !failure_) failure_ = failed;
      ++completed_;
      progressed_.notify_all();
    }
  }

  std::vector<Task> ring_;
  const int64_t delay_us_;
  std::mt19937_64 rng_;  // the worker's only
  mutable std::mutex mutex_;
  std::condition_variable has_work_, has_space_, progressed_;
  uint64_t issued_ = 0, taken_ = 0, completed_ = 0;
  std::exception_ptr failure_;
  bool reported_ = false;  // a wait has rethrown failure_
  bool stop_ = false;
  std::thread worker_;
};

// A point in one cpu-async backend's queue: it has passed once the tasks issued before its record() have run.
class QueueEvent final : public Event {
 public:
  explicit QueueEvent(const void* owner) : owner(owner) {}
  const void* const owner;
  std::atomic<uint64_t> position{0};
};

// How many tasks the host may run ahead of the worker before it waits (a BERT-large step issues about 600).
constexpr size_t kQueueCapacity = 4096;

class CpuAsyncBackend final : public Backend {
 public:
  explicit CpuAsyncBackend(const CpuAsyncOptions& options)
      : inner_(make_cpu_backend(options.bf16 ? DType::BF16 : DType::F32, options.threads)),
        options_(options),
        queue_(kQueueCapacity, inner_->threads(), options.delay_us, options.delay_seed) {
    caps_.static_shapes = true;
    caps_.asynchronous = true;
    caps_.capture = true;
    caps_.host_functions = options.host_functions;
    caps_.host_memory = true;
  }
  ~CpuAsyncBackend() override { queue_.drain(); }

  std::string name() const override { return "cpu-async"; }
  std::string describe() const override {
    return cat("cpu-async: the ", options_.bf16 ? "cpu-bf16" : "cpu", " backend's work queued on a worker thread",
               options_.delay_us > 0 ? cat(", random delays of up to ", options_.delay_us, " us (seed ",
                                           options_.delay_seed, ")")
                                     : std::string(),
               options_.blocking_uploads ? ", blocking uploads" : "",
               options_.host_functions ? "" : ", no host functions", "; ", inner_->describe());
  }
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    return inner_->library_versions();
  }
  DType act_dtype() const override { return inner_->act_dtype(); }
  DType weight_dtype() const override { return inner_->weight_dtype(); }
  DType master_dtype() const override { return inner_->master_dtype(); }
  const Capabilities& capabilities() const override { return caps_; }

  // ---- memory and copies ----
  void* allocate(size_t bytes, MemoryKind kind) override {
    outside_capture("allocate");
    void* p = inner_->allocate(bytes, kind);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    live_[reinterpret_cast<uintptr_t>(p)] = {bytes, kind};
    return p;
  }
  void deallocate(void* p, MemoryKind kind) noexcept override {
    if (!p) return;
    queue_.drain();  // work issued before may still use p
    {
      std::lock_guard<std::mutex> lock(memory_mutex_);
      live_.erase(reinterpret_cast<uintptr_t>(p));
    }
    inner_->deallocate(p, kind);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    outside_capture("upload");
    const uint64_t at = enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
    // Pageable memory (or every upload, with "blocking_uploads"): read before the call returns.
    if (options_.blocking_uploads || !in_pinned(src, bytes)) {
      count_host_wait();
      queue_.wait(at);
    }
  }
  void download(void* dst, const void* src, size_t bytes) override {
    outside_capture("download");
    enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    issue([dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  void fill_zero(void* p, size_t bytes) override {
    issue([p, bytes] { std::memset(p, 0, bytes); });
  }
  void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
    issue([this, dst, dst_type, src, src_type, n] { inner_->convert(dst, dst_type, src, src_type, n); });
  }
  void synchronize() override {
    outside_capture("synchronize");
    count_host_wait();
    queue_.wait(queue_.issued());
  }

  // ---- order ----
  std::unique_ptr<Event> make_event() override { return std::make_unique<QueueEvent>(this); }
  void record(Event& event) override {
    QueueEvent& e = own(event);
    if (std::vector<Recorded>* r = recording()) {
      r->push_back({Task(), &e});
    } else {
      e.position = queue_.issued();
    }
  }
  void wait(Event& event) override { own(event); }  // one queue runs in order
  void host_wait(Event& event) override {
    outside_capture("host_wait");
    count_host_wait();
    queue_.wait(own(event).position);
  }

  std::unique_ptr<CapturedOps> capture(const std::function<void()>& issue) override;
  void enqueue_host_function(HostFunction fn, void* arg) override {
    if (!caps_.host_functions) return Backend::enqueue_host_function(fn, arg);  // "host_functions": false
    issue([fn, arg] { fn(arg); });
  }

  // ---- ops ----
  size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) const override {
    return inner_->attention_saved_bytes(tokens, sequences, max_seqlen, heads);
  }
  size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) const override {
    return inner_->attention_workspace_bytes(tokens, sequences, max_seqlen, heads);
  }
  // Every op of the list (ops.h: BERTPERF_OPS), queued as a closure over its parameter struct.
#define BERTPERF_QUEUE_OP(enumerator, method, Struct)                                          \
  void method(const ops::Struct& p) override {                                                 \
    queue(p, [](CpuOpsBackend& inner, const ops::Struct& q, auto... s) { inner.method(q, s...); }); \
  }
  BERTPERF_OPS(BERTPERF_QUEUE_OP)
#undef BERTPERF_QUEUE_OP

 private:
  friend class QueueGraph;

  // What a capture records: a task, or (task empty) an event's record.
  struct Recorded {
    Task task;
    QueueEvent* record = nullptr;
  };

  // Queues `f` now, or records it when a capture is under way.
  template <typename F>
  void issue(const F& f) {
    if (std::vector<Recorded>* r = recording()) {
      r->push_back({Task(f), nullptr});
    } else {
      queue_.push(Task(f));
    }
  }
  // Queues op p as run(inner backend, p), with the partial sums (cpu::scratch_doubles) of an op that takes them
  // resolved now.
  template <typename P, typename Run>
  void queue(const P& p, Run run) {
    if constexpr (requires(const P& q) { cpu::scratch_doubles(q); }) {
      issue([this, p, run, s = partials(p)] { run(*inner_, p, live(s)); });
    } else {
      issue([this, p, run] { run(*inner_, p); });
    }
  }
  template <typename F>
  uint64_t enqueue(const F& f) {
    return queue_.push(Task(f));
  }
  // The capture this thread is making, if any. A capture is the capturing thread's alone, as CUDA's thread-local
  // capture mode (graph_capture.cu) makes it: another thread's calls meanwhile (the batch pipeline's read-ahead
  // waiting for an upload before it refills a pinned block) run as outside a capture.
  std::vector<Recorded>* recording() const {
    return capture_thread_.load(std::memory_order_acquire) == std::this_thread::get_id() ? recording_ : nullptr;
  }
  void outside_capture(const char* what) const {
    BERT_CHECK(!recording(), "cpu-async: ", what, " inside a capture (device.h: ops, fills, copies and events only)");
  }
  QueueEvent& own(Event& event) const {
    auto* e = dynamic_cast<QueueEvent*>(&event);
    BERT_CHECK(e && e->owner == this, "cpu-async: an event made by another backend");
    return *e;
  }
  // Whether [p, p + bytes) lies in PINNED memory this backend allocated.
  bool in_pinned(const void* p, size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(memory_mutex_);
    auto it = live_.upper_bound(at);
    if (it == live_.begin()) return false;
    --it;
    return it->second.kind == MemoryKind::PINNED && at + bytes <= it->first + it->second.bytes;
  }
  // The partial sums of an op, resolved now (a captured op keeps them, as a graph keeps its addresses).
  template <typename Op>
  std::span<double> partials(const Op& p) {
    const size_t n = cpu::scratch_doubles(p);
    return {scratch_.as<double>(n), n};
  }
  // `s` when its memory is still allocated (on the worker, as the op runs): an op that would write freed memory is
  // what a replayed graph pointing at a freed buffer does on a GPU.
  std::span<double> live(std::span<double> s) const {
    if (s.empty()) return s;
    std::lock_guard<std::mutex> lock(memory_mutex_);
    BERT_CHECK(live_.count(reinterpret_cast<uintptr_t>(s.data())),
               "cpu-async: an op's partial-sum buffer was freed before the op ran (a captured op replayed after its "
               "working buffer grew and the old one was released)");
    return s;
  }

  // The partial-sum buffer's memory: this backend's, released after the work issued before (deallocate drains).
  struct QueueAllocator {
    CpuAsyncBackend* backend;
    void* allocate(size_t bytes) const { return backend->allocate(bytes, MemoryKind::DEVICE); }
    void release(void* p) const noexcept { backend->deallocate(p, MemoryKind::DEVICE); }
  };
  struct Allocation {
    size_t bytes;
    MemoryKind kind;
  };

  // Declared in the order they must outlive each other: the worker runs the inner backend's ops, the partial-sum
  // buffer goes through deallocate, which drains the queue and updates the allocations.
  std::unique_ptr<CpuOpsBackend> inner_;
  const CpuAsyncOptions options_;
  Capabilities caps_;
  mutable std::mutex memory_mutex_;
  std::map<uintptr_t, Allocation> live_;  // what allocate handed out and deallocate has not taken back, by address
  WorkQueue queue_;
  std::vector<Recorded>* recording_ = nullptr;  // the capture under way, if any, read by its thread only
  std::atomic<std::thread::id> capture_thread_{};  // the thread making it (none: a default id)
  CaptureState capture_state_;
  ScratchBuffer<QueueAllocator> scratch_{{this}, capture_state_, "cpu-async backend's partial-sum"};
};

// A capture: its tasks, queued again at each replay (the queue holds a reference to each, so the graph drains the
// queue before it goes).
class QueueGraph final : public CapturedOps {
 public:
  explicit QueueGraph(CpuAsyncBackend& backend) : backend_(backend) {}
  ~QueueGraph() override { backend_.queue_.drain(); }
  void replay() override {
    for (const CpuAsyncBackend::Recorded& r : recorded) {
      if (r.record) {
        backend_.record(*r.record);
      } else {
        backend_.issue([task = &r.task] { (*task)(); });
      }
    }
  }
  std::vector<CpuAsyncBackend::Recorded> recorded;

 private:
  CpuAsyncBackend& backend_;
};

std::unique_ptr<CapturedOps> CpuAsyncBackend::capture(const std::function<void()>& issue) {
  BERT_CHECK(capture_thread_.load() == std::thread::id(), "cpu-async: a capture inside a capture");
  auto graph = std::make_unique<QueueGraph>(*this);
  recording_ = &graph->recorded;
  capture_thread_.store(std::this_thread::get_id(), std::memory_order_release);
  // From here on, captured ops may hold the partial-sum buffer: it never grows inside a capture and is never freed
  // while the backend lives (scratch_buffer.h).
  capture_state_.capturing = capture_state_.captured = true;
  const auto end = [&] {
    capture_thread_.store(std::thread::id(), std::memory_order_release);
    recording_ = nullptr;
    capture_state_.capturing = false;
  };
  try {
    issue();
  } catch (...) {
    end();
    throw;
  }
  end();
  return graph;
}

}  // namespace

std::unique_ptr<Backend> make_cpu_async_backend(const CpuAsyncOptions& options) {
  return std::make_unique<CpuAsyncBackend>(options);
}

}  // namespace bertperf
