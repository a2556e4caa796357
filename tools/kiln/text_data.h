// Character-level text data for `kiln train`: the vocabulary (CharVocab) and the dataset of
// token ids with its train/validation split and random batches (TextDataset).
//
// Tokens are characters (Unicode code points): the text is decoded as UTF-8, the vocabulary is
// the sorted set of its distinct characters, and a token id is a character's rank in that set.
// So "N characters" counts characters, and every vocabulary is valid UTF-8 when saved. Any
// file is accepted: a byte that is not part of a valid UTF-8 sequence is read as the Latin-1
// character with that code (U+0080..U+00FF), so Latin-1 / Windows-1252 text trains too and
// samples come out as UTF-8 (decode_text() counts such bytes; `kiln train` reports them).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

namespace kiln::cli {

// A text file cannot be used as a dataset: missing, unreadable, empty, or too short for the
// requested context length.
class DataError : public kiln::Error {
 public:
  using kiln::Error::Error;
};

// Text decoded as UTF-8 into characters (code points); bytes outside valid UTF-8 are read as
// Latin-1 characters.
struct DecodedText {
  std::u32string chars;
  int64_t invalid_bytes = 0;         // bytes read as Latin-1
  int64_t first_invalid_offset = -1;  // byte offset of the first, -1 when none
};
DecodedText decode_text(std::string_view bytes);
// A code point as UTF-8.
std::string utf8_of(char32_t c);
// How a character is shown in messages: 'x' (printable ASCII), '\n', 'é' (U+00E9), U+0007.
std::string describe_char(char32_t c);

// The character -> token id mapping of one text.
class CharVocab {
 public:
  CharVocab() = default;
  // The vocabulary of `text` (decoded by decode_text): its distinct characters, sorted by code
  // point. Throws DataError for empty text.
  static CharVocab from_text(std::string_view text);
  static CharVocab from_chars(std::u32string_view chars);
  // The inverse of to_string(): `chars` must be non-empty valid UTF-8 whose characters are
  // strictly increasing, so a corrupt checkpoint is caught rather than silently remapped.
  // Throws DataError.
  static CharVocab from_string(std::string_view chars);

  // The vocabulary as UTF-8, its characters in id order; what a checkpoint stores. Always
  // valid UTF-8.
  std::string to_string() const;
  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  bool contains(char32_t c) const { return lookup(c) >= 0; }
  int64_t id_of(char32_t c) const;     // throws kiln::ValueError when c is not in the vocabulary
  char32_t char_of(int64_t id) const;  // throws kiln::IndexError when id is outside [0, size)

  // Text -> ids. Throws kiln::ValueError naming the first character that is not in the
  // vocabulary and its position in characters (e.g. a `kiln sample --prompt` character the
  // model never saw).
  std::vector<int64_t> encode(std::string_view text) const;
  std::vector<int64_t> encode(std::u32string_view chars) const;
  // The same as a 1-d int64 tensor.
  Tensor encode_tensor(std::string_view text) const;
  // Ids -> UTF-8 text. Throws kiln::IndexError for an id outside [0, size).
  std::string decode(std::span<const int64_t> ids) const;
  // A tensor of integer ids of any shape, read in row-major order.
  std::string decode(const Tensor& ids) const;

  bool operator==(const CharVocab& other) const { return chars_ == other.chars_; }

 private:
  explicit CharVocab(std::u32string chars);
  int64_t lookup(char32_t c) const;  // -1 when absent
  std::u32string chars_;              // sorted
  std::array<int32_t, 128> ascii_id_{};  // -1 for ASCII characters not in the vocabulary
};

// What generation starts from when no prompt is given: "\n" when the vocabulary has it, else
// its first character.
std::string default_prompt(const CharVocab& vocab);

// The corpus shipped with Kiln (see data/README.md), relative to the repository root.
inline constexpr const char* kDefaultCorpus = "data/pride_and_prejudice.txt";
// kDefaultCorpus when it exists relative to the working directory, else the copy in the source
// tree this program was built from (so `kiln train` also works when run from a build folder),
// else kDefaultCorpus (whose absence the caller then reports).
std::string default_corpus_path();

enum class Split { kTrain, kVal };
const char* split_name(Split split);

// One batch of next-token prediction: y[b, t] is the token that follows x[b, t] in the text.
struct Batch {
  Tensor x;  // [B, T] int64 token ids
  Tensor y;  // [B, T] int64, x shifted left by one
};

// A whole text as token ids, split contiguously: the first `train_fraction` of the tokens are
// the training split, the rest the validation split.
class TextDataset {
 public:
  static constexpr double kDefaultTrainFraction = 0.9;

  // Reads `path` (CRLF line endings read as LF, so a copy of the file edited on Windows trains
  // the same model) and checks that each split has at least block_size + 1 tokens, the least
  // that makes one (x, y) window. Throws DataError naming the file and the problem.
  static TextDataset from_file(const std::string& path, int64_t block_size,
                               double train_fraction = kDefaultTrainFraction);
  // The same for text already in memory; `name` stands for the file in messages.
  static TextDataset from_text(std::string text, int64_t block_size,
                               double train_fraction = kDefaultTrainFraction,
                               std::string name = "<text>");

  const CharVocab& vocab() const { return vocab_; }
  const std::string& name() const { return name_; }
  // All tokens, 1-d int64.
  const Tensor& tokens() const { return tokens_; }
  // One split's tokens: a view of tokens().
  Tensor split_tokens(Split split) const;
  int64_t size(Split split) const;

  // `batch_size` windows of `block_size` + 1 consecutive tokens of `split`, each starting at an
  // offset drawn uniformly from `gen` (so a seed fixes the batches). Throws kiln::ValueError
  // for non-positive sizes and DataError when the split is shorter than block_size + 1.
  Batch get_batch(Split split, int64_t batch_size, int64_t block_size, Generator& gen) const;

  // Bytes of the file that were not valid UTF-8 and were read as Latin-1 characters.
  int64_t invalid_utf8_bytes() const { return invalid_bytes_; }
  int64_t first_invalid_utf8_offset() const { return first_invalid_; }

  // Entropy in nats of the split's character frequencies, -sum p ln p: the cross-entropy a model that
  // ignores context reaches on that split, so the baseline a language model's loss must beat.
  double unigram_entropy(Split split) const;

 private:
  TextDataset() = default;
  void check_block_size(int64_t block_size) const;

  std::string name_;
  CharVocab vocab_;
  Tensor tokens_;
  int64_t train_size_ = 0;
  int64_t invalid_bytes_ = 0;
  int64_t first_invalid_ = -1;
};

}  // namespace kiln::cli
