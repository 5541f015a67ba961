// The tensor table behind flat parameter memory (tensor_table.h).
#include "core/tensor_table.h"

namespace bertperf {

size_t TensorTable::add(const std::string& name, std::vector<int64_t> shape, bool lamb_excluded) {
  BERT_CHECK(!index_.count(name), "tensor '", name, "' added twice");
  size_t numel = 1;
  for (int64_t d : shape) {
    BERT_CHECK(d > 0, "tensor '", name, "' has a non-positive dimension");
    numel *= static_cast<size_t>(d);
  }
  // 64 floats = 256 bytes: every tensor starts on an aligned boundary.
  const size_t offset = align_up(total_, kAlignment / sizeof(float));
  tensors_.push_back({name, offset, std::move(shape), numel, lamb_excluded});
  index_[name] = tensors_.size() - 1;
  total_ = offset + numel;
  return tensors_.size() - 1;
}

const TensorInfo* TensorTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& TensorTable::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  BERT_CHECK(t != nullptr, "no tensor named '", name, "'");
  return *t;
}

}  // namespace bertperf
