// The op and dtype lists refuse a miss at compile time. CTest compiles this file (-fsyntax-only, CMakeLists.txt:
// lists_compile, lists_refuse_missing_*); it is never linked. As it is, it compiles: a backend that implements every
// op of the list, and switches with a case for every type and every op. Each PLANT_MISSING_* macro plants one miss,
// which the compiler must refuse:
//   PLANT_MISSING_DTYPE_CASE   a switch over DType without a case for one type: what every switch that does not
//                              handle a newly added type becomes (-Werror=switch, as the build compiles)
//   PLANT_MISSING_OP_CASE      a per-op switch (as the conformance test's and the benchmarks' tables are) with a case
//                              for one op only: what every such switch lacks when an op is added
//   PLANT_MISSING_BACKEND_OP   a backend of the vocabulary with one op more than it implements: what every backend
//                              becomes when an op is added to BERTPERF_OPS (its method is pure virtual)
#include "backends/backend.h"
#include "backends/dtype.h"
#include "backends/ops.h"

namespace bertperf {

int bits_of(DType type) {
  switch (type) {
    case DType::F32: return 32;
#ifndef PLANT_MISSING_DTYPE_CASE
    case DType::F64: return 64;
#endif
    case DType::BF16: return 16;
    case DType::E4M3: case DType::E5M2: return 8;
  }
  return 0;
}

bool is_forward(ops::Op op) {
  switch (op) {
#ifdef PLANT_MISSING_OP_CASE
    case ops::Op::LINEAR_FORWARD: return true;
#else
#define CASE(enumerator, method, Struct) \
  case ops::Op::enumerator: return ops::Op::enumerator == ops::Op::LINEAR_FORWARD;
    BERTPERF_OPS(CASE)
#undef CASE
#endif
  }
  return false;
}

// The vocabulary, with one op more under PLANT_MISSING_BACKEND_OP (as one added to BERTPERF_OPS would be).
struct NewOp {};
struct Vocabulary : OpVocabulary {
#ifdef PLANT_MISSING_BACKEND_OP
  virtual void new_op(const NewOp& p) = 0;
#endif
};

// A backend's ops: the list as it is.
struct ListBackend final : Vocabulary {
  size_t attention_saved_bytes(int, int, int, int) const override { return 0; }
  size_t attention_workspace_bytes(int, int, int, int) const override { return 0; }
#define IMPLEMENT(enumerator, method, Struct) \
  void method(const ops::Struct&) override {}
  BERTPERF_OPS(IMPLEMENT)
#undef IMPLEMENT
};

int use() {
  ListBackend backend;
  return bits_of(DType::F32) + is_forward(ops::Op::LAMB_APPLY) + static_cast<int>(sizeof backend);
}

}  // namespace bertperf
