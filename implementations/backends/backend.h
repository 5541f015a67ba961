// A backend: the object the model and the optimizer are handed, which owns memory, copies, its execution context
// and the op vocabulary (backends/ops.h). Several backends live in one binary: the CPU backend in fp32 (OpenBLAS,
// OpenMP) and in fp64 (the test oracle), and the CUDA backend (bf16 activations, fp32 master weights, cuBLASLt,
// cuDNN) when it is built.
//
// implementations/README.md describes the layers, one training step, and how to add an op or a backend; the
// conformance test (tests/cpp/test_backend_ops.cpp) runs every op of every backend against the CPU in fp64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/ops.h"

namespace bertperf {

// Element types of backend memory.
enum class DType : uint8_t { F32, F64, BF16 };
size_t dtype_size(DType type);
const char* dtype_name(DType type);

// DEVICE: where ops run (plain host memory on the CPU). HOST: pageable host memory. PINNED: page-locked host
// memory, for copies that overlap with compute.
enum class MemoryKind : uint8_t { DEVICE, HOST, PINNED };

// What the train config's "backend" block chooses.
struct BackendOptions {
  std::string name = "cpu";  // "cpu" (fp32), "cpu-f64" (the oracle), "cuda"
  int threads = 0;           // CPU threads (0: all)
  int device = -1;           // CUDA device (-1: the local rank's)
  bool capture = true;       // replay the training step as one captured graph where the backend can (CUDA graphs)
};

// Ops recorded once and replayed with the same pointers and sizes (a CUDA graph); what they read from backend
// memory (the step's scalars, a staged batch) may change between replays.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
  virtual void replay() = 0;  // asynchronous, ordered with the ops like any op
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;     // "cpu", "cpu-f64", "cuda"
  virtual std::string describe() const = 0; // one line: device, threads, dtypes, library versions
  // (name, version) of each library the backend runs on, as a run's log and the system description name them.
  virtual std::vector<std::pair<std::string, std::string>> library_versions() const { return {}; }
  virtual DType act_dtype() const = 0;      // A in ops.h
  virtual DType weight_dtype() const = 0;   // W
  virtual DType master_dtype() const = 0;   // F
  // Whether every batch must run at its full capacity (a captured step replays one shape). The CPU runs each
  // batch at its real size.
  virtual bool static_shapes() const = 0;

  // ---- memory and copies ----
  // Aligned to 256 bytes; zero-filled. Throws InputError when the memory is not there.
  virtual void* allocate(size_t bytes, MemoryKind kind) = 0;
  virtual void deallocate(void* p, MemoryKind kind) noexcept = 0;
  // host (HOST or PINNED) -> DEVICE, ordered with the ops; asynchronous when src is PINNED.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // DEVICE -> host; returns when the data is there (after every op issued before it).
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // DEVICE -> DEVICE
  virtual void fill_zero(void* p, size_t bytes) = 0;                // DEVICE
  // dst[i] = src[i] converted, n elements of DEVICE memory (round to nearest even).
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) = 0;
  // Waits for every op issued so far.
  virtual void synchronize() = 0;

  // Time and FLOPs of the dense GEMMs, where a backend can measure them cheaply (the step benchmark reports the GEMM
  // share of a step); null where it cannot. Off until `enabled` is set.
  struct GemmProfile {
    bool enabled = false;
    double seconds = 0;
    double flops = 0;
  };
  virtual GemmProfile* gemm_profile() { return nullptr; }
  // The CUDA stream the ops run on (a cudaStream_t), for a communicator that must be ordered with them (the NCCL
  // gradient reducer); null where ops run on the host.
  virtual void* native_stream() { return nullptr; }

  // Records the ops that `issue` makes, without running them, for replay; null where the backend cannot (the CPU
  // runs ops as they are issued). Inside `issue`: ops, fill_zero and copy only; no allocation, upload, download or
  // synchronize, and every op at a shape it has run at before (libraries plan on a shape's first call).
  virtual std::unique_ptr<CapturedOps> capture(const std::function<void()>& issue) { return nullptr; }

  // ---- sizes the ops need ----
  // Bytes of AttentionForward::saved for a batch of up to `tokens` tokens in sequences of at most max_seqlen.
  virtual size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) const = 0;
  // Bytes of AttentionBackward::workspace, shared by all layers.
  virtual size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) const = 0;

  // ---- the op vocabulary (ops.h) ----
  virtual void linear_forward(const ops::LinearForward& p) = 0;
  virtual void linear_backward(const ops::LinearBackward& p) = 0;
  virtual void activation_backward(const ops::ActivationBackward& p) = 0;
  virtual void embedding_forward(const ops::EmbeddingForward& p) = 0;
  virtual void embedding_backward(const ops::EmbeddingBackward& p) = 0;
  virtual void residual_layernorm_forward(const ops::ResidualLayerNormForward& p) = 0;
  virtual void residual_layernorm_backward(const ops::ResidualLayerNormBackward& p) = 0;
  virtual void attention_forward(const ops::AttentionForward& p) = 0;
  virtual void attention_backward(const ops::AttentionBackward& p) = 0;
  virtual void gather_forward(const ops::GatherForward& p) = 0;
  virtual void gather_backward(const ops::GatherBackward& p) = 0;
  virtual void cross_entropy_forward(const ops::CrossEntropyForward& p) = 0;
  virtual void cross_entropy_backward(const ops::CrossEntropyBackward& p) = 0;
  virtual void gradient_clip(const ops::GradientClip& p) = 0;
  virtual void gradient_clip_finish(const ops::GradientClipFinish& p) = 0;
  virtual void gradient_accumulate(const ops::GradientAccumulate& p) = 0;
  virtual void lamb_moments(const ops::LambMoments& p) = 0;
  virtual void lamb_apply(const ops::LambApply& p) = 0;
};

// Host fp32 values into backend memory of any type, and back (through a temporary device buffer and convert).
void upload_floats(Backend& backend, void* dst, DType dst_type, const float* src, size_t n);
void download_floats(Backend& backend, float* dst, const void* src, DType src_type, size_t n);

// The backend a config names; InputError for one this build does not have.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);
// Every backend this build can run here, for the conformance test ("cpu" always; "cuda" where a GPU is present).
std::vector<std::string> available_backends();

// One allocation of backend memory, released with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, size_t bytes, MemoryKind kind = MemoryKind::DEVICE)
      : backend_(&backend), data_(backend.allocate(bytes, kind)), bytes_(bytes), kind_(kind) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(backend_, o.backend_);
      std::swap(data_, o.data_);
      std::swap(bytes_, o.bytes_);
      std::swap(kind_, o.kind_);
    }
    return *this;
  }
  void reset() noexcept {
    if (data_) backend_->deallocate(data_, kind_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::DEVICE;
};

}  // namespace bertperf
