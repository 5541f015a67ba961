// Gradient reducers (reducer.h): the identity for one rank, MPI over host memory for several.
#include "dist/reducer.h"

#include "core/errors.h"

namespace bertperf {

namespace {

class IdentityReducer final : public GradReducer {
 public:
  void finish(void*, size_t) override {}
  void sum(double*, size_t) override {}
};

// The whole buffer in one all-reduce (chunked by the context) once the backward is done; ready() is not used.
class HostMpiReducer final : public GradReducer {
 public:
  HostMpiReducer(DistContext& dist, DType type) : dist_(dist), type_(type) {}
  void finish(void* grads, size_t count) override {
    if (type_ == DType::F32)
      dist_.allreduce_sum(static_cast<float*>(grads), count);
    else
      dist_.allreduce_sum(static_cast<double*>(grads), count);
  }
  void sum(double* values, size_t count) override { dist_.allreduce_sum(values, count); }

 private:
  DistContext& dist_;
  DType type_;
};

}  // namespace

std::unique_ptr<GradReducer> make_mpi_reducer(DistContext& dist, DType type) {
  if (type != DType::F32 && type != DType::F64)
    throw InternalError("the MPI gradient reducer sums fp32 or fp64 gradients, not bf16");
  return std::make_unique<HostMpiReducer>(dist, type);
}

std::unique_ptr<GradReducer> make_grad_reducer(Backend& backend, DistContext& dist) {
  if (dist.size() == 1) return std::make_unique<IdentityReducer>();
  // The CPU backends' device memory is host memory, which MPI reads directly.
  const std::string name = backend.name();
  if (name != "cpu" && name != "cpu-f64")
    throw InternalError(cat("reducing gradients in ", name, " device memory across ", dist.size(),
                            " ranks needs the NCCL reducer, which is not built yet"));
  return make_mpi_reducer(dist, backend.master_dtype());
}

}  // namespace bertperf
