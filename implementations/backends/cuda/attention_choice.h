// Which implementation runs a shape of the CUDA attention, cuDNN's fused SDPA or this backend's kernel, and why:
// decided once per shape at its first call (outside any capture), by plain host code that a CPU test checks
// (tests/cpp/test_cuda_attention_choice.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "backends/cuda/cuda_options.h"  // AttentionImpl

namespace bertperf::cuda {

// The cuDNN version (cudnnGetVersion's number) whose ragged SDPA is the first to take zero-length sequences: older
// ones were seen to give NaN rows for them (cuDNN 9.22), and cudnn-frontend's tests waive them below it.
inline constexpr int kCudnnZeroLengthSequences = 92500;

// What building a shape's cuDNN graphs (forward and backward) gave.
struct CudnnBuild {
  bool ok = false;
  std::string why;       // what cuDNN said, when it refused
  size_t workspace = 0;  // bytes of workspace the built graphs ask for (the larger of the two)
};

// What the choice may do with a shape's cuDNN graphs: build them (at most once), and grow the workspace they share
// to a size (throws InputError when the device memory is not there).
struct CudnnShapeOps {
  std::function<CudnnBuild()> build;
  std::function<void(size_t)> reserve;
};

struct AttentionChoice {
  bool cudnn = false;
  size_t workspace = 0;  // bytes reserved for cuDNN's graphs, when cuDNN runs the shape
  std::string note;      // why AUTO runs the kernel, or what a forced cuDNN risks; empty when there is nothing to say
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
