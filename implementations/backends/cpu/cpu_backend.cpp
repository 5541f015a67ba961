// The CPU backend (cpu_backend.h): CpuBackend<T> forwards every op to cpu::op<T> (cpu_ops.h), with T = float for
// "cpu", double for "cpu-f64" (activations, weights and master weights all T) and bf16 for "cpu-bf16" (bf16
// activations and weight copy, fp32 master weights, gradients and moments: bf16.h's Types<T>; its linear layers run
// on the backend's own GEMM context, gemm_bf16.h). Device, host and pinned memory are the same aligned host memory.
// This file and the kernels beside it are the only code that knows OpenMP, OpenBLAS and oneDNN.
#include "backends/cpu/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/scratch_buffer.h"
#include "core/buffer.h"
#include "core/errors.h"

namespace bertperf {

namespace {

// OpenMP runs every parallel loop and the split products; OpenBLAS is asked for the same count so that a BLAS call
// made outside the backend's own splitting (none today) would not oversubscribe. <= 0 keeps the current setting
// (OMP_NUM_THREADS, or all cores). Returns the count in use.
int set_cpu_threads(int threads) {
  if (threads > 0) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
  }
  return omp_get_max_threads();
}

// The version of the OpenBLAS library loaded, from its configuration line ("OpenBLAS 0.3.21 DYNAMIC_ARCH ..."); the
// header's version when the line says otherwise.
std::string openblas_version() {
  const std::string config = openblas_get_config();
  const std::string prefix = "OpenBLAS ";
  if (config.rfind(prefix, 0) == 0) return config.substr(prefix.size(), config.find(' ', prefix.size()) - prefix.size());
  std::string header = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  header = header.substr(header.find_first_not_of(' '));
  if (header.rfind(prefix, 0) == 0) header = header.substr(prefix.size());
  return header.substr(0, header.find(' '));
}

// Aligned host memory, zero-filled; freed at once (nothing runs after the call that issued it).
void* host_allocate(size_t bytes) {
  const size_t rounded = align_up(bytes == 0 ? 1 : bytes);
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw_input("cpu backend", cat("cannot allocate ", bytes, " bytes of memory"));
  std::memset(p, 0, rounded);
  return p;
}

struct HostAllocator {
  void* allocate(size_t bytes) const { return host_allocate(bytes); }
  void release(void* p) const noexcept { std::free(p); }
};

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  if constexpr (std::is_same_v<T, double>) return DType::F64;
  return DType::BF16;
}

template <typename T>
class CpuBackend final : public CpuOpsBackend {
 public:
  using A = typename cpu::Types<T>::A;
  using F = typename cpu::Types<T>::F;
  static constexpr DType kAct = dtype_of<A>(), kMaster = dtype_of<F>();
  static constexpr bool kBf16 = cpu::is_bf16<T>;

  CpuBackend(int threads, bool static_shapes) requires(!kBf16) : threads_(set_cpu_threads(threads)) {
    caps_.static_shapes = static_shapes;
  }
  // The GEMM path is decided (and said on stderr, when emulated) now.
  explicit CpuBackend(const CpuBf16Options& options) requires(kBf16)
      : threads_(set_cpu_threads(options.threads)),
        gemms_(std::make_unique<cpu::Bf16GemmContext>(options)),
        fp8_(options.fp8),
        fp8_recipe_(options.fp8_recipe) {
    caps_.static_shapes = options.static_shapes;
  }
  int threads() const override { return threads_; }

  std::string name() const override { return kBf16 ? "cpu-bf16" : kAct == DType::F32 ? "cpu" : "cpu-f64"; }
  std::string describe() const override {
    const char* shapes = caps_.static_shapes ? "batches at full capacity; " : "";
    if constexpr (kBf16) {
      const std::string fp8 = fp8_ ? cat("; encoder GEMMs in FP8 (E4M3 forward, E5M2 gradients, delayed scaling, "
                                         "amax history ", fp8_recipe_.history, ", margin ", fp8_recipe_.margin, ")")
                                   : "";
      return cat(name(), ": bf16 activations and weight copy, fp32 master weights, gradients and moments", fp8, "; ",
                 threads_,
                 " OpenMP threads; ", gemms_->describe(), "; ", shapes, openblas_get_config());
    }
    return cat(name(), ": ", kAct == DType::F32 ? "fp32" : "fp64", " activations, weights and master weights; ",
               threads_, " OpenMP threads; ", shapes, openblas_get_config());
  }
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    std::vector<std::pair<std::string, std::string>> v = {{"OpenBLAS", openblas_version()}};
    if constexpr (kBf16) {
      if (std::string onednn = cpu::onednn_version(); !onednn.empty()) v.emplace_back("oneDNN", onednn);
    }
    return v;
  }
  DType act_dtype() const override { return kAct; }
  DType weight_dtype() const override { return kAct; }
  DType master_dtype() const override { return kMaster; }
  const Fp8Recipe* fp8_recipe() const override { return fp8_ ? &fp8_recipe_ : nullptr; }
  // Synchronous: every call has done its work when it returns (events are already passed when recorded).
  const Capabilities& capabilities() const override { return caps_; }
  std::unique_ptr<Event> make_event() override { return std::make_unique<Event>(); }
  void record(Event&) override {}
  void wait(Event&) override {}
  void host_wait(Event&) override { count_host_wait(); }

  void* allocate(size_t bytes, MemoryKind) override { return host_allocate(bytes); }
  void deallocate(void* p, MemoryKind) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void fill_zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  // The fp32 and fp64 backends' memory holds fp32 and fp64 (their own type, and the other for uploads and
  // downloads); cpu-bf16's every type.
  static constexpr bool holds(DType type) {
    switch (type) {
      case DType::F32: case DType::F64: return true;
      case DType::BF16: return kBf16;
      case DType::E4M3: case DType::E5M2: return false;
    }
    return false;
  }
  void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
    BERT_CHECK(holds(dst_type) && holds(src_type), "the ", name(), " backend has no ",
               dtype_name(holds(dst_type) ? src_type : dst_type), " memory");
    cpu::visit_dtype(dst_type, [&]<typename D>(D*) {
      cpu::visit_dtype(src_type, [&]<typename S>(S*) {
        cpu::convert_elements(static_cast<D*>(dst), static_cast<const S*>(src), n);
      });
    });
  }
  void synchronize() override { count_host_wait(); }
  GemmProfile* gemm_profile() override { return &cpu::gemm_profile(); }

  size_t attention_saved_bytes(int tokens, int, int max_seqlen, int heads) const override {
    return cpu::attention_saved_elements(tokens, max_seqlen, heads) * sizeof(F);
  }
  size_t attention_workspace_bytes(int tokens, int, int max_seqlen, int heads) const override {
    return cpu::attention_saved_elements(tokens, max_seqlen, heads) * sizeof(F);
  }

  void linear_forward(const ops::LinearForward& p) override {
    [[maybe_unused]] const cpu::Fp8Work* fp8 = fp8_work(p);
    if constexpr (kBf16) cpu::linear_forward(p, *gemms_, fp8); else cpu::linear_forward<T>(p);
  }
  void linear_backward(const ops::LinearBackward& p) override {
    [[maybe_unused]] const cpu::Fp8Work* fp8 = fp8_work(p);
    if constexpr (kBf16) cpu::linear_backward(p, *gemms_, fp8); else cpu::linear_backward<T>(p);
  }
  void fp8_scale_update(const ops::Fp8ScaleUpdate& p) override { cpu::fp8_scale_update(p); }
  void schedule_step(const ops::ScheduleStep& p) override { cpu::schedule_step(p); }
  void record_step(const ops::RecordStep& p) override { cpu::record_step(p); }
  void activation_backward(const ops::ActivationBackward& p) override { cpu::activation_backward<T>(p); }
  void embedding_forward(const ops::EmbeddingForward& p) override { cpu::embedding_forward<T>(p); }
  void embedding_backward(const ops::EmbeddingBackward& p) override { cpu::embedding_backward<T>(p); }
  void residual_layernorm_forward(const ops::ResidualLayerNormForward& p) override {
    cpu::residual_layernorm_forward<T>(p);
  }
  void residual_layernorm_backward(const ops::ResidualLayerNormBackward& p) override {
    cpu::residual_layernorm_backward<T>(p);
  }
  void attention_forward(const ops::AttentionForward& p) override { cpu::attention_forward<T>(p); }
  void attention_backward(const ops::AttentionBackward& p) override { cpu::attention_backward<T>(p); }
  void gather_forward(const ops::GatherForward& p) override { cpu::gather_forward<T>(p); }
  void gather_backward(const ops::GatherBackward& p) override { cpu::gather_backward<T>(p); }
  void cross_entropy_forward(const ops::CrossEntropyForward& p) override { cross_entropy_forward(p, partials(p)); }
  void cross_entropy_forward(const ops::CrossEntropyForward& p, std::span<double> scratch) override {
    cpu::cross_entropy_forward<T>(p, scratch);
  }
  void cross_entropy_backward(const ops::CrossEntropyBackward& p) override { cpu::cross_entropy_backward<T>(p); }
  // Over F only: the bf16 backend's are the fp32 ones.
  void gradient_clip(const ops::GradientClip& p) override { gradient_clip(p, partials(p)); }
  void gradient_clip(const ops::GradientClip& p, std::span<double> scratch) override {
    cpu::gradient_clip<F>(p, scratch);
  }
  void gradient_clip_finish(const ops::GradientClipFinish& p) override { cpu::gradient_clip_finish(p); }
  void gradient_accumulate(const ops::GradientAccumulate& p) override { cpu::gradient_accumulate<F>(p); }
  void lamb_moments(const ops::LambMoments& p) override { lamb_moments(p, partials(p)); }
  void lamb_moments(const ops::LambMoments& p, std::span<double> scratch) override {
    cpu::lamb_moments<F>(p, scratch);
  }
  void lamb_apply(const ops::LambApply& p) override { cpu::lamb_apply<T>(p); }

 private:
  // The backend's own buffer for an op's partial sums.
  template <typename Op>
  std::span<double> partials(const Op& p) {
    const size_t n = cpu::scratch_doubles(p);
    return {scratch_.as<double>(n), n};
  }

  // The FP8 twin's working memory for a linear op (forward or backward) whose precision has a scale, grown on a
  // larger call; null for the backend's own precision. Only the twin takes an FP8 precision.
  template <typename LinearOp>
  const cpu::Fp8Work* fp8_work(const LinearOp& p) {
    if (!p.precision.scale) return nullptr;
    BERT_CHECK(fp8_, "the ", name(), " backend runs no FP8 GEMMs (cpu-bf16 with \"precision\": \"fp8\" does)");
    const size_t rows = static_cast<size_t>(p.N), groups = static_cast<size_t>(p.groups);
    const size_t out = p.ldo ? p.ldo : groups * p.O;
    fp8_work_ = {fp8_inp_.as<cpu::bf16>(rows * p.I), fp8_weight_.as<cpu::bf16>(groups * p.I * p.O),
                 fp8_dout_.as<cpu::bf16>(rows * out)};
    return &fp8_work_;
  }

  int threads_;
  Capabilities caps_;
  // Per-row and per-chunk partial sums of the ops that reduce in order; grown only when a larger call comes (a
  // synchronous backend captures nothing, so the outgrown buffer goes at once).
  CaptureState never_captured_;
  ScratchBuffer<HostAllocator> scratch_{{}, never_captured_, "cpu backend's partial-sum"};
  // cpu-bf16's GEMMs: the path, oneDNN's primitives and the buffers they work in (null for fp32 and fp64).
  std::unique_ptr<cpu::Bf16GemmContext> gemms_;
  // The FP8 twin (cpu-bf16's "precision": "fp8"): its recipe and the quantized operands of the linear ops.
  bool fp8_ = false;
  Fp8Recipe fp8_recipe_;
  ScratchBuffer<HostAllocator> fp8_inp_{{}, never_captured_, "FP8 input"};
  ScratchBuffer<HostAllocator> fp8_weight_{{}, never_captured_, "FP8 weight"};
  ScratchBuffer<HostAllocator> fp8_dout_{{}, never_captured_, "FP8 gradient"};
  cpu::Fp8Work fp8_work_{};
};

}  // namespace

std::unique_ptr<CpuOpsBackend> make_cpu_backend(DType dtype, int threads, bool static_shapes) {
  switch (dtype) {
    case DType::F32: return std::make_unique<CpuBackend<float>>(threads, static_shapes);
    case DType::F64: return std::make_unique<CpuBackend<double>>(threads, static_shapes);
    case DType::BF16: {
      CpuBf16Options options;
      options.threads = threads;
      options.static_shapes = static_shapes;
      return make_cpu_bf16_backend(options);
    }
    case DType::E4M3: case DType::E5M2: break;  // FP8 is a precision of cpu-bf16 (its option "precision")
  }
  BERT_CHECK(false, "no CPU backend keeps its activations in ", dtype_name(dtype));
}

std::unique_ptr<CpuOpsBackend> make_cpu_bf16_backend(const CpuBf16Options& options) {
  return std::make_unique<CpuBackend<cpu::bf16>>(options);
}

}  // namespace bertperf
