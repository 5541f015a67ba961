// The CUDA backend (cuda_backend.h): memory, copies and the op vocabulary on one stream, each op forwarded to its
// op family's file beside this one.
#include "backends/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_choice.h"
#include "backends/cuda/cuda_capabilities.h"
#include "backends/cuda/cross_entropy.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/elementwise.h"
#include "backends/cuda/embedding.h"
#include "backends/cuda/graph_capture.h"
#include "backends/cuda/layernorm.h"
#include "backends/cuda/linear.h"
#include "backends/cuda/optimizer.h"
#include "backends/cuda/scratch.h"
#include "core/buffer.h"
#include "core/errors.h"

namespace bertperf {

namespace {

// "13.0" from 13000 (the driver's and the runtime's CUDA: major * 1000 + minor * 10).
std::string cuda_version(int v) { return cat(v / 1000, ".", v % 1000 / 10); }

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaOptions& options, int local_rank) : options_(options) {
    int device = options.device;
    const int count = gpu::device_count();
    if (count == 0) throw_input("backend", "cuda: there is no CUDA device here");
    if (device < 0) device = local_rank % count;
    if (device >= count)
      throw_input("backend", cat("cuda: device ", device, " does not exist (", count, " devices here)"));
    ctx_.device = device;
    gpu::set_device(device);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    ctx_.sm = prop.major * 10 + prop.minor;
    BERT_CHECK(ctx_.sm >= 80, "the CUDA backend needs compute capability 8.0 or newer (bf16 tensor cores); device ",
               device, " (", prop.name, ") has ", prop.major, ".", prop.minor);
    if (options.fp8 && ctx_.sm < 89)
      throw_input("backend", cat("cuda: \"precision\": \"fp8\" needs compute capability 8.9 or newer (FP8 tensor "
                                 "cores); device ", device, " (", prop.name, ") has ", prop.major, ".", prop.minor));
    device_name_ = prop.name;
    memory_gib_ = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    stream_ = std::make_unique<gpu::Stream>();
    ctx_.stream = gpu::native(*stream_);
    CUBLAS_CHECK(cublasLtCreate(&ctx_.lt));
    CUDNN_CHECK(cudnnCreate(&ctx_.cudnn));
    CUDNN_CHECK(cudnnSetStream(ctx_.cudnn, ctx_.stream));
    gemm_ = std::make_unique<cuda::GemmRunner>(ctx_);
    scratch_ = std::make_unique<cuda::OpScratch>(ctx_);
    // The attention (the kernel where "deterministic" rules cuDNN's out) and what the backend declares.
    const cuda::CudaDeclared declared = cuda::cuda_declared(options, ctx_.sm);
    attention_ = std::make_unique<cuda::AttentionRunner>(
        ctx_, declared.attention, static_cast<size_t>(options.attention_workspace_mb * 1048576.0));
    own_gelu_ = options.gelu == GeluImpl::KERNEL;
    caps_ = declared.capabilities;
  }

  ~CudaBackend() override {
    // No throwing here: a failed teardown is not worth a terminate. What the handles made goes before them.
    cudaStreamSynchronize(ctx_.stream);
    attention_ = nullptr;
    gemm_ = nullptr;
    scratch_ = nullptr;
    if (ctx_.cudnn) cudnnDestroy(ctx_.cudnn);
    if (ctx_.lt) cublasLtDestroy(ctx_.lt);
    stream_ = nullptr;
  }

  std::string name() const override { return "cuda"; }
  const Capabilities& capabilities() const override { return caps_; }
  // The libraries as loaded at run time (the driver's CUDA version, the runtime, cuBLASLt, cuDNN), and the versions
  // built against where they can differ.
  std::string describe() const override {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    return cat("cuda: device ", ctx_.device, " ", device_name_, " (sm ", ctx_.sm, ", ", memory_gib_,
               " GiB); bf16 activations and weights, fp32 master weights; driver CUDA ", cuda_version(driver),
               ", runtime ", cuda_version(runtime), ", cuBLASLt ", cuda::library_version(cublasLtGetVersion()),
               ", cuDNN ", cuda::library_version(cudnnGetVersion()), " (built with ",
               cuda::library_version(CUDNN_VERSION), ", cudnn-frontend ", cuda::cudnn_frontend_version(), ")",
               own_gelu_ ? "; GELU in own kernels" : "; GELU in cuBLASLt epilogues",
               "; cuDNN attention workspace cap ", options_.attention_workspace_mb, " MiB",
               options_.blocking_uploads ? "; blocking uploads" : "",
               options_.fp8 ? cat("; encoder GEMMs in FP8 (E4M3 forward, E5M2 gradients, delayed scaling, amax "
                                  "history ", options_.fp8_recipe.history, ", margin ", options_.fp8_recipe.margin, ")")
                            : std::string());
  }
  // Versions of the libraries loaded (the driver's CUDA version as the driver reports it, 0.0 where there is none).
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    return {{"CUDA driver", cuda_version(driver)},
            {"CUDA", cuda_version(runtime)},
            {"cuBLASLt", cuda::library_version(cublasLtGetVersion())},
            {"cuDNN", cuda::library_version(cudnnGetVersion())}};
  }
  std::vector<std::pair<std::string, std::string>> paths_taken() const override {
    const std::string attention = attention_->path();
    if (attention.empty()) return {};
    return {{"attention", attention}};
  }
  DType act_dtype() const override { return DType::BF16; }
  DType weight_dtype() const override { return DType::BF16; }
  DType master_dtype() const override { return DType::F32; }
  const Fp8Recipe* fp8_recipe() const override { return options_.fp8 ? &options_.fp8_recipe : nullptr; }

  void* allocate(size_t bytes, MemoryKind kind) override {
    const size_t rounded = align_up(bytes == 0 ? 1 : bytes);  // a 0-byte request gets 256 bytes, as the CPU's
    void* p = nullptr;
    switch (kind) {
      case MemoryKind::DEVICE:
        if (cudaMalloc(&p, rounded) != cudaSuccess) {
          cudaGetLastError();
          throw_input("cuda backend", cat("cannot allocate ", bytes, " bytes of device memory"));
        }
        // On the backend's stream (non-blocking, so not ordered with the legacy default stream's cudaMemset).
        CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, ctx_.stream));
        return p;
      case MemoryKind::PINNED:
        if (cudaHostAlloc(&p, rounded, cudaHostAllocDefault) != cudaSuccess) {
          cudaGetLastError();
          throw_input("cuda backend", cat("cannot allocate ", bytes, " bytes of pinned host memory"));
        }
        std::memset(p, 0, rounded);
        return p;
      case MemoryKind::HOST:
        p = std::aligned_alloc(256, rounded);
        if (!p) throw_input("cuda backend", cat("cannot allocate ", bytes, " bytes of host memory"));
        std::memset(p, 0, rounded);
        return p;
    }
    return nullptr;
  }
  void deallocate(void* p, MemoryKind kind) noexcept override {
    if (!p) return;
    switch (kind) {
      case MemoryKind::DEVICE:
        // Ops issued before may still read it.
        cudaStreamSynchronize(ctx_.stream);
        cudaFree(p);
        return;
      case MemoryKind::PINNED:
        cudaStreamSynchronize(ctx_.stream);
        cudaFreeHost(p);
        return;
      case MemoryKind::HOST: std::free(p); return;
    }
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_.stream));
    // From pageable memory the caller may reuse src as soon as we return: wait for the copy.
    if (!is_pinned(src) || options_.blocking_uploads) {
      count_host_wait();
      CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    }
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream));
  }
  void fill_zero(void* p, size_t bytes) override {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx_.stream));
  }
  void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
    cuda::convert(ctx_, dst, dst_type, src, src_type, n);
  }
  void synchronize() override {
    count_host_wait();
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
  std::unique_ptr<Event> make_event() override { return std::make_unique<gpu::Event>(); }
  void record(Event& e) override { CUDA_CHECK(cudaEventRecord(gpu::native(e), ctx_.stream)); }
  void wait(Event& e) override { CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, gpu::native(e), 0)); }
  void host_wait(Event& e) override {
    count_host_wait();
    CUDA_CHECK(cudaEventSynchronize(gpu::native(e)));
  }
  std::unique_ptr<CapturedOps> capture(const std::function<void()>& issue) override {
    return cuda::capture_graph(ctx_, issue);
  }
  void enqueue_host_function(HostFunction fn, void* arg) override {
    CUDA_CHECK(cudaLaunchHostFunc(ctx_.stream, fn, arg));  // a host node when captured
  }

  size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) const override {
    return cuda::attention_saved_bytes(tokens, sequences, max_seqlen, heads);
  }
  size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) const override {
    return cuda::attention_workspace_bytes(tokens, sequences, max_seqlen, heads);
  }

  void linear_forward(const ops::LinearForward& p) override {
    cuda::linear_forward(ctx_, *gemm_, *scratch_, own_gelu_, p);
  }
  void linear_backward(const ops::LinearBackward& p) override {
    cuda::linear_backward(ctx_, *gemm_, *scratch_, own_gelu_, p);
  }
  void activation_backward(const ops::ActivationBackward& p) override { cuda::activation_backward(ctx_, p); }
  void embedding_forward(const ops::EmbeddingForward& p) override { cuda::embedding_forward(ctx_, p); }
  void embedding_backward(const ops::EmbeddingBackward& p) override {
    cuda::embedding_backward(ctx_, *scratch_, p);
  }
  void residual_layernorm_forward(const ops::ResidualLayerNormForward& p) override {
    cuda::residual_layernorm_forward(ctx_, p);
  }
  void residual_layernorm_backward(const ops::ResidualLayerNormBackward& p) override {
    cuda::residual_layernorm_backward(ctx_, *scratch_, p);
  }
  void attention_forward(const ops::AttentionForward& p) override { attention_->forward(ctx_, p); }
  void attention_backward(const ops::AttentionBackward& p) override { attention_->backward(ctx_, p); }
  void gather_forward(const ops::GatherForward& p) override { cuda::gather_forward(ctx_, p); }
  void gather_backward(const ops::GatherBackward& p) override { cuda::gather_backward(ctx_, *scratch_, p); }
  void cross_entropy_forward(const ops::CrossEntropyForward& p) override {
    cuda::cross_entropy_forward(ctx_, *scratch_, p);
  }
  void cross_entropy_backward(const ops::CrossEntropyBackward& p) override { cuda::cross_entropy_backward(ctx_, p); }
  void gradient_clip(const ops::GradientClip& p) override { cuda::gradient_clip(ctx_, *scratch_, p); }
  void gradient_clip_finish(const ops::GradientClipFinish& p) override { cuda::gradient_clip_finish(ctx_, p); }
  void gradient_accumulate(const ops::GradientAccumulate& p) override { cuda::gradient_accumulate(ctx_, p); }
  void lamb_moments(const ops::LambMoments& p) override { cuda::lamb_moments(ctx_, *scratch_, p); }
  void lamb_apply(const ops::LambApply& p) override { cuda::lamb_apply(ctx_, p); }
  void fp8_scale_update(const ops::Fp8ScaleUpdate& p) override { cuda::fp8_scale_update(ctx_, p); }
  void schedule_step(const ops::ScheduleStep& p) override { cuda::schedule_step(ctx_, p); }
  void record_step(const ops::RecordStep& p) override { cuda::record_step(ctx_, p); }

 private:
  static bool is_pinned(const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.type == cudaMemoryTypeHost;
  }

  CudaOptions options_;
  Capabilities caps_;
  std::unique_ptr<gpu::Stream> stream_;  // ctx_.stream
  cuda::CudaContext ctx_;
  std::string device_name_;
  double memory_gib_ = 0;
  bool own_gelu_ = false;
  std::unique_ptr<cuda::GemmRunner> gemm_;
  std::unique_ptr<cuda::OpScratch> scratch_;
  std::unique_ptr<cuda::AttentionRunner> attention_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options, int local_rank) {
  return std::make_unique<CudaBackend>(options, local_rank);
}

int cuda_device_count() { return gpu::device_count(); }

}  // namespace bertperf
