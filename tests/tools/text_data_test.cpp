// CharVocab and TextDataset: vocabulary round trips, splits, batches, entropy, error cases, and
// the corpus shipped in data/.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "kiln/kiln.h"
#include "text_data.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// A file in a fresh temporary folder, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    // Unique per process and file, as tests run in parallel processes.
    dir_ = fs::temp_directory_path() /
           ("kiln_text_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(dir_);
    path_ = (dir_ / "text.txt").string();
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return path_; }
  std::string dir() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  std::string path_;
};

// ---- CharVocab ----------------------------------------------------------------------------

TEST(CharVocab, IsTheSortedDistinctBytes) {
  CharVocab v = CharVocab::from_text("hello, world\n");
  EXPECT_EQ(v.to_string(), "\n ,dehlorw");
  EXPECT_EQ(v.size(), 10);
  EXPECT_EQ(v.id_of('\n'), 0);
  EXPECT_EQ(v.id_of('w'), 9);
  EXPECT_EQ(v.char_of(3), 'd');
  EXPECT_TRUE(v.contains('h'));
  EXPECT_FALSE(v.contains('z'));
}

TEST(CharVocab, EncodeDecodeRoundTrip) {
  const std::string text = "It is a truth universally acknowledged.\n";
  CharVocab v = CharVocab::from_text(text);
  std::vector<int64_t> ids = v.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(v.char_of(ids[i]), text[i]);
  EXPECT_EQ(v.decode(ids), text);

  Tensor t = v.encode_tensor(text);
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.shape_str(), "[" + std::to_string(text.size()) + "]");
  EXPECT_EQ(v.decode(t), text);
  // Any integer dtype and shape decodes, row-major.
  EXPECT_EQ(v.decode(t.to(DType::Int32).view({1, static_cast<int64_t>(text.size())})), text);
}

TEST(CharVocab, TokensAreUtf8Characters) {
  // "£5 café ∑ 😀": a 2-, 3- and 4-byte character are one token each.
  const std::string text = "\xc2\xa3" "5 caf\xc3\xa9 \xe2\x88\x91 \xf0\x9f\x98\x80";
  CharVocab v = CharVocab::from_text(text);
  EXPECT_EQ(v.size(), 9);  // ' ', '5', 'a', 'c', 'f', '£', 'é', '∑', '😀'
  EXPECT_EQ(v.encode(text).size(), 11u);  // characters, not bytes
  EXPECT_EQ(v.char_of(v.size() - 1), U'\U0001F600');
  EXPECT_EQ(v.encode("\xc2\xa3").size(), 1u);
  EXPECT_EQ(v.decode(v.encode(text)), text);
  // The vocabulary is valid UTF-8 in code-point order, so it can always be saved.
  const std::string stored = v.to_string();
  EXPECT_EQ(stored, " 5acf\xc2\xa3\xc3\xa9\xe2\x88\x91\xf0\x9f\x98\x80" + std::string());
  EXPECT_EQ(CharVocab::from_string(stored), v);
}

TEST(CharVocab, BytesThatAreNotUtf8AreReadAsLatin1) {
  // Every byte value, highest first: invalid UTF-8 throughout. Each byte is one character.
  std::string all;
  for (int b = 255; b >= 0; --b) all.push_back(static_cast<char>(b));
  DecodedText d = decode_text(all);
  EXPECT_EQ(d.chars.size(), 256u);
  EXPECT_EQ(d.invalid_bytes, 128);
  EXPECT_EQ(d.first_invalid_offset, 0);
  CharVocab v = CharVocab::from_text(all);
  EXPECT_EQ(v.size(), 256);
  EXPECT_EQ(v.id_of(U'\0'), 0);
  EXPECT_EQ(v.id_of(U'\u00ff'), 255);
  EXPECT_EQ(v.decode(v.encode(all)).size(), 128u + 2 * 128u);  // comes back as UTF-8
  EXPECT_EQ(CharVocab::from_string(v.to_string()), v) << "a Latin-1 text's vocabulary saves";
  // Truncated, overlong and surrogate sequences are not UTF-8 either.
  EXPECT_EQ(decode_text("a\xc3").invalid_bytes, 1);
  EXPECT_EQ(decode_text("\xc0\xaf").invalid_bytes, 2);
  EXPECT_EQ(decode_text("\xed\xa0\x80").invalid_bytes, 3);
  EXPECT_EQ(decode_text("ok \xe2\x82\xac").invalid_bytes, 0);
}

TEST(TextDataset, NonAsciiTextCountsCharactersAndSaves) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += "na\xc3\xafve \xe2\x80\x94 \xce\xb1\xce\xb2\xce\xb3\n";
  TextDataset ds = TextDataset::from_text(text, 4);
  EXPECT_EQ(ds.tokens().numel(), 20 * 12);
  EXPECT_EQ(ds.invalid_utf8_bytes(), 0);
  EXPECT_EQ(ds.vocab().decode(ds.tokens()), text);
  EXPECT_NO_THROW(safetensors_to_bytes({}, {{"vocab", ds.vocab().to_string()}}));
}

TEST(CharVocab, SerialisesAsItsCharacters) {
  CharVocab v = CharVocab::from_text("the quick brown fox\n\"jumps\"");
  CharVocab back = CharVocab::from_string(v.to_string());
  EXPECT_EQ(back, v);
  EXPECT_EQ(back.encode("quick"), v.encode("quick"));
}

TEST(CharVocab, RejectsCorruptStrings) {
  EXPECT_THROW(CharVocab::from_string(""), DataError);
  EXPECT_THROW(CharVocab::from_string("ba"), DataError);   // not sorted
  EXPECT_THROW(CharVocab::from_string("abb"), DataError);  // not distinct
  EXPECT_THROW(CharVocab::from_string("ab\xff"), DataError);  // not UTF-8
  EXPECT_THROW(CharVocab::from_string("\xc3\xa9" "a"), DataError);  // 'a' after 'é': not sorted
  EXPECT_THROW(CharVocab::from_text(""), DataError);
}

TEST(CharVocab, RejectsUnknownCharactersAndIds) {
  CharVocab v = CharVocab::from_text("abc");
  try {
    v.encode("abz");
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'z' at position 2"), std::string::npos) << e.what();
  }
  try {
    v.encode("a\xc3\xa9" "b");  // positions count characters
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'\xc3\xa9' (U+00E9) at position 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(v.id_of('\t'), ValueError);
  EXPECT_THROW(v.char_of(3), IndexError);
  EXPECT_THROW(v.char_of(-1), IndexError);
  std::vector<int64_t> bad = {0, 7};
  EXPECT_THROW(v.decode(bad), IndexError);
  EXPECT_THROW(v.decode(ones({2}, DType::Float32)), DTypeError);
}

// ---- TextDataset --------------------------------------------------------------------------

TEST(TextDataset, SplitsContiguously) {
  const std::string text = "abcdefghijklmnopqrst";  // 20 characters
  TextDataset ds = TextDataset::from_text(text, /*block_size=*/1);
  EXPECT_EQ(ds.vocab().size(), 20);
  EXPECT_EQ(ds.tokens().numel(), 20);
  EXPECT_EQ(ds.size(Split::kTrain), 18);  // floor(0.9 * 20)
  EXPECT_EQ(ds.size(Split::kVal), 2);
  EXPECT_EQ(ds.vocab().decode(ds.split_tokens(Split::kTrain)), text.substr(0, 18));
  EXPECT_EQ(ds.vocab().decode(ds.split_tokens(Split::kVal)), text.substr(18));

  TextDataset half = TextDataset::from_text(text, 3, 0.5);
  EXPECT_EQ(half.size(Split::kTrain), 10);
  EXPECT_EQ(half.size(Split::kVal), 10);
}

TEST(TextDataset, BatchTargetsAreInputsShiftedByOne) {
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "The quick brown fox jumps over the lazy dog " + std::to_string(i) + ".\n";
  TextDataset ds = TextDataset::from_text(text, 16);
  Generator gen(7);
  for (Split split : {Split::kTrain, Split::kVal}) {
    Batch b = ds.get_batch(split, 5, 16, gen);
    ASSERT_EQ(b.x.shape_str(), "[5, 16]");
    ASSERT_EQ(b.y.shape_str(), "[5, 16]");
    EXPECT_EQ(b.x.dtype(), DType::Int64);
    EXPECT_EQ(b.y.dtype(), DType::Int64);
    const std::string split_text = ds.vocab().decode(ds.split_tokens(split));
    for (int64_t r = 0; r < 5; ++r) {
      std::string xs = ds.vocab().decode(b.x[r]);
      std::string ys = ds.vocab().decode(b.y[r]);
      EXPECT_EQ(xs.substr(1), ys.substr(0, 15));  // y[t] == x[t + 1]
      // The row is a window of this split's text, and y continues it by one character.
      size_t at = split_text.find(xs + ys.back());
      EXPECT_NE(at, std::string::npos)
          << "row " << r << " '" << xs << "' is not from the " << split_name(split) << " text";
    }
  }
}

TEST(TextDataset, BatchesCoverEveryWindowStart) {
  // Train split "abcdef" (ids 0..5) with block 1: windows start at 0..4, x is the start's letter
  // and y the next one; every start must be drawn and none past the last whole window.
  TextDataset ds = TextDataset::from_text("abcdefgh", 1, 0.75);
  ASSERT_EQ(ds.size(Split::kTrain), 6);
  Generator gen(0);
  Batch b = ds.get_batch(Split::kTrain, 400, 1, gen);
  std::vector<int64_t> x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
  std::vector<int> seen(6, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_GE(x[i], 0);
    ASSERT_LE(x[i], 4);  // the last start is 4: target 5 is the split's last token
    EXPECT_EQ(y[i], x[i] + 1);
    ++seen[static_cast<size_t>(x[i])];
  }
  for (int s = 0; s <= 4; ++s) EXPECT_GT(seen[static_cast<size_t>(s)], 0) << "start " << s;
  EXPECT_EQ(seen[5], 0);
}

TEST(TextDataset, BatchesAreDeterministicForASeed) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  TextDataset ds = TextDataset::from_text(text, 8);
  Generator g1(1234), g2(1234), g3(99);
  for (int step = 0; step < 3; ++step) {
    Batch a = ds.get_batch(Split::kTrain, 4, 8, g1);
    Batch b = ds.get_batch(Split::kTrain, 4, 8, g2);
    EXPECT_EQ(a.x.to_vector<int64_t>(), b.x.to_vector<int64_t>()) << "step " << step;
    EXPECT_EQ(a.y.to_vector<int64_t>(), b.y.to_vector<int64_t>()) << "step " << step;
  }
  // Successive batches from one generator differ, and so does another seed.
  Generator h(1234);
  Batch first = ds.get_batch(Split::kTrain, 4, 8, h);
  Batch second = ds.get_batch(Split::kTrain, 4, 8, h);
  EXPECT_NE(first.x.to_vector<int64_t>(), second.x.to_vector<int64_t>());
  Batch other = ds.get_batch(Split::kTrain, 4, 8, g3);
  EXPECT_NE(first.x.to_vector<int64_t>(), other.x.to_vector<int64_t>());
}

TEST(TextDataset, InvalidBatchRequestsLeaveTheGeneratorAlone) {
  TextDataset ds = TextDataset::from_text("abcdefghijklmnopqrst", 1);
  Generator gen(5);
  EXPECT_THROW(ds.get_batch(Split::kTrain, 0, 4, gen), ValueError);
  EXPECT_THROW(ds.get_batch(Split::kTrain, 2, 0, gen), ValueError);
  EXPECT_THROW(ds.get_batch(Split::kVal, 2, 2, gen), DataError);  // val has 2 tokens
  EXPECT_EQ(gen.offset(), 0u);
  ds.get_batch(Split::kVal, 2, 1, gen);  // exactly one window fits
  EXPECT_EQ(gen.offset(), 2u);
}

TEST(TextDataset, UnigramEntropyInNats) {
  // Each split is "aab": p(a) = 2/3, p(b) = 1/3.
  TextDataset ds = TextDataset::from_text("aabaab", 1, 0.5);
  const double expected = -(2.0 / 3 * std::log(2.0 / 3) + 1.0 / 3 * std::log(1.0 / 3));
  EXPECT_NEAR(ds.unigram_entropy(Split::kTrain), expected, 1e-12);
  EXPECT_NEAR(ds.unigram_entropy(Split::kVal), expected, 1e-12);

  // One repeated character: no uncertainty. A uniform alphabet of 4: ln 4.
  TextDataset same = TextDataset::from_text("aaaaaaaaaa", 1, 0.5);
  EXPECT_EQ(same.unigram_entropy(Split::kTrain), 0.0);
  TextDataset uniform = TextDataset::from_text("abcdabcdabcdabcdabcd", 1, 0.8);
  EXPECT_NEAR(uniform.unigram_entropy(Split::kTrain), std::log(4.0), 1e-12);
}

TEST(TextDataset, LoadsFilesAndNormalisesLineEndings) {
  TempFile f("line one\r\nline two\r\nline three\n");
  TextDataset ds = TextDataset::from_file(f.path(), 2);
  EXPECT_EQ(ds.name(), f.path());
  EXPECT_EQ(ds.tokens().numel(), 29);  // 31 bytes less two '\r'
  EXPECT_FALSE(ds.vocab().contains('\r'));
  // A lone '\r' is not a line ending and is kept.
  TextDataset cr = TextDataset::from_text("a\rb\r\nc and more", 1);
  EXPECT_TRUE(cr.vocab().contains('\r'));
  EXPECT_EQ(cr.tokens().numel(), 14);
}

TEST(TextDataset, ReportsFileProblemsClearly) {
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no DataError)";
  };
  std::string missing = message_of([] { TextDataset::from_file("no/such/file.txt", 8); });
  EXPECT_NE(missing.find("no such file 'no/such/file.txt'"), std::string::npos) << missing;

  TempFile empty("");
  std::string msg = message_of([&] { TextDataset::from_file(empty.path(), 8); });
  EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;

  TempFile folder("x");
  msg = message_of([&] { TextDataset::from_file(folder.dir(), 8); });
  EXPECT_NE(msg.find("is a folder"), std::string::npos) << msg;

  // 20 characters: val has 2, so block 1 fits and block 2 does not.
  TempFile small("abcdefghijklmnopqrst");
  EXPECT_NO_THROW(TextDataset::from_file(small.path(), 1));
  msg = message_of([&] { TextDataset::from_file(small.path(), 2); });
  EXPECT_NE(msg.find("too short for block size 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("val split has 2 characters and needs at least 3"), std::string::npos) << msg;
  msg = message_of([&] { TextDataset::from_file(small.path(), 64); });
  EXPECT_NE(msg.find("train split has 18"), std::string::npos) << msg;

  EXPECT_THROW(TextDataset::from_text("abc", 0), ValueError);
  EXPECT_THROW(TextDataset::from_text("abcdef", 1, 1.0), ValueError);
  EXPECT_THROW(TextDataset::from_text("abcdef", 1, 0.0), ValueError);
}

TEST(TextDataset, ShippedCorpus) {
  const std::string path = std::string(KILN_SOURCE_DIR) + "/" + kDefaultCorpus;
  TextDataset ds = TextDataset::from_file(path, 256);
  EXPECT_EQ(ds.tokens().numel(), 684768);  // data/README.md
  EXPECT_EQ(ds.vocab().size(), 75);
  EXPECT_EQ(ds.vocab().decode(ds.tokens().narrow(0, 0, 19)), "PRIDE AND PREJUDICE");
  EXPECT_NEAR(ds.unigram_entropy(Split::kTrain), 3.09, 0.02);
  EXPECT_NEAR(ds.unigram_entropy(Split::kVal), 3.09, 0.05);
}

}  // namespace
}  // namespace kiln::cli
