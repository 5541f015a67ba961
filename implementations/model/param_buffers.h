// Flat parameter memory in backend memory: the master weights and the gradients (F, the backend's master dtype)
// and, where the backend's weight dtype differs (bf16 on a GPU), the copy of the weights the ops read (W), which the
// LAMB update rewrites. All three are laid out by one TensorTable; host copies (core/tensor_table.h FlatTensors,
// fp32) are what initialisation and checkpoints use.
#pragma once

#include "backends/backend.h"
#include "core/tensor_table.h"

namespace bertperf {

class ParamBuffers {
 public:
  ParamBuffers(Backend& backend, const TensorTable& table);

  void* master() const { return master_.data(); }
  void* grads() const { return grads_.data(); }
  // What forward and backward read: the weight copy, or the master weights themselves.
  const void* weights() const { return copy_.data() ? copy_.data() : master_.data(); }
  void* weight_copy() const { return copy_.data(); }  // null when there is none
  const TensorTable& table() const { return *table_; }
  size_t elements() const { return table_->total_elements(); }

  void upload(const FlatTensors& host);          // master and weight copy from host fp32
  void download(FlatTensors& host) const;        // master to host fp32
  void download_grads(FlatTensors& host) const;  // gradients to host fp32

 private:
  Backend& backend_;
  const TensorTable* table_;
  DeviceBuffer master_, grads_, copy_;
};

}  // namespace bertperf
