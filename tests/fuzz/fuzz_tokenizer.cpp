// Fuzz target: the reference WordPiece tokenizer (data/tokenizer.h) on arbitrary bytes (invalid UTF-8 included),
// with a small vocabulary; every id it returns must be in the vocabulary.
#include <cstdlib>
#include <string_view>

#include "data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertperf;
  static const FullTokenizer tokenizer(Vocab::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "##s", "##ing", "un", "##able", "run", "##n", "e",
       "##e", "é", "中", "!", ",", ".", "1", "##2", "x", "##x"}));
  std::vector<int32_t> ids;
  tokenizer.encode(std::string_view(reinterpret_cast<const char*>(data), size), ids);
  for (int32_t id : ids)
    if (id < 0 || id >= static_cast<int32_t>(tokenizer.vocab().size())) std::abort();
  return 0;
}
