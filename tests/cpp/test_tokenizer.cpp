// Tests of the BERT tokenizer (implementations/data/tokenizer.h).
//
// The oracle for real and random text is tests/golden/tokenizer_golden.tsv, written by
// tests/reference/make_tokenizer_golden.py with HuggingFace's Python BertTokenizer set up as the
// MLPerf reference; it needs the standard uncased vocabulary that scripts/prepare_corpus.py puts
// in data/vocab/vocab.txt. The unit cases use small hand-made vocabularies whose expected output
// follows from the rules of bert-reference.md 3.5 by hand.
#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/errors.h"

namespace bertperf {
namespace {

using Tokens = std::vector<std::string>;

FullTokenizer make(const Tokens& vocab, TokenizerOptions options = {}) {
  return FullTokenizer(Vocab::from_tokens(vocab), options);
}

const Tokens kSmallVocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un",
                            "runn", "##ing", ",", "low", "##er", "##est", ".", "a", "##a"};

TEST(BasicTokenizer, LowercasesStripsAccentsAndSplitsPunctuation) {
  FullTokenizer tok = make(kSmallVocab);
  EXPECT_EQ(tok.basic_tokenize(" \tHeLLo!how  \n Are yoU?  "), (Tokens{"hello", "!", "how", "are", "you", "?"}));
  EXPECT_EQ(tok.basic_tokenize("H\u00E9llo"), (Tokens{"hello"}));
  // ASCII symbols outside category P are punctuation too; "-" inside a word splits it.
  EXPECT_EQ(tok.basic_tokenize("a$b^c`d well-known"), (Tokens{"a", "$", "b", "^", "c", "`", "d", "well", "-", "known"}));
  // Unicode punctuation (category P*): em dash, guillemets, inverted question mark.
  EXPECT_EQ(tok.basic_tokenize("\u00BFqu\u00E9?\u2014\u00ABs\u00ED\u00BB"),
            (Tokens{"\u00BF", "que", "?", "\u2014", "\u00AB", "si", "\u00BB"}));
}

TEST(BasicTokenizer, KeepsCaseWhenNotLowercasing) {
  TokenizerOptions cased;
  cased.do_lower_case = false;
  FullTokenizer tok = make(kSmallVocab, cased);
  EXPECT_EQ(tok.basic_tokenize("H\u00E9llo World!"), (Tokens{"H\u00E9llo", "World", "!"}));
}

TEST(BasicTokenizer, CleansControlCharactersAndWhitespace) {
  FullTokenizer tok = make(kSmallVocab);
  // NUL, U+FFFD, a C0 control, soft hyphen (Cf) and zero-width space (Cf) vanish without a split;
  // no-break space and ideographic space (Zs) split.
  static const char kDirty[] = "ab\x00" "c\uFFFDd\x01" "e\u00ADf\u200Bg";
  EXPECT_EQ(tok.basic_tokenize(std::string(kDirty, sizeof(kDirty) - 1)), (Tokens{"abcdefg"}));
  EXPECT_EQ(tok.basic_tokenize("a\u00A0b\u3000c"), (Tokens{"a", "b", "c"}));
  // Line and paragraph separators are neither control nor Zs, but str.split() splits on them.
  EXPECT_EQ(tok.basic_tokenize("a\u2028b\u2029c"), (Tokens{"a", "b", "c"}));
  // Private-use characters are category Co, not Cc/Cf: the reference keeps them.
  EXPECT_EQ(tok.basic_tokenize("a\uE000b"), (Tokens{"a\uE000b"}));
}

TEST(BasicTokenizer, SpacesCjkIdeographsButNotKana) {
  FullTokenizer tok = make(kSmallVocab);
  EXPECT_EQ(tok.basic_tokenize("ab\u4E2D\u6587cd"), (Tokens{"ab", "\u4E2D", "\u6587", "cd"}));
  EXPECT_EQ(tok.basic_tokenize("\u3072\u3089\u304C\u306A"), (Tokens{"\u3072\u3089\u304B\u306A"}));  // が loses its dakuten
  EXPECT_EQ(tok.basic_tokenize("x\U00020000y"), (Tokens{"x", "\U00020000", "y"}));
}

TEST(BasicTokenizer, PythonLowercasingRules) {
  FullTokenizer tok = make(kSmallVocab);
  // Final sigma: word-final capital sigma lowercases to U+03C2, other positions to U+03C3; a
  // following case-ignorable "." does not stop it being final.
  EXPECT_EQ(tok.basic_tokenize("\u039F\u0394\u039F\u03A3 \u03A3\u039F\u03A3."),
            (Tokens{"\u03BF\u03B4\u03BF\u03C2", "\u03C3\u03BF\u03C2", "."}));
  // A lone capital sigma has no cased letter before it: not final.
  EXPECT_EQ(tok.basic_tokenize("\u03A3"), (Tokens{"\u03C3"}));
  // Dotted capital I lowercases to "i" + U+0307, and the combining dot is stripped.
  EXPECT_EQ(tok.basic_tokenize("\u0130STANBUL"), (Tokens{"istanbul"}));
  // Kelvin sign lowercases to ASCII k; Angstrom sign to a-ring, then stripped to a.
  EXPECT_EQ(tok.basic_tokenize("\u212A\u212B"), (Tokens{"ka"}));
}

TEST(BasicTokenizer, AccentStrippingUsesFullCanonicalDecomposition) {
  FullTokenizer tok = make(kSmallVocab);
  // U+1E69 (s with dot below and dot above) decomposes to s + two Mn marks.
  EXPECT_EQ(tok.basic_tokenize("\u1E69"), (Tokens{"s"}));
  // A Hangul syllable decomposes into conjoining jamo (category Lo, kept).
  EXPECT_EQ(tok.basic_tokenize("\uD55C"), (Tokens{"\u1112\u1161\u11AB"}));
  // A word of combining marks only is stripped to nothing and disappears.
  EXPECT_EQ(tok.basic_tokenize("a \u0301\u0308 b"), (Tokens{"a", "b"}));
}

TEST(BasicTokenizer, InvalidUtf8IsSkippedLikePythonIgnore) {
  FullTokenizer tok = make(kSmallVocab);
  EXPECT_EQ(tok.basic_tokenize("a\xFF" "b"), (Tokens{"ab"}));
  // Truncated three-byte sequence, then a valid euro sign.
  EXPECT_EQ(tok.basic_tokenize("x\xE2\x82\xE2\x82\xAC"), (Tokens{"x\u20AC"}));
  // Overlong "/" (C0 AF), an encoded surrogate (ED A0 80), and a value above U+10FFFF.
  EXPECT_EQ(tok.basic_tokenize("p\xC0\xAFq\xED\xA0\x80r\xF4\x90\x80\x80s"), (Tokens{"pqrs"}));
  std::vector<int32_t> ids;
  EXPECT_EQ(tok.encode("a\xFF\xFE", ids), 2u);
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  FullTokenizer tok = make(kSmallVocab);
  EXPECT_EQ(tok.tokenize("UNwant\u00E9d,running"), (Tokens{"un", "##want", "##ed", ",", "runn", "##ing"}));
  EXPECT_EQ(tok.tokenize("lower lowest."), (Tokens{"low", "##er", "low", "##est", "."}));
  EXPECT_EQ(tok.encode("want"), (std::vector<int32_t>{4}));
  EXPECT_TRUE(tok.tokenize("").empty());
  EXPECT_TRUE(tok.tokenize(" \t\n").empty());
}

TEST(WordPiece, UnmatchableWordIsOneUnknown) {
  FullTokenizer tok = make(kSmallVocab);
  // "unwantedx": un ##want ##ed would match, but no piece covers the final x: the whole word is
  // one [UNK], not the matched prefix plus [UNK].
  EXPECT_EQ(tok.tokenize("unwantedX running"), (Tokens{"[UNK]", "runn", "##ing"}));
  EXPECT_EQ(tok.tokenize("xyz"), (Tokens{"[UNK]"}));
}

TEST(WordPiece, WordsOverTwoHundredCharactersAreUnknown) {
  FullTokenizer tok = make(kSmallVocab);
  EXPECT_EQ(tok.encode(std::string(200, 'a')).size(), 200u);
  EXPECT_EQ(tok.tokenize(std::string(201, 'a')), (Tokens{"[UNK]"}));
  // The limit counts characters, not bytes: 200 two-byte letters are within it.
  std::string cyrillic;
  for (int i = 0; i < 200; ++i) cyrillic += "\u0436";
  Tokens vocab = kSmallVocab;
  vocab.push_back("\u0436");
  vocab.push_back("##\u0436");
  FullTokenizer with_zhe = make(vocab);
  EXPECT_EQ(with_zhe.encode(cyrillic).size(), 200u);
  EXPECT_EQ(with_zhe.tokenize(cyrillic + "\u0436"), (Tokens{"[UNK]"}));
  // The limit is applied after accent stripping: 200 letters each with an accent are 200 characters.
  std::string accented;
  for (int i = 0; i < 200; ++i) accented += "a\u0301";
  EXPECT_EQ(tok.encode(accented).size(), 200u);

  TokenizerOptions hundred;
  hundred.max_input_chars_per_word = 100;
  EXPECT_EQ(make(kSmallVocab, hundred).tokenize(std::string(101, 'a')), (Tokens{"[UNK]"}));
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = std::string(BERTPERF_BINARY_DIR) + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(Vocab, LoadsLikeTheReference) {
  // Lines are Python-stripped, a repeated token keeps its first id and takes no new one, and a
  // final line without newline counts.
  const std::string path = write_temp("tokenizer_vocab.txt", "[PAD]\n [UNK] \r\nhello\nhello\n\u3000x\u2028\nlast");
  Vocab v = Vocab::load(path);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v.find("[UNK]"), 1);
  EXPECT_EQ(v.find("hello"), 2);
  EXPECT_EQ(v.find("x"), 3);
  EXPECT_EQ(v.find("last"), 4);
  EXPECT_EQ(FullTokenizer(std::move(v)).encode("Hello last"), (std::vector<int32_t>{2, 4}));
}

TEST(Vocab, BadFilesGetClearErrors) {
  try {
    Vocab::load("/nonexistent/vocab.txt");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/vocab.txt"), std::string::npos) << e.what();
  }
  const std::string path = write_temp("tokenizer_vocab_nounk.txt", "a\nb\n");
  try {
    FullTokenizer tok(Vocab::load(path));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("[UNK]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// ---- golden: HuggingFace BertTokenizer (reference settings) on real text and hard lines ----------

std::string unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 >= field.size()) {
      out.push_back(field[i]);
    } else if (field[i + 1] == '\\') {
      out.push_back('\\');
      ++i;
    } else if (field[i + 1] == 'x' && i + 3 < field.size()) {
      out.push_back(static_cast<char>(std::stoi(field.substr(i + 2, 2), nullptr, 16)));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

TEST(Golden, MatchesReferenceOnEveryLine) {
  const std::string source = BERTPERF_SOURCE_DIR;
  const std::string vocab_path = source + "/data/vocab/vocab.txt";
  const std::string golden_path = source + "/tests/golden/tokenizer_golden.tsv";
  if (!std::ifstream(vocab_path)) GTEST_SKIP() << "no " << vocab_path << ": run scripts/prepare_corpus.py first";
  std::ifstream golden(golden_path, std::ios::binary);
  ASSERT_TRUE(golden) << "cannot open " << golden_path;
  FullTokenizer tok(Vocab::load(vocab_path));
  ASSERT_EQ(tok.vocab().size(), 30522u) << "the golden ids are for the standard uncased vocabulary";

  std::string record;
  size_t line_no = 0, checked = 0, mismatches = 0;
  std::vector<int32_t> ids;
  while (std::getline(golden, record)) {
    ++line_no;
    if (record.empty() || record[0] == '#') continue;
    const size_t tab = record.find('\t');
    ASSERT_NE(tab, std::string::npos) << golden_path << ":" << line_no << ": no tab";
    const std::string text = unescape(record.substr(0, tab));
    std::vector<int32_t> expected;
    std::istringstream id_stream(record.substr(tab + 1));
    for (int32_t id; id_stream >> id;) expected.push_back(id);
    ids.clear();
    tok.encode(text, ids);
    ++checked;
    if (ids != expected && ++mismatches <= 10) {
      std::ostringstream got, want;
      for (int32_t id : ids) got << tok.vocab().token(id) << ' ';
      for (int32_t id : expected) want << tok.vocab().token(id) << ' ';
      ADD_FAILURE() << golden_path << ":" << line_no << ": " << text << "\n  want: " << want.str()
                    << "\n  got:  " << got.str();
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << checked << " lines";
  EXPECT_GE(checked, 10000u);
}

}  // namespace
}  // namespace bertperf
