// What each op of a step costs a device: the FLOPs of its matrix products and the bytes it must move through device
// memory, noted by a backend that runs nothing (the op-cost recorder). The roofline of a step (perf/roofline.h,
// `bertperf bench-step --roofline`) builds a training step on the recorder, runs it once and prices every op it
// noted on a device of the table.
//
// What is counted, at the recorder's dtypes (ops.h's A, W and F; by default the CUDA backend's bf16, bf16, fp32):
//  - FLOPs: 2 m n k for each matrix product: a linear's GEMM (forward; dinp and dweight in its backward), attention's
//    two products a head and sequence forward (2 L^2 D each) and five backward (the scores recomputed, as a fused
//    kernel does, then dV, dP, dQ and dK). Other work (softmax, LayerNorm, LAMB, ...) counts 0 FLOPs: a few FLOPs an
//    element, far below its memory time on a device with tensor cores.
//  - bytes: what a fused kernel must move: every operand read once, every result written once, a result that is
//    accumulated read and written; working memory (a backend's scratch) is not counted. Fills, copies and
//    conversions issued inside the step count too (under the names fill_zero, copy, convert).
//  - encoder_linear: a linear over every token of the batch (the encoder's QKV, attention output and FFN GEMMs, the
//    GEMMs issue 26 runs in FP8), told apart from the heads' linears (over the [CLS] or masked rows) by its row count;
//    fp8_bytes, its bytes with the GEMMs' operands read as FP8 (one byte an element, the cast fused into the op that
//    wrote them) and its results written as before (every other op: its bytes).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace bertperf {

struct OpCost {
  const char* name = "";  // ops::op_name, or fill_zero, copy, convert
  std::string shape;      // the op's sizes, e.g. "N=4096 I=1024 O=4096 gelu"
  double flops = 0;
  double bytes = 0;
  bool encoder_linear = false;
  double fp8_bytes = 0;
};

// A backend that runs no op and notes each op's cost. Its memory is host memory mapped on demand (a page costs
// nothing until written), uploads, downloads and copies are real (the recorder reads the batch's sequence lengths
// and the optimizer's chunks from them); fills and conversions are noted, not done. Its capabilities are the CUDA
// backend's shape (static shapes: every batch at its full capacity), synchronous and without capture.
class OpCostRecorder final : public Backend {
 public:
  explicit OpCostRecorder(DType act = DType::BF16, DType weight = DType::BF16, DType master = DType::F32);
  ~OpCostRecorder() override;

  const std::vector<OpCost>& costs() const { return costs_; }
  void clear() { costs_.clear(); }

  std::string name() const override { return "op-cost"; }
  std::string describe() const override;
  DType act_dtype() const override { return act_; }
  DType weight_dtype() const override { return weight_; }
  DType master_dtype() const override { return master_; }
  const Capabilities& capabilities() const override { return capabilities_; }

  void* allocate(size_t bytes, MemoryKind kind) override;
  void deallocate(void* p, MemoryKind kind) noexcept override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* p, size_t bytes) override;
  void convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override;
  void synchronize() override { count_host_wait(); }
  std::unique_ptr<Event> make_event() override;
  void record(Event&) override {}
  void wait(Event&) override {}
  void host_wait(Event&) override { count_host_wait(); }

  size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) const override;
  size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) const override;
#define BERTPERF_OP_COST_METHOD(enumerator, method, Struct) void method(const ops::Struct& p) override;
  BERTPERF_OPS(BERTPERF_OP_COST_METHOD)
#undef BERTPERF_OP_COST_METHOD

 private:
  void note(const char* name, std::string shape, double flops, double bytes, bool encoder_linear = false,
            double fp8_bytes = -1);
  double chunk_elements(const ops::Chunks& c) const;

  DType act_, weight_, master_;
  double a_, w_, f_;  // their sizes in bytes
  Capabilities capabilities_;
  std::map<void*, size_t> mapped_;
  int tokens_ = -1;   // rows of the last embedding: a linear over as many rows is an encoder linear
  std::vector<OpCost> costs_;
};

}  // namespace bertperf
