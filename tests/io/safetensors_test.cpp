// safetensors reading and writing: round trips, byte-exact files written from the spec and by the
// reference implementation, every kind of corrupt file (a CheckpointError naming the problem,
// never a crash), and the atomic-write guarantee.
#include "kiln/io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// ---- helpers ----

// `n` as the 8-byte little-endian length field.
std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// A file made of a header (not padded: readers accept any length) and a data buffer.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  return out;
}

// The raw bytes of a tensor's row-major contents.
std::string raw_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  if (c.numel() == 0) return {};
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

// Same dtype, shape and bytes (so NaN payloads and -0.0 count).
void expect_identical(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_TRUE(got.defined()) << name;
  EXPECT_EQ(got.dtype(), want.dtype()) << name;
  EXPECT_EQ(got.shape_str(), want.shape_str()) << name;
  EXPECT_TRUE(got.is_contiguous()) << name;
  EXPECT_EQ(raw_bytes(got), raw_bytes(want)) << name;
}

void expect_same_contents(const SafetensorsContents& got, const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata) {
  ASSERT_EQ(got.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].first, tensors[i].first);
    expect_identical(got.tensors[i].second, tensors[i].second, tensors[i].first);
  }
  EXPECT_EQ(got.metadata, metadata);
}

// Parsing `bytes` must throw a CheckpointError whose message contains `needle`.
void expect_corrupt(const std::string& bytes, const std::string& needle) {
  try {
    safetensors_from_bytes(bytes, "bad.safetensors");
    ADD_FAILURE() << "no error for a file that should give '" << needle << "'";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
  }
}

// A tensor entry of the header.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  int64_t begin, int64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A header object made of entries.
std::string object_of(const std::vector<std::string>& entries) {
  std::string s = "{";
  for (size_t i = 0; i < entries.size(); ++i) s += (i ? "," : "") + entries[i];
  return s + "}";
}

// One tensor of each dtype, with values that show any byte-level mistake.
NamedTensors every_dtype() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {
      {"bool", tensor({1, 0, 0, 1, 1, 0}).to(DType::Bool).view({2, 3})},
      {"i32", tensor({0, -1, 2147483647, -2147483647 - 1}).to(DType::Int32)},
      {"i64", tensor(std::vector<int64_t>{int64_t{1} << 40, -(int64_t{1} << 62), 0})},
      {"f32", tensor({1.5, -0.0, inf, -inf, nan, 1e-40}, DType::Float32).view({3, 2})},
      {"f64", tensor({3.141592653589793, -0.0, nan, 1e-310}, DType::Float64)},
  };
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "kiln_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::string read_file(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    return os.str();
  }
  static void write_file(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary);
    out << bytes;
  }

  fs::path dir_;
};

// ---- round trips ----

TEST(SafetensorsRoundTrip, EveryDType) {
  const NamedTensors tensors = every_dtype();
  expect_same_contents(safetensors_from_bytes(safetensors_to_bytes(tensors)), tensors, {});
}

TEST(SafetensorsRoundTrip, ZeroDimAndEmptyTensors) {
  const NamedTensors tensors = {
      {"scalar", tensor({2.5}, DType::Float64).view({})},
      {"empty", zeros({0, 3})},
      {"first", tensor({1, 2}, DType::Int64)},
      {"empty2", zeros({3, 0, 2}, DType::Int32)},
      {"empty3", zeros({0}, DType::Bool)},
      {"scalar_bool", ones({}, DType::Bool)},
  };
  const std::string bytes = safetensors_to_bytes(tensors);
  const SafetensorsContents got = safetensors_from_bytes(bytes);
  expect_same_contents(got, tensors, {});
  EXPECT_EQ(got.tensors[0].second.dim(), 0);
  EXPECT_NE(bytes.find(R"("scalar":{"dtype":"F64","shape":[],"data_offsets":[0,8]})"),
            std::string::npos);
  // Empty tensors take no bytes: begin == end.
  EXPECT_NE(bytes.find(R"("empty":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]})"),
            std::string::npos);
}

TEST(SafetensorsRoundTrip, NonContiguousTensorsAreWrittenRowMajor) {
  Tensor base = arange(0, 24, 1, DType::Float32).view({2, 3, 4});
  const NamedTensors tensors = {
      {"transposed", base.transpose(0, 2)},
      {"strided", base.slice(2, 0, 4, 2)},
      {"expanded", tensor({1, 2, 3}, DType::Int64).expand({4, 3})},
      {"offset", base.select(0, 1)},
  };
  for (const auto& [name, t] : tensors) ASSERT_FALSE(t.is_contiguous() && t.storage_offset() == 0);
  const SafetensorsContents got = safetensors_from_bytes(safetensors_to_bytes(tensors));
  ASSERT_EQ(got.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    expect_identical(got.tensors[i].second, tensors[i].second.contiguous(), tensors[i].first);
    EXPECT_EQ(got.tensors[i].second.to_vector<double>(), tensors[i].second.to_vector<double>());
  }
}

TEST(SafetensorsRoundTrip, ManyTensorsKeepTheirOrder) {
  manual_seed(7);
  NamedTensors tensors;
  const DType dtypes[] = {DType::Float32, DType::Int64, DType::Bool, DType::Float64, DType::Int32};
  for (int i = 0; i < 300; ++i) {
    const DType dt = dtypes[i % 5];
    Tensor t = randn({i % 4 + 1, i % 3}, DType::Float64).mul_(10);
    tensors.emplace_back("layer." + std::to_string(299 - i) + ".weight", t.to(dt));
  }
  expect_same_contents(safetensors_from_bytes(safetensors_to_bytes(tensors)), tensors, {});
}

TEST(SafetensorsRoundTrip, NamesAndMetadataWithSpecialCharacters) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"quote\" backslash\\ slash/", "new\nline\ttab\rcr\bbs\fff"},
      {std::string("nul\0byte", 8), std::string("ctl\x01\x1f\x7f", 6)},
      {"unicode é ☃ 😀", "数据"},
      {"", ""},
  };
  const NamedTensors tensors = {{"a\"b\\c\n", ones({1})}, {"é/😀", zeros({2}, DType::Int32)}};
  const std::string bytes = safetensors_to_bytes(tensors, metadata);
  expect_same_contents(safetensors_from_bytes(bytes), tensors, metadata);
  // Escaped as JSON requires, non-ASCII kept as UTF-8.
  EXPECT_NE(bytes.find(R"("a\"b\\c\n":)"), std::string::npos);
  EXPECT_NE(bytes.find(R"("nul\u0000byte":"ctl\u0001\u001f)"), std::string::npos);
  EXPECT_NE(bytes.find("\"unicode é ☃ 😀\""), std::string::npos);
}

TEST_F(TempDir, FileRoundTripAndOverwrite) {
  const NamedTensors tensors = every_dtype();
  const std::map<std::string, std::string> metadata = {{"step", "100"}};
  save_safetensors(path("model.safetensors"), tensors, metadata);
  expect_same_contents(load_safetensors(path("model.safetensors")), tensors, metadata);
  EXPECT_EQ(read_file(path("model.safetensors")), safetensors_to_bytes(tensors, metadata));
  // Overwriting replaces the file and leaves nothing else behind.
  const NamedTensors other = {{"x", zeros({}, DType::Int64)}};
  save_safetensors(path("model.safetensors"), other);
  expect_same_contents(load_safetensors(path("model.safetensors")), other, {});
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsRoundTrip, LoadedTensorsOwnTheirStorage) {
  const std::string bytes = safetensors_to_bytes({{"a", ones({4})}});
  SafetensorsContents got = safetensors_from_bytes(bytes);
  got.tensors[0].second.add_(1.0);
  EXPECT_EQ(safetensors_from_bytes(bytes).tensors[0].second.to_vector<float>(),
            std::vector<float>(4, 1.0f));
}

// ---- the exact bytes ----

TEST(SafetensorsFormat, ByteExactFileFromTheSpec) {
  // Header: compact JSON, 107 bytes, padded with 5 spaces to 112 (a multiple of 8) so that the
  // data starts at 8 + 112 = 120, 8-byte aligned. Offsets are relative to the data buffer.
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  ASSERT_EQ(json.size(), 107u);
  std::string expected = std::string("\x70\0\0\0\0\0\0\0", 8) + json + "     ";
  expected += std::string("\x00\x00\x80\x3f", 4);    // 1.0f, little-endian
  expected += std::string("\x00\x00\x00\xc0", 4);    // -2.0f
  expected += std::string("\x05\0\0\0\0\0\0\0", 8);  // int64 5
  ASSERT_EQ(expected.size(), 136u);

  const NamedTensors tensors = {{"a", tensor({1.0, -2.0}, DType::Float32)},
                                {"b", full({}, 5, DType::Int64)}};
  EXPECT_EQ(safetensors_to_bytes(tensors), expected);
  expect_same_contents(safetensors_from_bytes(expected), tensors, {});
}

TEST(SafetensorsFormat, ByteExactFileWithMetadata) {
  // "__metadata__" comes first; 86 bytes of JSON padded with 2 spaces to 88.
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  ASSERT_EQ(json.size(), 86u);
  const std::string expected =
      std::string("\x58\0\0\0\0\0\0\0", 8) + json + "  " + std::string("\x01\x00\x01", 3);
  const NamedTensors tensors = {{"x", tensor({1, 0, 1}).to(DType::Bool)}};
  EXPECT_EQ(safetensors_to_bytes(tensors, {{"format", "pt"}}), expected);
  expect_same_contents(safetensors_from_bytes(expected), tensors, {{"format", "pt"}});
}

// Written by the reference implementation (Python `safetensors` 0.8.0, `safetensors.numpy.save`)
// from: idx=int64 [3, -1], e=float64 zeros (0, 3), w=float32 [[1.5, -2]], n=int32 [7],
// flag=bool True (0-d), 's"\\\né'=bool [False, True]; metadata {'k"\t\x01': 'é☃😀'}.
const char kReferenceFileHex[] =
    "88010000000000007b225f5f6d657461646174615f5f223a7b226b5c225c745c7530303031223a22c3a9e29883f09f"
    "98"
    "80227d2c22696478223a7b226474797065223a22493634222c227368617065223a5b325d2c22646174615f6f666673"
    "65"
    "7473223a5b302c31365d7d2c2265223a7b226474797065223a22463634222c227368617065223a5b302c335d2c2264"
    "61"
    "74615f6f666673657473223a5b31362c31365d7d2c2277223a7b226474797065223a22463332222c22736861706522"
    "3a"
    "5b312c325d2c22646174615f6f666673657473223a5b31362c32345d7d2c226e223a7b226474797065223a22493332"
    "22"
    "2c227368617065223a5b315d2c22646174615f6f666673657473223a5b32342c32385d7d2c22666c6167223a7b2264"
    "74"
    "797065223a22424f4f4c222c227368617065223a5b5d2c22646174615f6f666673657473223a5b32382c32395d7d2c"
    "22"
    "735c225c5c5c6ec3a9223a7b226474797065223a22424f4f4c222c227368617065223a5b325d2c22646174615f6f66"
    "66"
    "73657473223a5b32392c33315d7d7d200300000000000000ffffffffffffffff0000c03f000000c00700000001000"
    "1";

TEST(SafetensorsFormat, MatchesTheReferenceImplementation) {
  const std::string reference = from_hex(kReferenceFileHex);
  const NamedTensors tensors = {
      {"idx", tensor({3, -1}, DType::Int64)},
      {"e", zeros({0, 3}, DType::Float64)},
      {"w", tensor({1.5, -2.0}, DType::Float32).view({1, 2})},
      {"n", tensor({7}, DType::Int32)},
      {"flag", ones({}, DType::Bool)},
      {"s\"\\\n\xc3\xa9", tensor({0, 1}).to(DType::Bool)},
  };
  const std::map<std::string, std::string> metadata = {{"k\"\t\x01", "é☃😀"}};
  expect_same_contents(safetensors_from_bytes(reference), tensors, metadata);
  // Given the same order, Kiln writes the very same bytes.
  EXPECT_EQ(safetensors_to_bytes(tensors, metadata), reference);
}

TEST(SafetensorsFormat, ReadsEscapesWhitespaceAndAnyOrder) {
  // JSON escapes (\u with a surrogate pair, \/), whitespace, fields in another order, tensors
  // listed out of buffer order: all valid.
  const std::string header =
      "{ \"b\\u00e9\\ud83d\\ude00\\/\" : {\"shape\": [ 1 ], \"data_offsets\": [4, 8],"
      " \"dtype\": \"I32\"},\n\t\"a\":{\"data_offsets\":[0,4],\"dtype\":\"F32\",\"shape\":[]},"
      "\"__metadata__\":{\"k\":\"\\\"\\\\\\b\\f\\n\\r\\t\\u0041\"}}\r\n  ";
  const std::string data = std::string("\x00\x00\x80\x3f", 4) + std::string("\x09\0\0\0", 4);
  const SafetensorsContents got = safetensors_from_bytes(file_bytes(header, data));
  ASSERT_EQ(got.tensors.size(), 2u);
  EXPECT_EQ(got.tensors[0].first, "b\xc3\xa9\xf0\x9f\x98\x80/");
  EXPECT_EQ(got.tensors[0].second.to_vector<int32_t>(), std::vector<int32_t>{9});
  EXPECT_EQ(got.tensors[1].first, "a");
  EXPECT_EQ(got.tensors[1].second.item<float>(), 1.0f);
  EXPECT_EQ(got.metadata.at("k"), "\"\\\b\f\n\r\tA");
  // An empty file: no tensors, no data.
  EXPECT_TRUE(safetensors_from_bytes(file_bytes("{}")).tensors.empty());
}

// ---- corrupt files ----

TEST(SafetensorsCorrupt, LengthField) {
  for (size_t n = 0; n < 8; ++n) expect_corrupt(std::string(n, '\0'), "too short");
  expect_corrupt(le64(100'000'001) + "{}", "exceeds the limit");
  expect_corrupt(le64(~uint64_t{0}) + "{}", "exceeds the limit");
  expect_corrupt(le64(50) + "{}", "runs past the end of the file");
}

TEST(SafetensorsCorrupt, InvalidJson) {
  const std::string ok = entry("a", "F32", "[]", 0, 4);
  const std::string data(4, '\0');
  for (const std::string& header : std::vector<std::string>{
           "{\"a\":",
           "{\"a\" 1}",
           "{,}",
           "{" + ok + ",}",
           "{" + ok + "",
           "{\"a\":{\"dtype\"}}",
           "{\"a\x01\":1}",
           "{\"\\x\":1}",
           "{\"\\ud800\":1}",
           "{\"\\udc00\":1}",
           "{\"\\ud800\\u0041\":1}",
           "{\"\\u12\"}",
           "{\"abc",
           "{'a':1}",
           "{a:1}",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[-],\"data_offsets\":[0,4]}}",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1 2],\"data_offsets\":[0,4]}}",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]]}",
       })
    expect_corrupt(file_bytes(header, data), "invalid JSON");
  expect_corrupt(file_bytes("{" + ok + "} x", data), "unexpected content after the header");
  expect_corrupt(file_bytes("{" + ok + "}{}", data), "unexpected content after the header");
}

TEST(SafetensorsCorrupt, HeaderNotAnObject) {
  expect_corrupt(file_bytes("[1, 2]"), "must be a JSON object, got an array");
  expect_corrupt(file_bytes("\"x\""), "must be a JSON object, got a string");
  expect_corrupt(file_bytes("17"), "must be a JSON object, got a number");
  expect_corrupt(file_bytes("null"), "must be a JSON object, got null");
  expect_corrupt(file_bytes(""), "header is empty");
  expect_corrupt(file_bytes("    "), "header is empty");
  expect_corrupt(file_bytes(" {}"), "must begin with '{'");
}

TEST(SafetensorsCorrupt, InvalidUtf8) {
  for (const std::string bad :
       {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x98", "\x80"})
    expect_corrupt(file_bytes("{\"" + bad + "\":{}}"), "not valid UTF-8");
}

TEST(SafetensorsCorrupt, MissingAndIllTypedFields) {
  const std::string d(16, '\0');
  expect_corrupt(file_bytes(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", d),
                 "tensor 'a' is missing field \"dtype\"");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","data_offsets":[0,16]}})", d),
                 "tensor 'a' is missing field \"shape\"");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[4]}})", d),
                 "tensor 'a' is missing field \"data_offsets\"");
  expect_corrupt(file_bytes(R"({"a":[1]})", d), "tensor 'a' must be an object");
  expect_corrupt(file_bytes(R"({"a":"F32"})", d), "tensor 'a' must be an object");
  expect_corrupt(file_bytes(R"({"a":{"dtype":32,"shape":[4],"data_offsets":[0,16]}})", d),
                 "tensor 'a': \"dtype\" must be a string, got a number");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})", d),
                 "tensor 'a': \"shape\" must be an array of integers, got a string");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[true],"data_offsets":[0,16]}})", d),
                 "must be a non-negative integer, got a boolean");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[[4]],"data_offsets":[0,16]}})", d),
                 "must be a non-negative integer, got an array");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}})", d),
                 "\"shape\" entry must be an integer, got 4.0");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,1.6e1]}})", d),
                 "\"data_offsets\" entry must be an integer, got 1.6e1");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":{"0":16}}})", d),
                 "\"data_offsets\" must be an array of integers, got an object");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16]}})", d),
                 "must hold exactly 2 integers [begin, end], got 1");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16,16]}})", d),
                 "must hold exactly 2 integers [begin, end], got 3");
  expect_corrupt(
      file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})", d),
      "tensor 'a' has unknown field 'extra'");
  expect_corrupt(
      file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":null})", d),
      "tensor 'b' must be an object");
}

TEST(SafetensorsCorrupt, DTypes) {
  expect_corrupt(file_bytes(object_of({entry("w", "F17", "[4]", 0, 16)}), std::string(16, '\0')),
                 "tensor 'w' has unknown dtype 'F17'");
  expect_corrupt(file_bytes(object_of({entry("w", "f32", "[4]", 0, 16)}), std::string(16, '\0')),
                 "tensor 'w' has unknown dtype 'f32'");
  // Real dtypes of the format that Kiln has no dtype for: a clear error, never a conversion.
  for (const auto& [code, size] :
       {std::pair{"F16", 2}, std::pair{"BF16", 2}, std::pair{"U8", 1}, std::pair{"I8", 1},
        std::pair{"U64", 8}, std::pair{"F8_E4M3", 1}}) {
    expect_corrupt(
        file_bytes(object_of({entry("w", code, "[4]", 0, 4 * size)}), std::string(4 * size, '\0')),
        "tensor 'w' has dtype " + std::string(code) + ", which Kiln does not support");
  }
  expect_corrupt(
      file_bytes(object_of({entry("flag", "BOOL", "[3]", 0, 3)}), std::string("\x01\x02\x00", 3)),
      "tensor 'flag': BOOL element 1 is byte 2, not 0 or 1");
}

TEST(SafetensorsCorrupt, Shapes) {
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[2,-1]", 0, 0)})),
                 "tensor 'w': \"shape\" entry must not be negative, got -1");
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[-0]", 0, 0)})),
                 "must not be negative, got -0");
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[4294967296,4294967296]", 0, 0)})),
                 "tensor 'w' has shape [4294967296, 4294967296], which overflows int64");
  // Zero elements, but strides would overflow.
  expect_corrupt(file_bytes(object_of(
                     {entry("w", "F32", "[0,4611686018427387904,4611686018427387904]", 0, 0)})),
                 "which overflows int64");
  expect_corrupt(file_bytes(object_of({entry("w", "F64", "[4611686018427387904]", 0, 0)})),
                 "whose byte size overflows int64");
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[99999999999999999999]", 0, 0)})),
                 "\"shape\" entry is too large: 99999999999999999999");
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[9223372036854775808]", 0, 0)})),
                 "is too large");
  expect_corrupt(file_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})"),
                 "\"data_offsets\" entry must not be negative, got -4");
}

TEST(SafetensorsCorrupt, Offsets) {
  const std::string d16(16, '\0');
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[2,2]", 0, 12)}), std::string(12, '\0')),
                 "tensor 'w': data_offsets [0, 12] span 12 bytes but shape [2, 2] of F32 needs 16");
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[]", 8, 4)}), d16),
                 "tensor 'w': data_offsets [8, 4] end before they begin");
  expect_corrupt(file_bytes(object_of({entry("w", "F32", "[4]", 0, 16)}), std::string(12, '\0')),
                 "tensor 'w': data_offsets [0, 16] run past the end of the data buffer (12 bytes)");
  expect_corrupt(
      file_bytes(object_of({entry("w", "F32", "[]", 9223372036854775800, 9223372036854775804)}),
                 d16),
      "run past the end of the data buffer");
  expect_corrupt(
      file_bytes(object_of({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 4, 12)}),
                 std::string(12, '\0')),
      "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  expect_corrupt(
      file_bytes(object_of({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[2]", 0, 8)}), d16),
      "overlap tensor 'a'");
  // A zero-size tensor inside another one's bytes overlaps it too.
  expect_corrupt(
      file_bytes(object_of({entry("a", "F32", "[2]", 0, 8), entry("z", "F32", "[0]", 4, 4)}),
                 std::string(8, '\0')),
      "tensor 'z': data_offsets [4, 4] overlap tensor 'a' [0, 8]");
  expect_corrupt(
      file_bytes(object_of({entry("a", "F32", "[2]", 0, 8), entry("b", "F32", "[]", 12, 16)}), d16),
      "bytes [8, 12) of the data buffer belong to no tensor (a hole before tensor 'b')");
  expect_corrupt(file_bytes(object_of({entry("b", "F32", "[]", 4, 8)}), std::string(8, '\0')),
                 "bytes [0, 4) of the data buffer belong to no tensor");
  expect_corrupt(file_bytes(object_of({entry("a", "F32", "[2]", 0, 8)}), std::string(9, '\0')),
                 "the data buffer has 9 bytes but the tensors cover only 8 (trailing bytes");
  expect_corrupt(file_bytes("{}", "x"), "has 1 bytes but the tensors cover only 0");
}

TEST(SafetensorsCorrupt, DuplicateKeys) {
  const std::string a = entry("a", "F32", "[]", 0, 4);
  expect_corrupt(file_bytes("{" + a + "," + a + "}", std::string(4, '\0')),
                 "duplicate key 'a' in the header");
  // Duplicates are found after unescaping.
  expect_corrupt(
      file_bytes("{" + a + "," + entry("\\u0061", "F32", "[]", 0, 4) + "}", std::string(4, '\0')),
      "duplicate key 'a' in the header");
  expect_corrupt(file_bytes(R"({"a":{"dtype":"F32","shape":[],"shape":[],"data_offsets":[0,4]}})",
                            std::string(4, '\0')),
                 "duplicate key 'shape' in tensor 'a'");
  expect_corrupt(file_bytes(R"({"__metadata__":{"k":"1","k":"2"}})"),
                 "duplicate key 'k' in \"__metadata__\"");
  expect_corrupt(file_bytes(R"({"__metadata__":{},"__metadata__":{}})"),
                 "duplicate key '__metadata__' in the header");
}

TEST(SafetensorsCorrupt, Metadata) {
  expect_corrupt(file_bytes(R"({"__metadata__":{"step":100}})"),
                 "\"__metadata__\" value of key 'step' must be a string, got a number");
  expect_corrupt(file_bytes(R"({"__metadata__":{"a":{"b":"c"}}})"),
                 "value of key 'a' must be a string, got an object");
  expect_corrupt(file_bytes(R"({"__metadata__":{"a":null}})"), "must be a string, got null");
  expect_corrupt(file_bytes(R"({"__metadata__":["a"]})"),
                 "\"__metadata__\" must be an object of strings, got an array");
  expect_corrupt(file_bytes(R"({"__metadata__":"a"})"), "must be an object of strings");
}

// Every proper prefix of a valid file is invalid and must be reported, never crash or return.
TEST(SafetensorsCorrupt, TruncationAtEveryByte) {
  NamedTensors tensors = every_dtype();
  tensors.emplace_back("empty_last", zeros({0}));
  const std::string bytes = safetensors_to_bytes(tensors, {{"key", "välue"}});
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      safetensors_from_bytes(std::string_view(bytes).substr(0, n), "prefix");
      ADD_FAILURE() << "a " << n << "-byte prefix of a " << bytes.size() << "-byte file loaded";
    } catch (const CheckpointError&) {
    }
  }
  EXPECT_NO_THROW(safetensors_from_bytes(bytes));
}

// Any single corrupted byte either still gives a valid file or a CheckpointError: nothing else.
TEST(SafetensorsCorrupt, EverySingleByteCorruption) {
  const std::string bytes =
      safetensors_to_bytes({{"a", ones({2, 2})}, {"b", zeros({3}, DType::Bool)}}, {{"k", "v"}});
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int v :
         {0x00, 0x01, 0x02, 0x20, 0x22, 0x2c, 0x30, 0x39, 0x5b, 0x5c, 0x7b, 0x7d, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(v);
      try {
        safetensors_from_bytes(bad);
      } catch (const CheckpointError&) {
      }
    }
  }
}

// ---- files and atomic writes ----

TEST_F(TempDir, LoadErrorsNameTheFile) {
  const std::string p = path("broken.safetensors");
  write_file(p, file_bytes(object_of({entry("w", "F32", "[4]", 0, 16)}), std::string(8, '\0')));
  try {
    load_safetensors(p);
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor 'w'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      {
        try {
          load_safetensors(path("missing.safetensors"));
        } catch (const CheckpointError& e) {
          EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
          throw;
        }
      },
      CheckpointError);
  EXPECT_THROW(load_safetensors(dir_.string()), CheckpointError);  // a directory
}

TEST_F(TempDir, TruncatedFilesOnDisk) {
  const std::string bytes = safetensors_to_bytes(every_dtype(), {{"k", "v"}});
  const std::string p = path("t.safetensors");
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_file(p, bytes.substr(0, n));
    EXPECT_THROW(load_safetensors(p), CheckpointError) << n;
  }
  write_file(p, bytes);
  EXPECT_NO_THROW(load_safetensors(p));
}

TEST_F(TempDir, SaveIntoMissingDirectoryLeavesNothing) {
  const std::string p = path("no/such/dir/model.safetensors");
  try {
    save_safetensors(p, {{"a", ones({2})}});
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create temporary file"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(TempDir, FailedSaveKeepsTheOldFile) {
  const std::string p = path("model.safetensors");
  save_safetensors(p, {{"a", ones({2})}});
  const std::string old = read_file(p);
  const auto fails_with = [&](const NamedTensors& tensors, const std::string& needle,
                              const std::map<std::string, std::string>& metadata = {}) {
    try {
      save_safetensors(p, tensors, metadata);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_file(p), old);
    EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  };
  fails_with({{"a", ones({2})}, {"b", Tensor()}}, "tensor #1 'b' is undefined");
  fails_with({{"a", ones({2})}, {"a", ones({2})}}, "duplicate name 'a'");
  fails_with({{"", ones({2})}}, "tensor #0 has an empty name");
  fails_with({{"__metadata__", ones({2})}}, "reserved");
  fails_with({{"bad\xff", ones({2})}}, "is not valid UTF-8");
  fails_with({{"a", ones({2})}}, "metadata value of key 'k' is not valid UTF-8", {{"k", "\xc3"}});
  EXPECT_THROW(safetensors_to_bytes({{"a", Tensor()}}), CheckpointError);
}

TEST_F(TempDir, SaveOverADirectoryFailsCleanly) {
  fs::create_directory(path("sub"));
  EXPECT_THROW(save_safetensors(path("sub"), {{"a", ones({2})}}), CheckpointError);
  EXPECT_EQ(listing(), std::vector<std::string>{"sub"});
  EXPECT_THROW(save_safetensors("", {{"a", ones({2})}}), CheckpointError);
}

// A write that fails half-way (as on a full disk) removes the temporary and keeps the old file.
// The file-size limit makes write() fail with EFBIG once the file would pass 4 KiB.
TEST_F(TempDir, WriteFailureHalfWayKeepsTheOldFile) {
  const std::string p = path("model.safetensors");
  save_safetensors(p, {{"a", ones({2})}});
  const std::string old = read_file(p);

  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = saved;
  limited.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    save_safetensors(p, {{"big", zeros({100000})}});
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(message.find("failed"), std::string::npos) << message;
  EXPECT_EQ(read_file(p), old);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

// A save killed mid-way leaves `<file>.tmp.<pid>.<n>.<salt>`; the next save to the same path
// removes it when that process is gone, and leaves everything else alone.
TEST_F(TempDir, NextSaveRemovesTemporariesOfKilledSaves) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // `child` is now a pid with no process
  const std::string dead = std::to_string(child), live = std::to_string(::getppid());
  write_file(path("model.safetensors.tmp." + dead + ".0.123456"), "partial");
  write_file(path("model.safetensors.tmp." + live + ".3.42"), "a save in progress elsewhere");
  write_file(path("model.safetensors.tmp.notes"), "not ours");
  write_file(path("other.safetensors.tmp." + dead + ".0.1"), "another file's");
  save_safetensors(path("model.safetensors"), {{"w", ones({2})}});
  EXPECT_EQ(listing(), (std::vector<std::string>{
                           "model.safetensors", "model.safetensors.tmp." + live + ".3.42",
                           "model.safetensors.tmp.notes", "other.safetensors.tmp." + dead + ".0.1"}));
}

}  // namespace
}  // namespace kiln
