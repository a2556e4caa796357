// CharVocab and TextDataset: character-level (UTF-8) vocabulary, file loading, splits, batches, entropy.
#include "text_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace kiln::cli {

namespace {

std::string normalise_line_endings(std::string text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out.push_back(text[i]);
  }
  return out;
}

// The code point of the valid UTF-8 sequence at s[i], and its length; 0 when the bytes there
// are not a valid (shortest-form, non-surrogate, <= U+10FFFF) sequence.
size_t utf8_sequence(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len;
  char32_t min;
  if ((b0 & 0xe0) == 0xc0) {
    len = 2, cp = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3, cp = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

}  // namespace

DecodedText decode_text(std::string_view bytes) {
  DecodedText d;
  d.chars.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    char32_t cp;
    size_t len = utf8_sequence(bytes, i, cp);
    if (len == 0) {  // not UTF-8: the byte's Latin-1 character
      if (d.first_invalid_offset < 0) d.first_invalid_offset = static_cast<int64_t>(i);
      ++d.invalid_bytes;
      cp = static_cast<unsigned char>(bytes[i]);
      len = 1;
    }
    d.chars.push_back(cp);
    i += len;
  }
  return d;
}

std::string utf8_of(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
  return out;
}

std::string describe_char(char32_t c) {
  std::ostringstream os;
  auto hex = [&] {
    os << "U+" << std::hex << std::uppercase << std::setw(4) << std::setfill('0')
       << static_cast<uint32_t>(c);
  };
  if (c == '\n') {
    os << "'\\n'";
  } else if (c >= 0x20 && c < 0x7f) {
    os << "'" << static_cast<char>(c) << "'";
  } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || (c >= 0xd800 && c <= 0xdfff) ||
             c > 0x10ffff) {
    hex();  // control characters (and non-characters) only by number
  } else {
    os << "'" << utf8_of(c) << "' (";
    hex();
    os << ")";
  }
  return os.str();
}

// ---- CharVocab ----------------------------------------------------------------------------

CharVocab::CharVocab(std::u32string chars) : chars_(std::move(chars)) {
  ascii_id_.fill(-1);
  for (size_t i = 0; i < chars_.size(); ++i)
    if (chars_[i] < 128) ascii_id_[chars_[i]] = static_cast<int32_t>(i);
}

int64_t CharVocab::lookup(char32_t c) const {
  if (c < 128) return ascii_id_[c];
  auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
  return it != chars_.end() && *it == c ? it - chars_.begin() : -1;
}

CharVocab CharVocab::from_chars(std::u32string_view text) {
  KILN_CHECK(!text.empty(), DataError, "cannot build a vocabulary from empty text");
  std::u32string chars(text);
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return CharVocab(std::move(chars));
}

CharVocab CharVocab::from_text(std::string_view text) {
  KILN_CHECK(!text.empty(), DataError, "cannot build a vocabulary from empty text");
  return from_chars(decode_text(text).chars);
}

CharVocab CharVocab::from_string(std::string_view s) {
  KILN_CHECK(!s.empty(), DataError, "a vocabulary string must not be empty");
  std::u32string chars;
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t len = utf8_sequence(s, i, cp);
    KILN_CHECK(len > 0, DataError, "a vocabulary string must be valid UTF-8; byte ", i,
               " (0x", std::hex, static_cast<int>(static_cast<unsigned char>(s[i])), std::dec,
               ") is not");
    KILN_CHECK(chars.empty() || chars.back() < cp, DataError,
               "a vocabulary string must hold distinct characters in increasing order; ",
               describe_char(cp), " at position ", chars.size(), " follows ",
               describe_char(chars.empty() ? 0 : chars.back()));
    chars.push_back(cp);
    i += len;
  }
  return CharVocab(std::move(chars));
}

std::string CharVocab::to_string() const {
  std::string s;
  for (char32_t c : chars_) s += utf8_of(c);
  return s;
}

int64_t CharVocab::id_of(char32_t c) const {
  int64_t id = lookup(c);
  KILN_CHECK(id >= 0, ValueError, describe_char(c), " is not in the vocabulary of ", size(),
             " characters");
  return id;
}

char32_t CharVocab::char_of(int64_t id) const {
  KILN_CHECK(id >= 0 && id < size(), IndexError, "token id ", id, " is outside the vocabulary [0, ",
             size(), ")");
  return chars_[static_cast<size_t>(id)];
}

std::vector<int64_t> CharVocab::encode(std::u32string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int64_t id = lookup(text[i]);
    KILN_CHECK(id >= 0, ValueError, describe_char(text[i]), " at position ", i,
               " is not in the vocabulary of ", size(), " characters");
    ids.push_back(id);
  }
  return ids;
}

std::vector<int64_t> CharVocab::encode(std::string_view text) const {
  return encode(decode_text(text).chars);
}

Tensor CharVocab::encode_tensor(std::string_view text) const {
  std::vector<int64_t> ids = encode(text);
  Tensor t = make_tensor({static_cast<int64_t>(ids.size())}, DType::Int64);
  std::copy(ids.begin(), ids.end(), t.data_ptr<int64_t>());
  return t;
}

std::string CharVocab::decode(std::span<const int64_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) text += utf8_of(char_of(id));
  return text;
}

std::string CharVocab::decode(const Tensor& ids) const {
  KILN_CHECK(ids.defined(), ValueError, "decode: the tensor of token ids is undefined");
  KILN_CHECK(is_integral(ids.dtype()), DTypeError, "decode expects integer token ids, got ",
             ids.dtype());
  std::vector<int64_t> v = ids.to_vector<int64_t>();
  return decode(std::span<const int64_t>(v));
}

std::string default_prompt(const CharVocab& vocab) {
  return vocab.contains(U'\n') ? std::string("\n") : utf8_of(vocab.char_of(0));
}

std::string default_corpus_path() {
  std::error_code ec;
  if (std::filesystem::exists(kDefaultCorpus, ec)) return kDefaultCorpus;
#ifdef KILN_SOURCE_DIR
  std::string in_source = std::string(KILN_SOURCE_DIR) + "/" + kDefaultCorpus;
  if (std::filesystem::exists(in_source, ec)) return in_source;
#endif
  return kDefaultCorpus;
}

// ---- TextDataset --------------------------------------------------------------------------

const char* split_name(Split split) { return split == Split::kTrain ? "train" : "val"; }

TextDataset TextDataset::from_file(const std::string& path, int64_t block_size,
                                   double train_fraction) {
  std::error_code ec;
  KILN_CHECK(std::filesystem::exists(path, ec), DataError, "no such file '", path, "'");
  KILN_CHECK(!std::filesystem::is_directory(path, ec), DataError, "'", path,
             "' is a folder, not a text file");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), DataError, "cannot read '", path, "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  KILN_CHECK(!in.bad(), DataError, "error while reading '", path, "'");
  return from_text(contents.str(), block_size, train_fraction, path);
}

TextDataset TextDataset::from_text(std::string text, int64_t block_size, double train_fraction,
                                   std::string name) {
  KILN_CHECK(train_fraction > 0.0 && train_fraction < 1.0, ValueError,
             "train fraction must be in (0, 1), got ", train_fraction);
  KILN_CHECK(block_size > 0, ValueError, "block size must be positive, got ", block_size);
  text = normalise_line_endings(std::move(text));
  KILN_CHECK(!text.empty(), DataError, "'", name, "' is empty");

  TextDataset ds;
  ds.name_ = std::move(name);
  DecodedText decoded = decode_text(text);
  text = std::string();  // the characters are all that is kept
  ds.invalid_bytes_ = decoded.invalid_bytes;
  ds.first_invalid_ = decoded.first_invalid_offset;
  ds.vocab_ = CharVocab::from_chars(decoded.chars);
  {
    std::vector<int64_t> ids = ds.vocab_.encode(decoded.chars);
    ds.tokens_ = make_tensor({static_cast<int64_t>(ids.size())}, DType::Int64);
    std::copy(ids.begin(), ids.end(), ds.tokens_.data_ptr<int64_t>());
  }
  const auto n = static_cast<int64_t>(decoded.chars.size());
  ds.train_size_ = static_cast<int64_t>(std::floor(static_cast<double>(n) * train_fraction));
  ds.check_block_size(block_size);
  return ds;
}

void TextDataset::check_block_size(int64_t block_size) const {
  // Every split must hold one whole window: block_size inputs plus the target after the last.
  for (Split s : {Split::kTrain, Split::kVal}) {
    KILN_CHECK(size(s) >= block_size + 1, DataError, "'", name_, "' is too short for block size ",
               block_size, ": its ", split_name(s), " split has ", size(s),
               " characters and needs at least ", block_size + 1, " (the file has ",
               tokens_.numel(), " in all)");
  }
}

int64_t TextDataset::size(Split split) const {
  return split == Split::kTrain ? train_size_ : tokens_.numel() - train_size_;
}

Tensor TextDataset::split_tokens(Split split) const {
  return split == Split::kTrain ? tokens_.narrow(0, 0, train_size_)
                                : tokens_.narrow(0, train_size_, size(Split::kVal));
}

Batch TextDataset::get_batch(Split split, int64_t batch_size, int64_t block_size,
                             Generator& gen) const {
  KILN_CHECK(batch_size > 0, ValueError, "get_batch: batch size must be positive, got ",
             batch_size);
  KILN_CHECK(block_size > 0, ValueError, "get_batch: block size must be positive, got ",
             block_size);
  const int64_t n = size(split);
  KILN_CHECK(n >= block_size + 1, DataError, "'", name_, "' ", split_name(split), " split has ", n,
             " characters, too few for block size ", block_size, " (needs ", block_size + 1, ")");
  // Window starts are uniform over every position that leaves room for the shifted target.
  std::vector<int64_t> starts =
      randint(0, n - block_size, {batch_size}, DType::Int64, &gen).to_vector<int64_t>();

  const int64_t* src = split_tokens(split).data_ptr<int64_t>();
  Batch batch{make_tensor({batch_size, block_size}, DType::Int64),
              make_tensor({batch_size, block_size}, DType::Int64)};
  int64_t* x = batch.x.data_ptr<int64_t>();
  int64_t* y = batch.y.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t* window = src + starts[static_cast<size_t>(b)];
    std::copy(window, window + block_size, x + b * block_size);
    std::copy(window + 1, window + block_size + 1, y + b * block_size);
  }
  return batch;
}

double TextDataset::unigram_entropy(Split split) const {
  std::vector<int64_t> counts(static_cast<size_t>(vocab_.size()), 0);
  Tensor toks = split_tokens(split);
  const int64_t* ids = toks.data_ptr<int64_t>();
  const int64_t n = toks.numel();
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(ids[i])];
  double h = 0.0;
  for (int64_t c : counts) {
    if (c == 0) continue;  // 0 ln 0 = 0: a character absent from this split contributes nothing
    double p = static_cast<double>(c) / static_cast<double>(n);
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace kiln::cli
