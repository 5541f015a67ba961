// The CUDA attention's choice between cuDNN's fused SDPA and its own kernel (backends/cuda/attention_choice.h),
// checked without a GPU over a stand-in for cuDNN that reports a build and records the workspace asked for:
//  - automatic mode runs the kernel, saying why, when the graphs do not build, when their workspace is over the cap
//    (the case of the dP-workspace backward at BERT-large sizes), when that memory is not there, and when the
//    runtime cuDNN is older than 9.25 for a layout that can hold zero-length sequences (without building at all);
//  - a forced cuDNN runs it over the cap and on an old cuDNN (saying what it risks), and throws where it cannot;
//  - the workspace reserved is the built graphs' own figure;
//  - cuDNN's forward is built in the COMPOSITE family first, with dropout or without (so the conformance test and the
//    eval run the family training runs), UNIFIED only as a retry for a shape without dropout, saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/attention_choice.h"
#include "core/errors.h"

namespace bertperf::cuda {
namespace {

constexpr int kNew = 92501, kOld = 92200;
constexpr size_t kCap = size_t{4} << 30;

// A stand-in for one shape's cuDNN graphs.
struct FakeCudnn {
  CudnnBuild result;
  bool memory_there = true;
  int builds = 0;
  size_t reserved = 0;
  CudnnShapeOps ops() {
    return {[this] {
              ++builds;
              return result;
            },
            [this](size_t bytes) {
              if (!memory_there) throw InputError("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes");
              reserved = bytes;
            }};
  }
};

FakeCudnn builds_with(size_t workspace) { return {{true, "", workspace}}; }

bool mentions(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(CudaAttentionChoice, AutoTakesCudnnWhenItBuildsAndFitsAndReservesTheGraphsOwnWorkspace) {
  // BERT-large packed, 96 sequence slots: the dP-workspace backward asks for 805 MB, far over the old bound.
  FakeCudnn c = builds_with(size_t{96} * 16 * 512 * 512 * 2);
  const AttentionChoice got = choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, c.ops());
  EXPECT_TRUE(got.cudnn);
  EXPECT_TRUE(got.note.empty()) << got.note;
  EXPECT_EQ(c.builds, 1);
  EXPECT_EQ(c.reserved, size_t{96} * 16 * 512 * 512 * 2);
  EXPECT_EQ(got.workspace, c.reserved);
}

TEST(CudaAttentionChoice, AutoFallsBackWhenTheWorkspaceIsOverTheCap) {
  FakeCudnn c = builds_with(kCap + 1);
  const AttentionChoice got = choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, c.ops());
  EXPECT_FALSE(got.cudnn);
  EXPECT_TRUE(mentions(got.note, std::to_string(kCap + 1))) << got.note;
  EXPECT_TRUE(mentions(got.note, "cap")) << got.note;
  EXPECT_EQ(c.reserved, 0u) << "reserved memory for a shape that does not run on cuDNN";
  // At the cap exactly, it runs.
  FakeCudnn at = builds_with(kCap);
  EXPECT_TRUE(choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, at.ops()).cudnn);
}

TEST(CudaAttentionChoice, AutoFallsBackWhenTheGraphsDoNotBuildOrTheMemoryIsNotThere) {
  FakeCudnn refused{{false, "cuDNN SDPA backward: no engine for ragged THD here", 0}};
  AttentionChoice got = choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, refused.ops());
  EXPECT_FALSE(got.cudnn);
  EXPECT_TRUE(mentions(got.note, "no engine for ragged THD")) << got.note;

  FakeCudnn full = builds_with(1 << 20);
  full.memory_there = false;
  got = choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, full.ops());
  EXPECT_FALSE(got.cudnn);
  EXPECT_TRUE(mentions(got.note, "cannot allocate")) << got.note;
}

TEST(CudaAttentionChoice, AutoKeepsZeroLengthSequencesAwayFromCudnnBefore925) {
  FakeCudnn c = builds_with(1 << 20);
  AttentionChoice got = choose_attention(AttentionImpl::AUTO, 64, kOld, true, kCap, c.ops());
  EXPECT_FALSE(got.cudnn);
  EXPECT_TRUE(mentions(got.note, "9.22.0")) << got.note;
  EXPECT_TRUE(mentions(got.note, "9.25.0")) << got.note;
  EXPECT_EQ(c.builds, 0) << "built graphs that cannot be used";
  // 9.25.0 itself takes them; a layout that cannot hold an empty sequence runs on an older cuDNN.
  EXPECT_TRUE(choose_attention(AttentionImpl::AUTO, 64, kCudnnZeroLengthSequences, true, kCap, c.ops()).cudnn);
  EXPECT_TRUE(choose_attention(AttentionImpl::AUTO, 64, kOld, false, kCap, c.ops()).cudnn);
}

TEST(CudaAttentionChoice, HeadSizesCudnnCannotTakeRunOnTheKernel) {
  for (int d : {12, 100, 136}) {
    FakeCudnn c = builds_with(0);
    const AttentionChoice got = choose_attention(AttentionImpl::AUTO, d, kNew, true, kCap, c.ops());
    EXPECT_FALSE(got.cudnn) << d;
    EXPECT_TRUE(mentions(got.note, std::to_string(d))) << got.note;
    EXPECT_EQ(c.builds, 0);
    EXPECT_THROW(choose_attention(AttentionImpl::CUDNN, d, kNew, true, kCap, c.ops()), InternalError) << d;
  }
}

TEST(CudaAttentionChoice, ForcedCudnnRunsOverTheCapAndOnAnOldCudnnAndThrowsWhereItCannot) {
  FakeCudnn big = builds_with(kCap * 2);
  AttentionChoice got = choose_attention(AttentionImpl::CUDNN, 64, kNew, true, kCap, big.ops());
  EXPECT_TRUE(got.cudnn);
  EXPECT_EQ(big.reserved, kCap * 2);

  FakeCudnn old = builds_with(1 << 20);
  got = choose_attention(AttentionImpl::CUDNN, 64, kOld, true, kCap, old.ops());
  EXPECT_TRUE(got.cudnn);
  EXPECT_TRUE(mentions(got.note, "9.22.0")) << "a forced cuDNN on a version that mishandles empty sequences says so";

  FakeCudnn refused{{false, "cuDNN SDPA forward: unsupported", 0}};
  EXPECT_THROW(choose_attention(AttentionImpl::CUDNN, 64, kNew, true, kCap, refused.ops()), InternalError);
  FakeCudnn full = builds_with(1 << 20);
  full.memory_there = false;
  EXPECT_THROW(choose_attention(AttentionImpl::CUDNN, 64, kNew, true, kCap, full.ops()), InputError);
}

TEST(CudaAttentionChoice, ForcedKernelNeverAsksCudnn) {
  FakeCudnn c = builds_with(0);
  const AttentionChoice got = choose_attention(AttentionImpl::KERNEL, 64, kNew, true, kCap, c.ops());
  EXPECT_FALSE(got.cudnn);
  EXPECT_TRUE(got.note.empty());
  EXPECT_EQ(c.builds, 0);
}

// A stand-in for building one shape in each family: `refuses` lists the families that refuse it.
struct FakeFamilies {
  std::vector<SdpaFamily> refuses;
  std::vector<SdpaFamily> tried;
  std::function<CudnnBuild(SdpaFamily)> build() {
    return [this](SdpaFamily f) {
      tried.push_back(f);
      if (std::find(refuses.begin(), refuses.end(), f) != refuses.end())
        return CudnnBuild{false, cat(family_name(f), " engine: ragged layout not supported"), 0};
      return CudnnBuild{true, "", f == SdpaFamily::COMPOSITE ? size_t{1000} : size_t{2000}};
    };
  }
};

TEST(CudaAttentionChoice, ShapesWithAndWithoutDropoutBuildTheCompositeForwardFirst) {
  using F = SdpaFamily;
  EXPECT_EQ(sdpa_families(true), std::vector<F>{F::COMPOSITE}) << "UNIFIED cannot draw dropout masks";
  EXPECT_EQ(sdpa_families(false), (std::vector<F>{F::COMPOSITE, F::UNIFIED}));
  for (bool dropout : {false, true}) {
    FakeFamilies c;
    const CudnnBuild got = build_first_family(dropout, c.build());
    EXPECT_TRUE(got.ok);
    EXPECT_EQ(got.family, F::COMPOSITE);
    EXPECT_EQ(c.tried, std::vector<F>{F::COMPOSITE}) << "built more than the family that builds";
    EXPECT_TRUE(got.retried.empty()) << got.retried;
    EXPECT_EQ(got.workspace, 1000u);
  }
}

TEST(CudaAttentionChoice, AShapeWithoutDropoutThatCompositeRefusesIsRetriedWithUnifiedSayingWhy) {
  using F = SdpaFamily;
  FakeFamilies c{{F::COMPOSITE}, {}};
  const CudnnBuild got = build_first_family(false, c.build());
  EXPECT_TRUE(got.ok);
  EXPECT_EQ(got.family, F::UNIFIED);
  EXPECT_EQ(got.workspace, 2000u) << "the workspace of the family that built";
  EXPECT_EQ(c.tried, (std::vector<F>{F::COMPOSITE, F::UNIFIED}));
  EXPECT_TRUE(mentions(got.retried, "COMPOSITE engine: ragged layout not supported")) << got.retried;
  EXPECT_TRUE(mentions(got.retried, "UNIFIED")) << got.retried;
  // The choice runs it on cuDNN and passes the reason on, for the once-per-shape line.
  FakeCudnn fake{got};
  const AttentionChoice choice = choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, fake.ops());
  EXPECT_TRUE(choice.cudnn);
  EXPECT_EQ(choice.family, F::UNIFIED);
  EXPECT_TRUE(mentions(choice.note, "COMPOSITE engine")) << choice.note;
}

TEST(CudaAttentionChoice, AShapeWithDropoutThatCompositeRefusesIsNotRetriedAndRunsOnTheKernel) {
  using F = SdpaFamily;
  FakeFamilies c{{F::COMPOSITE}, {}};
  const CudnnBuild got = build_first_family(true, c.build());
  EXPECT_FALSE(got.ok);
  EXPECT_EQ(c.tried, std::vector<F>{F::COMPOSITE});
  EXPECT_TRUE(mentions(got.why, "COMPOSITE engine: ragged layout not supported")) << got.why;
  FakeCudnn fake{got};
  const AttentionChoice choice = choose_attention(AttentionImpl::AUTO, 64, kNew, true, kCap, fake.ops());
  EXPECT_FALSE(choice.cudnn);
  EXPECT_TRUE(mentions(choice.note, "COMPOSITE")) << choice.note;
  // Both refusing: the reasons of both.
  FakeFamilies both{{F::COMPOSITE, F::UNIFIED}, {}};
  const CudnnBuild none = build_first_family(false, both.build());
  EXPECT_FALSE(none.ok);
  EXPECT_TRUE(mentions(none.why, "COMPOSITE engine") && mentions(none.why, "UNIFIED engine")) << none.why;
}

TEST(CudaAttentionChoice, VersionsReadAsTheLibrariesWriteThem) {
  EXPECT_EQ(library_version(91900), "9.19.0");
  EXPECT_EQ(library_version(92501), "9.25.1");
  EXPECT_EQ(library_version(130100), "13.1.0");
}

}  // namespace
}  // namespace bertperf::cuda
