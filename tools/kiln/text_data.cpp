// CharVocab and TextDataset: byte-level vocabulary, file loading, splits, batches, entropy.
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

// How a byte is shown in messages: printable ones as themselves, others as an escape.
std::string describe_byte(unsigned char b) {
  std::ostringstream os;
  if (b == '\n') {
    os << "'\\n'";
  } else if (b >= 0x20 && b < 0x7f) {
    os << "'" << static_cast<char>(b) << "'";
  } else {
    os << "byte 0x" << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(b);
  }
  return os.str();
}

std::string normalise_line_endings(std::string text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out.push_back(text[i]);
  }
  return out;
}

}  // namespace

// ---- CharVocab ----------------------------------------------------------------------------

CharVocab::CharVocab(std::string chars) : chars_(std::move(chars)) {
  id_of_.fill(-1);
  for (size_t i = 0; i < chars_.size(); ++i) {
    id_of_[static_cast<unsigned char>(chars_[i])] = static_cast<int16_t>(i);
  }
}

CharVocab CharVocab::from_text(std::string_view text) {
  KILN_CHECK(!text.empty(), DataError, "cannot build a vocabulary from empty text");
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string chars;
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) chars.push_back(static_cast<char>(b));
  }
  return CharVocab(std::move(chars));
}

CharVocab CharVocab::from_string(std::string_view chars) {
  KILN_CHECK(!chars.empty(), DataError, "a vocabulary string must not be empty");
  for (size_t i = 1; i < chars.size(); ++i) {
    auto prev = static_cast<unsigned char>(chars[i - 1]);
    auto cur = static_cast<unsigned char>(chars[i]);
    KILN_CHECK(prev < cur, DataError, "a vocabulary string must hold distinct bytes in increasing ",
               "order; ", describe_byte(cur), " at position ", i, " follows ", describe_byte(prev));
  }
  return CharVocab(std::string(chars));
}

int64_t CharVocab::id_of(char c) const {
  int16_t id = id_of_[static_cast<unsigned char>(c)];
  KILN_CHECK(id >= 0, ValueError, describe_byte(static_cast<unsigned char>(c)),
             " is not in the vocabulary of ", size(), " characters");
  return id;
}

char CharVocab::char_of(int64_t id) const {
  KILN_CHECK(id >= 0 && id < size(), IndexError, "token id ", id, " is outside the vocabulary [0, ",
             size(), ")");
  return chars_[static_cast<size_t>(id)];
}

std::vector<int64_t> CharVocab::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int16_t id = id_of_[static_cast<unsigned char>(text[i])];
    KILN_CHECK(id >= 0, ValueError, describe_byte(static_cast<unsigned char>(text[i])),
               " at position ", i, " is not in the vocabulary of ", size(), " characters");
    ids.push_back(id);
  }
  return ids;
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
  for (int64_t id : ids) text.push_back(char_of(id));
  return text;
}

std::string CharVocab::decode(const Tensor& ids) const {
  KILN_CHECK(ids.defined(), ValueError, "decode: the tensor of token ids is undefined");
  KILN_CHECK(is_integral(ids.dtype()), DTypeError, "decode expects integer token ids, got ",
             ids.dtype());
  std::vector<int64_t> v = ids.to_vector<int64_t>();
  return decode(std::span<const int64_t>(v));
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
  ds.vocab_ = CharVocab::from_text(text);
  ds.tokens_ = ds.vocab_.encode_tensor(text);
  const auto n = static_cast<int64_t>(text.size());
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
    if (c == 0) continue;  // 0 ln 0 = 0: a byte absent from this split contributes nothing
    double p = static_cast<double>(c) / static_cast<double>(n);
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace kiln::cli
