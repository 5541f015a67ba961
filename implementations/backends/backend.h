// A backend: the object the model and the optimizer are handed, which owns memory, copies, its execution context
// and the op vocabulary (backends/ops.h). Several backends live in one binary: the CPU backend in fp32 (OpenBLAS,
// OpenMP), in fp64 (the test oracle) and in bf16 (the CUDA backend's numerics, oneDNN), and the CUDA backend (bf16
// activations, fp32 master weights, cuBLASLt, cuDNN) when it is built.
//
// implementations/README.md describes the layers, one training step, and how to add an op or a backend; the
// conformance test (tests/cpp/test_backend_ops.cpp) runs every op of every backend against the CPU in fp64.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.h"
#include "backends/ops.h"

namespace bertperf {

struct Fp8Recipe;  // backends/fp8.h

// The op vocabulary as a backend implements it (ops.h has each op's parameter struct and semantics).
class OpVocabulary {
 public:
  virtual ~OpVocabulary() = default;

  // ---- sizes the ops need ----
  // Bytes of AttentionForward::saved for a batch of up to `tokens` tokens in sequences of at most max_seqlen.
  virtual size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) const = 0;
  // Bytes of AttentionBackward::workspace, shared by all layers.
  virtual size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) const = 0;

  // ---- the op vocabulary (ops.h): one method per op of BERTPERF_OPS, linear_forward(const ops::LinearForward&) ----
#define BERTPERF_OP_METHOD(enumerator, method, Struct) virtual void method(const ops::Struct& p) = 0;
  BERTPERF_OPS(BERTPERF_OP_METHOD)
#undef BERTPERF_OP_METHOD
};

// A backend: one object with its own memory, execution context and the ops that run there.
class Backend : public Device, public OpVocabulary {
 public:
  virtual std::string name() const = 0;     // its registry name (registry.h)
  virtual std::string describe() const = 0; // one line: device, threads, dtypes, library versions
  // The libraries it runs on and their versions, as (name, version), for run logs and system descriptions.
  virtual std::vector<std::pair<std::string, std::string>> library_versions() const { return {}; }
  // The ways its ops have run so far where it has more than one, as (what, how): the CUDA backend's attention is
  // "cudnn", "kernel" or "cudnn and kernel" (per shape). Empty where there is no choice, or before the first op.
  virtual std::vector<std::pair<std::string, std::string>> paths_taken() const { return {}; }
  virtual DType act_dtype() const = 0;      // A in ops.h
  virtual DType weight_dtype() const = 0;   // W
  virtual DType master_dtype() const = 0;   // F
  // The FP8 recipe its encoder linear layers run with (ops.h: GemmPrecision; the option "precision": "fp8"), or null
  // where it runs them at A and W: the model keeps the scales and amax histories and hands them to those ops.
  virtual const Fp8Recipe* fp8_recipe() const { return nullptr; }

  // Time and FLOPs of the dense GEMMs, where a backend can measure them cheaply (the step benchmark reports the GEMM
  // share of a step); null where it cannot. Off until `enabled` is set.
  struct GemmProfile {
    bool enabled = false;
    double seconds = 0;
    double flops = 0;
  };
  virtual GemmProfile* gemm_profile() { return nullptr; }
};

// Host fp32 values into backend memory of any type, and back (through a temporary device buffer and convert); both
// return when the host values have been read or written.
void upload_floats(Backend& backend, void* dst, DType dst_type, const float* src, size_t n);
void download_floats(Backend& backend, float* dst, const void* src, DType src_type, size_t n);

}  // namespace bertperf
