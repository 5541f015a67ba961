// What the CUDA backend declares for its options per architecture (backends/cuda/cuda_capabilities.h), checked
// without a GPU against a table written out from what the libraries document: cuDNN's fused attention draws its own
// dropout masks and its backward is bit-reproducible on Hopper (sm 90) only; "deterministic": true moves the attention
// onto this backend's kernel wherever cuDNN's backward is not reproducible, and then nothing is declared
// non-deterministic; the kernel draws ops.h's masks and is reproducible everywhere. The conformance test
// (test_backend_ops.cpp) lets exactly the declared ops differ between two runs on a GPU, so this table is what the
// GPU is held to.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_capabilities.h"
#include "backends/ops.h"
#include "core/json_fields.h"
#include "registry/registry.h"
#include "reproducible.h"

namespace bertperf::cuda {
namespace {

using ops::Op;
using ops::OpMask;

const char* name(AttentionImpl a) {
  return a == AttentionImpl::AUTO ? "auto" : a == AttentionImpl::CUDNN ? "cudnn" : "kernel";
}

struct Row {
  int sm;
  AttentionImpl asked;
  bool deterministic;
  AttentionImpl runs;
  bool own_masks;         // attention forward and backward draw cuDNN's masks
  bool nondeterministic;  // the attention backward may differ between runs
};

constexpr AttentionImpl AUTO = AttentionImpl::AUTO, CUDNN = AttentionImpl::CUDNN, KERNEL = AttentionImpl::KERNEL;

const Row kTable[] = {
    // Ampere (A100 80, A10 86), Ada (89): cuDNN's ragged backward sums dq in a varying order.
    {80, AUTO, false, AUTO, true, true},
    {80, CUDNN, false, CUDNN, true, true},
    {80, KERNEL, false, KERNEL, false, false},
    {80, AUTO, true, KERNEL, false, false},
    {80, CUDNN, true, KERNEL, false, false},
    {86, AUTO, false, AUTO, true, true},
    {89, AUTO, true, KERNEL, false, false},
    // Hopper: cuDNN's deterministic dq reduction; "deterministic" keeps cuDNN.
    {90, AUTO, false, AUTO, true, false},
    {90, CUDNN, false, CUDNN, true, false},
    {90, KERNEL, false, KERNEL, false, false},
    {90, AUTO, true, AUTO, true, false},
    {90, CUDNN, true, CUDNN, true, false},
    // Blackwell (100, 120): cuDNN refuses determinism with dropout.
    {100, AUTO, false, AUTO, true, true},
    {100, CUDNN, true, KERNEL, false, false},
    {120, KERNEL, true, KERNEL, false, false},
};

TEST(CudaCapabilities, EachArchitectureAndOptionDeclareTheTable) {
  for (const Row& r : kTable) {
    CudaOptions o;
    o.attention = r.asked;
    o.deterministic = r.deterministic;
    const CudaDeclared d = cuda_declared(o, r.sm);
    SCOPED_TRACE(std::string("sm ") + std::to_string(r.sm) + ", attention " + name(r.asked) +
                 (r.deterministic ? ", deterministic" : ""));
    EXPECT_EQ(d.attention, r.runs) << name(d.attention);
    OpMask masks, nondet;
    if (r.own_masks) masks.add(Op::ATTENTION_FORWARD).add(Op::ATTENTION_BACKWARD);
    if (r.nondeterministic) nondet.add(Op::ATTENTION_BACKWARD);
    EXPECT_EQ(d.capabilities.own_dropout_masks.bits, masks.bits);
    EXPECT_EQ(d.capabilities.nondeterministic.bits, nondet.bits);
    EXPECT_TRUE(d.capabilities.static_shapes && d.capabilities.asynchronous && d.capabilities.capture &&
                d.capabilities.host_functions);
    EXPECT_FALSE(d.capabilities.host_memory);
  }
}

// "deterministic": true is a promise about every op, on every architecture and with every attention choice.
TEST(CudaCapabilities, DeterministicDeclaresEveryOpReproducible) {
  for (int sm : {80, 86, 87, 89, 90, 100, 103, 120})
    for (AttentionImpl a : {AUTO, CUDNN, KERNEL}) {
      CudaOptions o;
      o.attention = a;
      o.deterministic = true;
      const CudaDeclared d = cuda_declared(o, sm);
      EXPECT_TRUE(d.capabilities.nondeterministic.empty()) << "sm " << sm << ", attention " << name(a);
      EXPECT_EQ(d.attention == KERNEL, a == KERNEL || sm != 90) << "sm " << sm << ", attention " << name(a);
    }
}


// The step tests' rule, without a GPU: the CUDA backend's declarations per architecture (cuda_capabilities.h) give
// no option on Hopper, "deterministic" on Ampere, and under it nothing non-deterministic.
TEST(StepDeterminism, TheBitIdentityRunsTakeExactlyTheDeterminismDeclared) {
  EXPECT_TRUE(testing::reproducible_options(Capabilities{}).empty());
  for (int sm : {80, 86, 90, 100}) {
    SCOPED_TRACE("sm " + std::to_string(sm));
    CudaOptions options;
    const Capabilities declared = cuda_declared(options, sm).capabilities;
    const std::vector<std::string> extra = testing::reproducible_options(declared);
    EXPECT_EQ(extra.empty(), sm == 90);
    for (const std::string& o : extra) {
      ASSERT_EQ(o, "deterministic=true");
      options.deterministic = true;
    }
    EXPECT_TRUE(cuda_declared(options, sm).capabilities.nondeterministic.empty());
    // The option is one the backend's registry entry reads.
    if (!extra.empty()) {
      const BackendSpec spec = backend_spec("cuda", extra);
      JsonFields fields(spec.options, "test");
      EXPECT_TRUE(CudaOptions::read(fields).deterministic);
    }
  }
}

}  // namespace
}  // namespace bertperf::cuda
