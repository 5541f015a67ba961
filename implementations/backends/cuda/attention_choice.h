// Which implementation runs a shape of the CUDA attention, cuDNN's fused SDPA or this backend's kernel, and why:
// decided once per shape at its first call (outside any capture), by plain host code that a CPU test checks
// (tests/cpp/test_cuda_attention_choice.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_options.h"  // AttentionImpl

namespace bertperf::cuda {

// The cuDNN version (cudnnGetVersion's number) whose ragged SDPA is the first to take zero-length sequences: older
// ones were seen to give NaN rows for them (cuDNN 9.22), and cudnn-frontend's tests waive them below it.
inline constexpr int kCudnnZeroLengthSequences = 92500;

// cuDNN's SDPA forward comes in two node families (cudnn-frontend's AttentionImplementation_t): COMPOSITE, the only
// one that draws dropout masks while writing the statistics the backward reads, and UNIFIED (cuDNN 9.13.1 and later),
// which the frontend's own choice prefers where there is no dropout. Left to the frontend, the conformance test and
// the eval (no dropout) would run one family and training (dropout) the other; pinned, every shape runs COMPOSITE,
// and UNIFIED is only a retry for a shape without dropout that COMPOSITE refuses.
enum class SdpaFamily { COMPOSITE, UNIFIED };
const char* family_name(SdpaFamily family);
// The families to build a shape's forward with, in order.
std::vector<SdpaFamily> sdpa_families(bool dropout);

// What building a shape's cuDNN graphs (forward and backward) gave.
struct CudnnBuild {
  bool ok = false;
  std::string why;       // what cuDNN said, when it refused
  size_t workspace = 0;  // bytes of workspace the built graphs ask for (the larger of the two)
  SdpaFamily family = SdpaFamily::COMPOSITE;  // the forward's family, when built
  std::string retried = {};  // what the family tried first said, when a later one built the shape
};

// Builds a shape with each of sdpa_families(dropout) in turn until one builds: that answer, naming in `retried` what
// the refusing family said (or, when none builds, the last refusal, with the earlier ones in `why`).
CudnnBuild build_first_family(bool dropout, const std::function<CudnnBuild(SdpaFamily)>& build);

// What the choice may do with a shape's cuDNN graphs: build them (at most once), and grow the workspace they share
// to a size (throws InputError when the device memory is not there).
struct CudnnShapeOps {
  std::function<CudnnBuild()> build;
  std::function<void(size_t)> reserve;
};

struct AttentionChoice {
  bool cudnn = false;
  size_t workspace = 0;  // bytes reserved for cuDNN's graphs, when cuDNN runs the shape
  std::string note;      // why AUTO runs the kernel, what a forced cuDNN risks, or which family cuDNN retried with;
                         // empty when there is nothing to say
  SdpaFamily family = SdpaFamily::COMPOSITE;  // cuDNN's forward family, when cuDNN runs the shape
};

// AUTO takes cuDNN when the head size suits it (a multiple of 8 up to 128), the runtime cuDNN takes zero-length
// sequences or the layout cannot hold one, the graphs build, their workspace is at most `workspace_cap` bytes and
// that memory is there; else the kernel, with the reason in `note`. CUDNN takes cuDNN whatever the version and the
// cap (noting the risk of an old version) and throws when cuDNN cannot run the shape. KERNEL takes the kernel.
AttentionChoice choose_attention(AttentionImpl mode, int head_dim, int cudnn_version, bool may_hold_empty_sequences,
                                 size_t workspace_cap, const CudnnShapeOps& cudnn);

// "9.19.0" from 91900: a version numbered major * 10000 + minor * 100 + patch (cuDNN 9's and cuBLASLt's).
std::string library_version(size_t version);

}  // namespace bertperf::cuda
