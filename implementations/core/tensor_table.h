// Flat parameter memory: every parameter tensor is a slice of one fp32 allocation, described by a
// table of (TF variable name, offset, shape). Gradients, fp32 master weights and LAMB moments are
// further allocations with the same table, so the optimizer, the gradient all-reduce and checkpoint
// I/O each walk one buffer. Offsets are aligned so the same layout serves vectorised CPU loops and
// GPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"

namespace bertperf {

// An element range [begin, end) of a flat buffer.
struct FlatRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
  bool operator==(const FlatRange&) const = default;
};

struct TensorInfo {
  std::string name;            // TF variable name, e.g. "bert/encoder/layer_0/attention/self/query/kernel"
  size_t offset = 0;           // in elements from the start of the flat buffer
  std::vector<int64_t> shape;  // TF shape; kernels are [in, out]
  size_t numel = 0;
  bool lamb_excluded = false;  // LAMB applies neither weight decay nor the trust ratio (LayerNorm and bias variables)
};

class TensorTable {
 public:
  // Appends a tensor at the next aligned offset and returns its index.
  size_t add(const std::string& name, std::vector<int64_t> shape, bool lamb_excluded = false);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  const TensorInfo& operator[](size_t i) const { return tensors_[i]; }
  // Total elements of a flat buffer laid out by this table, padding included.
  size_t total_elements() const { return total_; }
  // nullptr when absent.
  const TensorInfo* find(const std::string& name) const;
  const TensorInfo& at(const std::string& name) const;

 private:
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  size_t total_ = 0;
};

// One flat fp32 buffer shaped by a table: parameters, gradients, moments.
class FlatTensors {
 public:
  explicit FlatTensors(const TensorTable& table) : table_(&table), data_(table.total_elements()) {}

  float* get(const TensorInfo& t) { return data_.data() + t.offset; }
  const float* get(const TensorInfo& t) const { return data_.data() + t.offset; }
  float* get(const std::string& name) { return get(table_->at(name)); }
  const float* get(const std::string& name) const { return get(table_->at(name)); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  size_t size() const { return data_.size(); }
  void zero() { data_.zero(); }
  const TensorTable& table() const { return *table_; }

 private:
  const TensorTable* table_;
  AlignedBuffer<float> data_;
};

}  // namespace bertperf
