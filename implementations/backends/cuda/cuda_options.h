// The options of the CUDA backend's "backend" block (registry.h). Plain C++ (no CUDA headers): configs for GPU
// machines are read and checked on machines without CUDA too.
//   { "device": int (optional, -1 = the local rank's device modulo the device count),
//     "attention": "auto" | "cudnn" | "kernel" (optional, default "auto": cuDNN's fused attention where its graph
//                  builds within the workspace cap, else this backend's kernel),
//     "gelu": "epilogue" | "kernel" (optional, default "epilogue": GELU and its derivative in cuBLASLt's epilogues;
//             "kernel": in this backend's kernels),
//     "deterministic": bool (optional, default false: true runs only bit-reproducible algorithms, at some cost where
//                      a library's fast path is not; the backend declares which ops are not, Capabilities),
//     "attention_workspace_mb": number (optional, default 4096: the most device memory cuDNN's attention backward
//                               may take as workspace; a shape that needs more runs on the kernel),
//     "blocking_uploads": bool (optional, default false: true makes every upload wait until it has run, as one from
//                         pageable memory does; the reference that staging over asynchronous uploads is checked
//                         against, scripts/device_check.sh),
//     "precision": "bf16" | "fp8", "fp8_history", "fp8_margin" (optional, backends/fp8.h: read_fp8_recipe; "fp8"
//                  runs the encoder's linear layers in FP8 on compute capability 8.9 or newer, refused elsewhere) }
#pragma once

#include <string>

#include "backends/fp8.h"
#include "core/json_fields.h"

namespace bertperf {

enum class AttentionImpl { AUTO, CUDNN, KERNEL };
enum class GeluImpl { EPILOGUE, KERNEL };

struct CudaOptions {
  int device = -1;
  AttentionImpl attention = AttentionImpl::AUTO;
  GeluImpl gelu = GeluImpl::EPILOGUE;
  bool deterministic = false;
  double attention_workspace_mb = 4096;
  bool blocking_uploads = false;
  bool fp8 = false;
  Fp8Recipe fp8_recipe;

  // Reads the fields it knows from `fields`; the caller rejects the rest.
  static CudaOptions read(JsonFields& fields) {
    CudaOptions o;
    const std::string& where = fields.where();
    o.device = fields.optional<int>("device", -1);
    if (o.device < -1) throw_input(where, "field 'device' must be -1 (the local rank's) or a device index");
    const std::string attention = fields.optional<std::string>("attention", "auto");
    if (attention == "auto") o.attention = AttentionImpl::AUTO;
    else if (attention == "cudnn") o.attention = AttentionImpl::CUDNN;
    else if (attention == "kernel") o.attention = AttentionImpl::KERNEL;
    else throw_input(where, "field 'attention' must be \"auto\", \"cudnn\" or \"kernel\", got \"" + attention + "\"");
    const std::string gelu = fields.optional<std::string>("gelu", "epilogue");
    if (gelu == "epilogue") o.gelu = GeluImpl::EPILOGUE;
    else if (gelu == "kernel") o.gelu = GeluImpl::KERNEL;
    else throw_input(where, "field 'gelu' must be \"epilogue\" or \"kernel\", got \"" + gelu + "\"");
    o.deterministic = fields.optional<bool>("deterministic", false);
    o.attention_workspace_mb = fields.optional<double>("attention_workspace_mb", 4096);
    if (!(o.attention_workspace_mb >= 0))
      throw_input(where, "field 'attention_workspace_mb' must be a number of MiB, 0 or more");
    o.blocking_uploads = fields.optional<bool>("blocking_uploads", false);
    o.fp8 = read_fp8_recipe(fields, &o.fp8_recipe);
    return o;
  }
};

}  // namespace bertperf
