// Flat parameter memory on a backend (param_buffers.h).
#include "model/param_buffers.h"

#include "core/errors.h"

namespace bertperf {

ParamBuffers::ParamBuffers(Backend& backend, const TensorTable& table) : backend_(backend), table_(&table) {
  const size_t n = table.total_elements();
  master_ = DeviceBuffer(backend, n * dtype_size(backend.master_dtype()));
  grads_ = DeviceBuffer(backend, n * dtype_size(backend.master_dtype()));
  if (backend.weight_dtype() != backend.master_dtype())
    copy_ = DeviceBuffer(backend, n * dtype_size(backend.weight_dtype()));
}

void ParamBuffers::upload(const FlatTensors& host) {
  BERT_CHECK(&host.table() == table_ || host.size() == elements(), "parameters laid out by another table");
  upload_floats(backend_, master(), backend_.master_dtype(), host.data(), elements());
  if (copy_.data()) backend_.convert(copy_.data(), backend_.weight_dtype(), master(), backend_.master_dtype(), elements());
}

void ParamBuffers::download(FlatTensors& host) const {
  BERT_CHECK(host.size() == elements(), "parameters laid out by another table");
  download_floats(backend_, host.data(), master(), backend_.master_dtype(), elements());
}

void ParamBuffers::download_grads(FlatTensors& host) const {
  BERT_CHECK(host.size() == elements(), "gradients laid out by another table");
  download_floats(backend_, host.data(), grads(), backend_.master_dtype(), elements());
}

}  // namespace bertperf
