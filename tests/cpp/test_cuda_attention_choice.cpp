// The CUDA attention's choice between cuDNN's fused SDPA and its own kernel (backends/cuda/attention_choice.h),
// checked without a GPU over a stand-in for cuDNN that reports a build and records the workspace asked for:
//  - automatic mode runs the kernel, saying why, when the graphs do not build, when their workspace is over the cap
//    (the case of the dP-workspace backward at BERT-large sizes), when that memory is not there, and when the
//    runtime cuDNN is older than 9.25 for a layout that can hold zero-length sequences (without building at all);
//  - a forced cuDNN runs it over the cap and on an old cuDNN (saying what it risks), and throws where it cannot;
//  - the workspace reserved is the built graphs' own figure.
#include <gtest/gtest.h>

#include <string>

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

TEST(CudaAttentionChoice, VersionsReadAsTheLibrariesWriteThem) {
  EXPECT_EQ(library_version(91900), "9.19.0");
  EXPECT_EQ(library_version(92501), "9.25.1");
  EXPECT_EQ(library_version(130100), "13.1.0");
}

}  // namespace
}  // namespace bertperf::cuda
