// The choice between cuDNN's SDPA and the attention kernel for one shape (attention_choice.h).
#include "backends/cuda/attention_choice.h"

#include "core/errors.h"

namespace bertperf::cuda {

std::string library_version(size_t version) {
  return cat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

const char* family_name(SdpaFamily family) { return family == SdpaFamily::COMPOSITE ? "COMPOSITE" : "UNIFIED"; }

std::vector<SdpaFamily> sdpa_families(bool dropout) {
  if (dropout) return {SdpaFamily::COMPOSITE};  // UNIFIED cannot draw masks and write the statistics
  return {SdpaFamily::COMPOSITE, SdpaFamily::UNIFIED};
}

CudnnBuild build_first_family(bool dropout, const std::function<CudnnBuild(SdpaFamily)>& build) {
  std::string refused;
  CudnnBuild got;
  for (SdpaFamily family : sdpa_families(dropout)) {
    got = build(family);
    got.family = family;
    if (got.ok) {
      if (!refused.empty()) got.retried = refused + "; built with the " + family_name(family) + " forward instead";
      return got;
    }
    refused += cat(refused.empty() ? "" : "; ", "the ", family_name(family), " forward was refused: ", got.why);
  }
  got.why = refused;
  return got;
}

AttentionChoice choose_attention(AttentionImpl mode, int head_dim, int cudnn_version, bool may_hold_empty_sequences,
                                 size_t workspace_cap, const CudnnShapeOps& cudnn) {
  if (mode == AttentionImpl::KERNEL) return {};
  const bool forced = mode == AttentionImpl::CUDNN;
  const bool head_ok = head_dim % 8 == 0 && head_dim > 0 && head_dim <= 128;
  if (!head_ok) {
    BERT_CHECK(!forced, "attention \"cudnn\", but cuDNN's SDPA takes head sizes that are multiples of 8 up "
               "to 128, not ", head_dim);
    return {false, 0, cat("head size ", head_dim, ": cuDNN's SDPA takes multiples of 8 up to 128")};
  }
  std::string note;
  if (may_hold_empty_sequences && cudnn_version < kCudnnZeroLengthSequences) {
    note = cat("cuDNN ", library_version(static_cast<size_t>(cudnn_version)), " is older than ",
               library_version(kCudnnZeroLengthSequences), ", the first whose ragged SDPA takes zero-length "
               "sequences (older ones gave NaN rows for them), and this layout can hold them (the spare sequence "
               "slots of a static-shape batch are empty)");
    if (!forced) return {false, 0, note};
    note = "attention \"cudnn\" runs it anyway, though " + note;
  }
  const CudnnBuild built = cudnn.build();
  if (!built.ok) {
    BERT_CHECK(!forced, "attention \"cudnn\", but ", built.why);
    return {false, 0, built.why};
  }
  if (!forced && built.workspace > workspace_cap) {
    return {false, 0, cat("cuDNN's SDPA graphs need ", built.workspace, " bytes of workspace, more than the cap of ",
                       workspace_cap, " bytes (the CUDA backend's option attention_workspace_mb)")};
  }
  if (forced) {
    cudnn.reserve(built.workspace);
  } else {
    try {
      cudnn.reserve(built.workspace);
    } catch (const InputError& e) {
      return {false, 0, cat("the ", built.workspace, " bytes of workspace cuDNN's SDPA graphs need are not there: ",
                         e.what())};
    }
  }
  if (!built.retried.empty()) note = note.empty() ? built.retried : note + "; " + built.retried;
  return {true, built.workspace, note, built.family};
}

}  // namespace bertperf::cuda
