// Mutation fuzzing of the readers of untrusted files: load_safetensors (bytes and file) and
// ir::parse_graph. Valid seeds (written by Kiln itself) are mutated by byte- and token-level
// edits; every input must parse or throw kiln::Error: any other exception is a finding, and a
// crash or out-of-bounds read stops the process (the ASan build catches those that would go
// unnoticed). Used by reader_fuzz_test.cpp (a short fixed-seed run) and reader_fuzz_main.cpp
// (long runs; docs/testing.md).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::reader_fuzz {

struct Stats {
  int64_t inputs = 0, accepted = 0, rejected = 0;
  std::vector<std::string> findings;  // non-kiln::Error exceptions, with the input's kind
};

// Valid safetensors files: every dtype, 0-d and empty tensors, metadata.
inline std::vector<std::string> safetensors_seeds() {
  std::vector<std::string> seeds;
  seeds.push_back(safetensors_to_bytes(
      {{"w", arange(6, DType::Float32).reshape({2, 3})}, {"b", tensor({1, 2, 3}, DType::Int64)}},
      {{"format", "pt"}}));
  seeds.push_back(safetensors_to_bytes({{"flag", tensor({1, 0}, DType::Bool)},
                                        {"i32", tensor({7}, DType::Int32)},
                                        {"f64", scalar_tensor(2.5, DType::Float64)},
                                        {"empty", zeros({0, 4})}}));
  seeds.push_back(safetensors_to_bytes({}));
  return seeds;
}

// Graph texts as Graph::serialize writes them, captured from a few functions: strided inputs,
// constants, reductions with attributes, a random op (runtime attributes), multiple outputs,
// outputs that require grad.
inline std::vector<std::string> graph_seeds() {
  auto texts = std::make_shared<std::vector<std::string>>();
  const Backend keep_text([texts](const ir::Graph& g, std::span<const TensorMeta> in) {
    texts->push_back(g.serialize());
    return lookup_backend("eager")(g, in);
  });
  CompileOptions o;
  o.backend = keep_text;
  compile([](Tensor x) { return (x.sum({1}, true) * 2 + x.transpose(0, 1).matmul(x)).tanh(); },
          o)(ones({3, 3}));
  compile(
      [](Tensor x) {
        return std::vector<Tensor>{softmax(x, -1), max(x, 0).second, x > 0.5};
      },
      o)(ones({2, 5}));
  compile([](Tensor x) { return dropout(x, 0.25) + cat({x, x}, 0).sum(); }, o)(ones({4}));
  compile([](Tensor x) { return cumsum(where(x > 0, x, zeros_like(x)).reshape({-1}), 0); },
          o)(ones({2, 3}));
  // AOT autograd's forward and backward halves for an input that requires grad: calls record which
  // of their outputs do (`grad <bits>`; of max's values and indices, only the values).
  CompileOptions aot;
  aot.backend = aot_autograd(keep_text);
  compile(
      [](Tensor x) {
        return std::vector<Tensor>{(x * x).sum(), max(x, 1).first};
      },
      aot)(ones({2, 3}).requires_grad_());
  return *texts;
}

// One random edit of `s`; `text` adds token-level edits (numbers, separators, whole lines).
inline void mutate_once(std::string& s, std::mt19937_64& rng, bool text) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  static const char* kTokens[] = {"0",
                                  "-1",
                                  "1",
                                  "2",
                                  "-9223372036854775808",
                                  "9223372036854775807",
                                  "18446744073709551616",
                                  "4294967296",
                                  "99999999999999999999",
                                  "1e308",
                                  "nan",
                                  "inf",
                                  ":",
                                  ",",
                                  " ",
                                  "\n",
                                  "v",
                                  "b1",
                                  "sI",
                                  "I",
                                  "F",
                                  "n",
                                  "\"",
                                  "{",
                                  "}",
                                  "[",
                                  "]",
                                  "\\u0000",
                                  "\\",
                                  "\xff",
                                  "call",
                                  "input",
                                  "output",
                                  "constant",
                                  " grad "};
  const int kinds = text ? 9 : 7;
  switch (rng() % kinds) {
    case 0:  // flip a bit
      if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 1:  // set a byte
      if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
      break;
    case 2:  // delete a run
      if (!s.empty()) {
        const size_t at = pick(s.size());
        s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
      }
      break;
    case 3:  // duplicate a run
      if (!s.empty()) {
        const size_t at = pick(s.size());
        s.insert(pick(s.size() + 1), s.substr(at, 1 + pick(32)));
      }
      break;
    case 4:  // truncate
      s.resize(pick(s.size() + 1));
      break;
    case 5:  // an interesting token anywhere
      s.insert(pick(s.size() + 1), kTokens[pick(std::size(kTokens))]);
      break;
    case 6:  // overwrite 1, 2, 4 or 8 bytes with an extreme integer (binary length fields)
      if (s.size() >= 8) {
        const uint64_t values[] = {0,
                                   ~0ull,
                                   1ull << 63,
                                   0x7fffffffull,
                                   0xffffffffull,
                                   static_cast<uint64_t>(s.size()),
                                   static_cast<uint64_t>(s.size()) + 1};
        const uint64_t v = values[pick(std::size(values))];
        const size_t width = size_t{1} << pick(4);
        const size_t at = pick(s.size() - width + 1);
        for (size_t k = 0; k < width; ++k) s[at + k] = static_cast<char>(v >> (8 * k));
      }
      break;
    case 7: {  // replace a number (a run of digits) by an interesting token
      std::vector<size_t> starts;
      for (size_t k = 0; k < s.size(); ++k)
        if (isdigit(static_cast<unsigned char>(s[k])) &&
            (k == 0 || !isdigit(static_cast<unsigned char>(s[k - 1]))))
          starts.push_back(k);
      if (starts.empty()) break;
      const size_t at = starts[pick(starts.size())];
      size_t end = at;
      while (end < s.size() && isdigit(static_cast<unsigned char>(s[end]))) ++end;
      s.replace(at, end - at, kTokens[pick(9)]);
      break;
    }
    default: {  // swap, drop or duplicate a whole line
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t k = 0; k <= s.size(); ++k)
        if (k == s.size() || s[k] == '\n')
          lines.push_back(s.substr(start, k - start)), start = k + 1;
      if (lines.size() < 2) break;
      const size_t a = pick(lines.size()), b = pick(lines.size());
      switch (rng() % 3) {
        case 0:
          std::swap(lines[a], lines[b]);
          break;
        case 1:
          lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(a));
          break;
        default:
          lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(a), lines[b]);
      }
      s.clear();
      for (size_t k = 0; k < lines.size(); ++k) s += (k ? "\n" : "") + lines[k];
    }
  }
}

// Runs `reader` on `input`, tallying: kiln::Error is a rejection, anything else a finding.
inline void feed(Stats& st, const char* what, const std::string& input,
                 const std::function<void(const std::string&)>& reader) {
  ++st.inputs;
  try {
    reader(input);
    ++st.accepted;
  } catch (const Error&) {
    ++st.rejected;
  } catch (const std::exception& e) {
    st.findings.push_back(std::string(what) + ": " + typeid(e).name() + ": " + e.what());
  }
}

// `iterations` mutated inputs for each reader (safetensors bytes, safetensors file every 64th,
// graph text), from `seed`. A parsed graph is also serialized again and reparsed, which must
// succeed.
// `progress` (may be empty) is called every 2^16 iterations with the tally so far.
inline Stats run(uint64_t seed, int64_t iterations,
                 const std::function<void(int64_t, const Stats&)>& progress = {}) {
  Stats st;
  std::mt19937_64 rng(seed);
  const std::vector<std::string> st_seeds = safetensors_seeds();
  const std::vector<std::string> graph_texts = graph_seeds();
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("kiln_reader_fuzz_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  for (int64_t i = 0; i < iterations; ++i) {
    if (progress && i > 0 && i % 65536 == 0) progress(i, st);
    std::string bytes = st_seeds[rng() % st_seeds.size()];
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) mutate_once(bytes, rng, rng() % 2);
    feed(st, "safetensors_from_bytes", bytes, [](const std::string& b) {
      SafetensorsContents c = safetensors_from_bytes(b, "fuzz");
      for (auto& [name, t] : c.tensors) (void)t.to(DType::Float64).sum();  // touch the data
    });
    if (i % 64 == 0) {
      std::ofstream(file, std::ios::binary) << bytes;
      feed(st, "load_safetensors", file, [](const std::string& f) { (void)load_safetensors(f); });
    }
    std::string text = graph_texts[rng() % graph_texts.size()];
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k)
      mutate_once(text, rng, rng() % 4 != 0);
    feed(st, "parse_graph", text, [](const std::string& t) {
      const ir::Graph g = ir::parse_graph(t);
      (void)g.to_string();
      (void)g.hash();
      (void)g.runtime_attr_values();
      const ir::Graph again = ir::parse_graph(g.serialize());
      if (!ir::structurally_equal(g, again))
        throw std::logic_error("parse_graph(serialize(g)) differs from g");
    });
  }
  std::filesystem::remove(file);
  return st;
}

}  // namespace kiln::reader_fuzz
