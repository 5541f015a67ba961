// Fuzz target: the TF1 checkpoint reader (model/tf_checkpoint.h). The input is the index file and the data file
// one after the other: its first 4 bytes (little-endian) give the index's length. Every tensor the index names is
// read. Every outcome but data or an InputError is a finding.
#include <cstring>
#include <vector>

#include "core/errors.h"
#include "fuzz_common.h"
#include "model/tf_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertperf;
  if (size < 4) return 0;
  uint32_t index_size = 0;
  std::memcpy(&index_size, data, 4);
  index_size = std::min<uint32_t>(index_size, static_cast<uint32_t>(size - 4));
  const std::string prefix = (fuzz::scratch() / "model.ckpt").string();
  fuzz::write_file("model.ckpt.index", data + 4, index_size);
  fuzz::write_file("model.ckpt.data-00000-of-00001", data + 4 + index_size, size - 4 - index_size);
  try {
    const TfCheckpointReader reader(prefix);
    std::vector<float> buffer;
    for (const TfTensorEntry& e : reader.entries()) {
      if (e.size < 0 || e.size > (1 << 20) || e.size % 4) continue;
      buffer.resize(static_cast<size_t>(e.size / 4));
      reader.read_float(e, buffer.data(), buffer.size());
    }
  } catch (const InputError&) {
  }
  return 0;
}
