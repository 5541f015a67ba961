// CUDA optimizer ops over flat buffers: global-norm clip (one launch: per-chunk sums of squares, then the last block
// to finish sums them in chunk order and finishes the clip), gradient accumulation, and LAMB in two launches
// (moments with per-tensor norms by a segmented reduction over the chunk list in the same launch's last block;
// trust-ratio apply writing the fp32 master and the bf16 copy in one pass). Step scalars are read on the device,
// so every op can be captured in a graph. Chunks of one tensor are consecutive in the list (optim/lamb.h).
#pragma once

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

void gradient_clip(CudaContext& ctx, OpScratch& scratch, const ops::GradientClip& p);
void gradient_clip_finish(CudaContext& ctx, const ops::GradientClipFinish& p);
void gradient_accumulate(CudaContext& ctx, const ops::GradientAccumulate& p);
void lamb_moments(CudaContext& ctx, OpScratch& scratch, const ops::LambMoments& p);
void lamb_apply(CudaContext& ctx, const ops::LambApply& p);
// FP8 delayed scaling (backends/fp8.h): one thread per tensor, kmath::delayed_scaling_update.
void fp8_scale_update(CudaContext& ctx, const ops::Fp8ScaleUpdate& p);
void schedule_step(CudaContext& ctx, const ops::ScheduleStep& p);
void record_step(CudaContext& ctx, const ops::RecordStep& p);

}  // namespace bertperf::cuda
