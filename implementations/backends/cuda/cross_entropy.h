// CUDA softmax cross-entropy over rows of logits (the masked-LM decoder's vocabulary, NSP's two classes): the
// forward saves each row's log-sum-exp and adds the weighted loss and the accuracy count into the f64 statistics
// on the device (summed in row order); the backward is one pass of one exp per element. A label outside [0, V) on
// a weighted row makes the loss NaN (the device cannot throw); the run's non-finite-loss check reports it.
#pragma once

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

void cross_entropy_forward(CudaContext& ctx, OpScratch& scratch, const ops::CrossEntropyForward& p);
void cross_entropy_backward(CudaContext& ctx, const ops::CrossEntropyBackward& p);

}  // namespace bertperf::cuda
