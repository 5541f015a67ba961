// Staging and read-ahead (batch_pipeline.h).
#include "model/batch_pipeline.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "core/errors.h"

namespace bertperf {

struct BatchPipeline::Impl {
  Backend& backend;
  BatchSource& source;
  const int micro;
  const LossWeighting weighting;
  std::vector<BatchStage> stages;  // set k at [k * micro, (k + 1) * micro)
  int next_set = 0;
  double waited = 0;

  // Read-ahead: the thread fills a set whose state is EMPTY and marks it FULL, or END when the source ran out
  // first (or threw: `error`); next() takes a FULL set, uploads it and marks it EMPTY again.
  enum class State { EMPTY, FULL, END };
  State state[2] = {State::EMPTY, State::EMPTY};
  std::thread thread;
  std::mutex mutex;
  std::condition_variable changed;
  bool stop = false;
  std::exception_ptr error;

  Impl(Backend& b, BatchSource& s, int n, LossWeighting w) : backend(b), source(s), micro(n), weighting(w) {
    BERT_CHECK(n > 0, "a pipeline needs at least one micro-batch a step");
    stages.reserve(2 * size_t(n));
    for (int k = 0; k < 2 * n; ++k) stages.emplace_back(b, s.shape().capacity);
  }

  // Fills set `set` from the source; false when it ran out first.
  bool fill(int set) {
    for (int m = 0; m < micro; ++m)
      if (!source.next(stages[size_t(set * micro + m)].host())) return false;
    return true;
  }

  void read_ahead() {
    for (int set = 0;; set ^= 1) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stop || state[set] == State::EMPTY; });
        if (stop) return;
      }
      State filled = State::END;
      try {
        if (fill(set)) filled = State::FULL;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      state[set] = filled;
      changed.notify_all();
      if (filled == State::END) return;
    }
  }
};

BatchPipeline::BatchPipeline(Backend& backend, BatchSource& source, int micro_batches, LossWeighting weighting)
    : impl_(std::make_unique<Impl>(backend, source, micro_batches, weighting)) {
  if (backend.capabilities().asynchronous) impl_->thread = std::thread([m = impl_.get()] { m->read_ahead(); });
}

BatchPipeline::~BatchPipeline() {
  Impl& m = *impl_;
  if (m.thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      m.stop = true;
      m.changed.notify_all();
    }
    m.thread.join();
  }
}

bool BatchPipeline::reads_ahead() const { return impl_->thread.joinable(); }
double BatchPipeline::wait_seconds() const { return impl_->waited; }

bool BatchPipeline::next(StagedStep& out) {
  Impl& m = *impl_;
  const int set = m.next_set;
  const auto t0 = std::chrono::steady_clock::now();
  if (m.thread.joinable()) {
    std::unique_lock<std::mutex> lock(m.mutex);
    m.changed.wait(lock, [&] { return m.state[set] != Impl::State::EMPTY; });
    if (m.error) std::rethrow_exception(m.error);
    if (m.state[set] == Impl::State::END) return false;
  } else if (!m.fill(set)) {
    m.waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return false;
  }
  m.waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.set = set;
  out.micro.resize(size_t(m.micro));
  out.sequences = 0;
  for (int k = 0; k < m.micro; ++k) {
    const DeviceBatch& batch = m.stages[size_t(set * m.micro + k)].upload(m.weighting);
    out.micro[size_t(k)] = &batch;
    out.sequences += batch.real_sequences;
  }
  m.next_set ^= 1;
  if (m.thread.joinable()) {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.state[set] = Impl::State::EMPTY;
    m.changed.notify_all();
  }
  return true;
}

}  // namespace bertperf
