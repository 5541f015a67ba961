// A backend from outside implementations/, registered with the one line at the bottom: the CPU fp32 backend's memory
// and ops behind an object of its own (every op forwarded through the op list, ops.h's BERTPERF_OPS), with events of
// its own. Linked beside the conformance test (tests/cpp/test_backend_ops.cpp) as test_fake_backend, which runs the
// whole suite on it: what a new backend needs from the project is its entry, nothing else.
#include <memory>

#include "backends/cpu/cpu_backend.h"
#include "registry/registry.h"

namespace bertperf {
namespace {

class FakeEvent final : public Event {
 public:
  std::unique_ptr<Event> inner;
};

Event& inner(Event& e) { return *static_cast<FakeEvent&>(e).inner; }

class FakeBackend final : public Backend {
 public:
  std::string name() const override { return "fake"; }
  std::string describe() const override { return "fake: " + cpu_->describe(); }
  DType act_dtype() const override { return cpu_->act_dtype(); }
  DType weight_dtype() const override { return cpu_->weight_dtype(); }
  DType master_dtype() const override { return cpu_->master_dtype(); }
  const Capabilities& capabilities() const override { return cpu_->capabilities(); }

  void* allocate(size_t bytes, MemoryKind kind) override { return cpu_->allocate(bytes, kind); }
  void deallocate(void* p, MemoryKind kind) noexcept override { cpu_->deallocate(p, kind); }
  void upload(void* dst, const void* src, size_t bytes) override { cpu_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { cpu_->download(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { cpu_->copy(dst, src, bytes); }
  void fill_zero(void* p, size_t bytes) override { cpu_->fill_zero(p, bytes); }
  void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
    cpu_->convert(dst, dst_type, src, src_type, n);
  }
  void synchronize() override { cpu_->synchronize(); }
  std::unique_ptr<Event> make_event() override {
    auto e = std::make_unique<FakeEvent>();
    e->inner = cpu_->make_event();
    return e;
  }
  void record(Event& e) override { cpu_->record(inner(e)); }
  void wait(Event& e) override { cpu_->wait(inner(e)); }
  void host_wait(Event& e) override { cpu_->host_wait(inner(e)); }

  size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) const override {
    return cpu_->attention_saved_bytes(tokens, sequences, max_seqlen, heads);
  }
  size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) const override {
    return cpu_->attention_workspace_bytes(tokens, sequences, max_seqlen, heads);
  }
#define FAKE_FORWARD_OP(enumerator, method, Struct) \
  void method(const ops::Struct& p) override { cpu_->method(p); }
  BERTPERF_OPS(FAKE_FORWARD_OP)
#undef FAKE_FORWARD_OP

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(DType::F32, 0);
};

BackendEntry fake_entry() {
  return {{"fake", "the CPU fp32 backend behind a test's object", DType::F32, DType::F32, DType::F32, true, true},
          [](JsonFields&) {
            return [](const Placement&) -> std::unique_ptr<Backend> { return std::make_unique<FakeBackend>(); };
          }};
}

// The one line: registered before the tests are listed.
const bool registered = (register_backend(fake_entry()), true);

}  // namespace
}  // namespace bertperf
