// The safetensors format: reader (strict: every byte validated before a tensor is returned) and
// atomic writer. Layout of a file:
//   [8 bytes: N, little-endian u64] [N bytes: UTF-8 JSON header, space-padded] [data buffer]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data buffer) plus an optional "__metadata__" object of strings. The tensors' byte
// ranges tile the data buffer exactly.
#include "kiln/io/safetensors.h"

#include "kiln/io/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

namespace kiln {
namespace {

// Tensor data is written and read as the host's bytes; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

// The reference implementation refuses headers above this size; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw CheckpointError(source + ": " + problem);
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string file_source(const std::string& path) { return "safetensors file '" + path + "'"; }

// ---- dtypes ----

// The format's dtype codes for Kiln's dtypes.
constexpr std::pair<std::string_view, DType> kFormatDTypes[] = {
    {"BOOL", DType::Bool},   {"I32", DType::Int32},   {"I64", DType::Int64},
    {"F32", DType::Float32}, {"F64", DType::Float64},
};
// Codes the format defines that Kiln has no dtype for: a file using them is valid but unloadable.
// clang-format off
constexpr std::string_view kOtherFormatDTypes[] = {
    "F4", "F6_E2M3", "F6_E3M2", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
    "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "U64", "C64"};
// clang-format on

// The format code of a Kiln dtype ("" if there is none: a dtype added to Kiln but not here).
std::string_view format_dtype(DType dt) {
  for (const auto& [code, d] : kFormatDTypes)
    if (d == dt) return code;
  return {};
}

std::string shape_str(const Shape& s) { return detail::concat(IntList(s)); }

// ---- UTF-8 ----

// Returns the offset of the first byte that is not part of well-formed UTF-8 (no overlong forms,
// no surrogates, nothing above U+10FFFF), or npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra;
    uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (s.size() - i <= static_cast<size_t>(extra)) return i;
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += extra + 1;
  }
  return std::string_view::npos;
}

// ---- header parsing and validation ----

// One tensor as the header describes it, already checked against the data buffer.
struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin;  // byte offsets into the data buffer
  int64_t end;
};

struct Header {
  std::vector<TensorEntry> entries;  // in the header's order
  std::map<std::string, std::string> metadata;
};

std::string offsets_str(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Reads one tensor's {"dtype", "shape", "data_offsets"} object and checks it on its own.
TensorEntry read_tensor_entry(io::JsonReader& json, const std::string& name,
                              const std::string& source) {
  const std::string tensor = "tensor " + quoted(name);
  if (json.peek() != '{')
    fail(source, tensor +
                     " must be an object with \"dtype\", \"shape\" and \"data_offsets\", got " +
                     json.next_kind());
  std::optional<std::string> dtype_code;
  std::optional<std::vector<int64_t>> shape, offsets;
  json.read_object(tensor, [&](const std::string& field) {
    if (field == "dtype") {
      dtype_code = json.read_string(tensor + ": \"dtype\"");
    } else if (field == "shape" || field == "data_offsets") {
      const std::string what = tensor + ": \"" + field + "\"";
      if (json.peek() != '[')
        fail(source, what + " must be an array of integers, got " + json.next_kind());
      std::vector<int64_t> values;
      json.read_array([&] { values.push_back(json.read_size(what + " entry")); });
      (field == "shape" ? shape : offsets) = std::move(values);
    } else {
      fail(source, tensor + " has unknown field " + quoted(field));
    }
  });
  for (const auto& [present, field] :
       {std::pair{dtype_code.has_value(), "dtype"}, std::pair{shape.has_value(), "shape"},
        std::pair{offsets.has_value(), "data_offsets"}})
    if (!present) fail(source, tensor + " is missing field \"" + std::string(field) + "\"");

  TensorEntry e;
  e.name = name;
  const auto known = std::find_if(std::begin(kFormatDTypes), std::end(kFormatDTypes),
                                  [&](const auto& p) { return p.first == *dtype_code; });
  if (known == std::end(kFormatDTypes)) {
    const bool other = std::find(std::begin(kOtherFormatDTypes), std::end(kOtherFormatDTypes),
                                 *dtype_code) != std::end(kOtherFormatDTypes);
    if (other)
      fail(source, tensor + " has dtype " + *dtype_code +
                       ", which Kiln does not support (it loads BOOL, I32, I64, F32, F64)");
    fail(source, tensor + " has unknown dtype " + quoted(*dtype_code));
  }
  e.dtype = known->second;

  // The element count, and the same product with zero dims taken as 1: strides are computed
  // from the latter, so it must not overflow either (a shape like [0, 2^62, 2^62]).
  e.shape = Shape(shape->begin(), shape->end());
  int64_t numel = 1, extent = 1;
  for (int64_t d : *shape) {
    const int64_t m = std::max<int64_t>(d, 1);
    if (extent > kInt64Max / m)
      fail(source, tensor + " has shape " + shape_str(e.shape) + ", which overflows int64");
    extent *= m;
    numel *= d;
  }
  const int64_t item = itemsize(e.dtype);
  if (numel > kInt64Max / item)
    fail(source, tensor + " has shape " + shape_str(e.shape) + ", whose byte size overflows int64");

  if (offsets->size() != 2)
    fail(source, tensor + ": \"data_offsets\" must hold exactly 2 integers [begin, end], got " +
                     std::to_string(offsets->size()));
  e.begin = (*offsets)[0];
  e.end = (*offsets)[1];
  const std::string range = "data_offsets " + offsets_str(e.begin, e.end);
  if (e.end < e.begin) fail(source, tensor + ": " + range + " end before they begin");
  if (e.end - e.begin != numel * item)
    fail(source, tensor + ": " + range + " span " + std::to_string(e.end - e.begin) +
                     " bytes but shape " + shape_str(e.shape) + " of " + *dtype_code + " needs " +
                     std::to_string(numel * item));
  return e;
}

// Parses the JSON header and checks every tensor against a data buffer of `buffer_size` bytes:
// the byte ranges must tile the buffer exactly (no overlap, no hole, nothing after the last).
Header parse_header(std::string_view text, int64_t buffer_size, const std::string& source) {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail(source, "header is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  io::JsonReader json(text, source, "header",
                      [](const std::string& message) { throw CheckpointError(message); });
  if (json.peek() != '{') {
    if (json.at_end()) fail(source, "header is empty; it must be a JSON object");
    fail(source, "header must be a JSON object, got " + json.next_kind());
  }
  // The format requires the object to start at the header's first byte.
  if (text[0] != '{') fail(source, "header must begin with '{', found whitespace before it");

  Header h;
  json.read_object("the header", [&](const std::string& key) {
    if (key != kMetadataKey) {
      h.entries.push_back(read_tensor_entry(json, key, source));
      return;
    }
    if (json.peek() != '{')
      fail(source, "\"__metadata__\" must be an object of strings, got " + json.next_kind());
    json.read_object("\"__metadata__\"", [&](const std::string& k) {
      h.metadata[k] = json.read_string("\"__metadata__\" value of key " + quoted(k));
    });
  });
  if (!json.at_end()) json.syntax_error("unexpected content after the header object");

  // Walk the tensors in buffer order; `covered` is how far the buffer is tiled so far.
  std::vector<size_t> order(h.entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TensorEntry &x = h.entries[a], &y = h.entries[b];
    return std::pair(x.begin, x.end) < std::pair(y.begin, y.end);
  });
  int64_t covered = 0;
  const TensorEntry* previous = nullptr;  // the tensor that ends at `covered`
  for (size_t i : order) {
    const TensorEntry& e = h.entries[i];
    const std::string range = "data_offsets " + offsets_str(e.begin, e.end);
    if (e.end > buffer_size)
      fail(source, "tensor " + quoted(e.name) + ": " + range +
                       " run past the end of the data buffer (" + std::to_string(buffer_size) +
                       " bytes)");
    if (e.begin < covered)
      fail(source, "tensor " + quoted(e.name) + ": " + range + " overlap tensor " +
                       quoted(previous->name) + " " + offsets_str(previous->begin, previous->end));
    if (e.begin > covered)
      fail(source, "bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                       ") of the data buffer belong to no tensor (a hole before tensor " +
                       quoted(e.name) + ")");
    if (e.end > covered || previous == nullptr) previous = &e;
    covered = e.end;
  }
  if (covered != buffer_size)
    fail(source, "the data buffer has " + std::to_string(buffer_size) +
                     " bytes but the tensors cover only " + std::to_string(covered) +
                     " (trailing bytes after the last tensor)");
  return h;
}

// Kiln's bools are bytes holding 0 or 1; any other byte would be undefined behaviour to read.
void check_bool_bytes(const unsigned char* p, int64_t n, const TensorEntry& e,
                      const std::string& source) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] > 1)
      fail(source, "tensor " + quoted(e.name) + ": BOOL element " + std::to_string(i) +
                       " is byte " + std::to_string(p[i]) + ", not 0 or 1");
}

// Reads the 8-byte header length and checks it against the bytes that follow it.
uint64_t read_header_length(const unsigned char* prefix, uint64_t file_size,
                            const std::string& source) {
  uint64_t n;
  std::memcpy(&n, prefix, sizeof n);
  if (n > kMaxHeaderBytes)
    fail(source, "header length " + std::to_string(n) + " exceeds the limit of " +
                     std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > file_size - 8)
    fail(source, "header length " + std::to_string(n) + " runs past the end of the file (" +
                     std::to_string(file_size - 8) + " bytes follow the length field)");
  return n;
}

void check_length_field(uint64_t file_size, const std::string& source) {
  if (file_size < 8)
    fail(source, "file is " + std::to_string(file_size) +
                     " bytes, too short to hold the 8-byte header length");
}

// ---- header writing ----

// What a save writes: the length field + header, then each tensor's bytes in order.
struct WritePlan {
  std::string prefix;  // 8-byte length, JSON header, space padding
  uint64_t total_size = 0;
};

// Checks the arguments and builds the header; touches no tensor data and no file.
WritePlan plan_write(const NamedTensors& tensors,
                     const std::map<std::string, std::string>& metadata, const std::string& dest) {
  auto check_utf8 = [&](std::string_view s, const std::string& what) {
    if (find_invalid_utf8(s) != std::string_view::npos)
      fail(dest, what + " is not valid UTF-8 (the header is JSON text)");
  };
  std::string json = "{";
  if (!metadata.empty()) {
    io::append_json_string(json, kMetadataKey);
    json += ":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      check_utf8(k, "metadata key " + quoted(k));
      check_utf8(v, "metadata value of key " + quoted(k));
      if (!first) json += ',';
      first = false;
      io::append_json_string(json, k);
      json += ':';
      io::append_json_string(json, v);
    }
    json += "},";
  }
  std::set<std::string_view> names;
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const std::string tensor = "tensor #" + std::to_string(i) + " " + quoted(name);
    if (name.empty()) fail(dest, "tensor #" + std::to_string(i) + " has an empty name");
    if (name == kMetadataKey)
      fail(dest, tensor + ": the name \"__metadata__\" is reserved by the format");
    if (!names.insert(name).second) fail(dest, tensor + ": duplicate name " + quoted(name));
    check_utf8(name, tensor + ": the name");
    if (!t.defined()) fail(dest, tensor + " is undefined");
    const std::string_view code = format_dtype(t.dtype());
    if (code.empty())
      fail(dest, tensor + " has dtype " + std::string(dtype_name(t.dtype())) +
                     ", which has no safetensors code in Kiln yet");
    const int64_t nbytes = t.numel() * t.element_size();
    io::append_json_string(json, name);
    json += ":{\"dtype\":\"";
    json += code;
    json += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d > 0) json += ',';
      json += std::to_string(t.size(d));
    }
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," +
            std::to_string(offset + nbytes) + "]},";
    offset += nbytes;
  }
  if (json.size() > 1) json.pop_back();  // the last ','
  json += '}';
  // Pad with spaces so the data buffer starts 8-byte aligned (the length field is 8 bytes).
  json.append((8 - json.size() % 8) % 8, ' ');
  if (json.size() > kMaxHeaderBytes)
    fail(dest, "the header would be " + std::to_string(json.size()) +
                   " bytes, above the format's limit of " + std::to_string(kMaxHeaderBytes));

  WritePlan plan;
  const uint64_t n = json.size();
  plan.prefix.resize(8);
  std::memcpy(plan.prefix.data(), &n, 8);
  plan.prefix += json;
  plan.total_size = plan.prefix.size() + static_cast<uint64_t>(offset);
  return plan;
}

// Feeds the planned bytes to sink(const void*, size_t): the prefix, then each tensor row-major.
template <typename Sink>
void write_contents(const WritePlan& plan, const NamedTensors& tensors, Sink&& sink) {
  sink(plan.prefix.data(), plan.prefix.size());
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    const Tensor c = t.contiguous();
    sink(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()));
  }
}

// ---- files ----

// Closes a file descriptor on scope exit.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

std::string errno_str(int err) { return std::strerror(err); }

// Reads exactly `n` bytes at `offset`; false if the file ends first.
bool read_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& source) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
    const ssize_t r = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(source, "read failed: " + errno_str(errno));
    }
    if (r == 0) return false;
    p += r;
    offset += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
  return true;
}

void write_all(int fd, const void* src, size_t n, const std::string& what,
               const std::string& dest) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(dest, "writing " + what + " failed: " + errno_str(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Creates a fresh file next to `path` (same directory, so the final rename is atomic).
std::pair<std::string, int> create_temporary(const std::string& path, const std::string& dest) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    const uint64_t salt =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter.fetch_add(1)) + "." +
                            std::to_string(salt % 1000000);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {tmp, fd};
    if (errno == EINTR || (errno == EEXIST && attempt < 100)) continue;
    fail(dest, "cannot create temporary file " + quoted(tmp) + ": " + errno_str(errno));
  }
}

// Removes temporaries that an earlier save to `path` left behind when its process was killed
// mid-save: names `<file>.tmp.<pid>.<n>.<salt>` (as create_temporary makes them) whose process
// no longer exists. Best effort: a failure here never fails the save.
void remove_stale_temporaries(const std::string& path) {
  const std::string dir = parent_directory(path);
  const size_t slash = path.find_last_of('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    // <pid>.<n>.<salt>: three runs of digits.
    const std::string rest = name.substr(prefix.size());
    int fields = 0;
    bool ok = true, in_digits = false;
    for (char c : rest) {
      if (c >= '0' && c <= '9') {
        if (!in_digits) ++fields, in_digits = true;
      } else if (c == '.' && in_digits) {
        in_digits = false;
      } else {
        ok = false;
        break;
      }
    }
    if (!ok || fields != 3 || !in_digits) continue;
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    stale.push_back(dir + "/" + name);
  }
  ::closedir(d);
  for (const std::string& f : stale) ::unlink(f.c_str());
}

}  // namespace

// ---- public API ----

std::string safetensors_to_bytes(const NamedTensors& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  const WritePlan plan = plan_write(tensors, metadata, "safetensors_to_bytes");
  std::string out;
  out.reserve(plan.total_size);
  write_contents(plan, tensors,
                 [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

SafetensorsContents safetensors_from_bytes(std::string_view bytes, const std::string& source_name) {
  const std::string source = file_source(source_name);
  check_length_field(bytes.size(), source);
  const auto* base = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint64_t n = read_header_length(base, bytes.size(), source);
  const int64_t buffer_size = static_cast<int64_t>(bytes.size() - 8 - n);
  Header h = parse_header(bytes.substr(8, n), buffer_size, source);

  const unsigned char* buffer = base + 8 + n;
  SafetensorsContents out;
  for (const TensorEntry& e : h.entries) {
    const int64_t nbytes = e.end - e.begin;
    if (e.dtype == DType::Bool) check_bool_bytes(buffer + e.begin, nbytes, e, source);
    Tensor t = make_tensor(e.shape, e.dtype);
    if (nbytes > 0) std::memcpy(t.data_ptr(), buffer + e.begin, static_cast<size_t>(nbytes));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  out.metadata = std::move(h.metadata);
  return out;
}

SafetensorsContents load_safetensors(const std::string& path) {
  const std::string source = file_source(path);
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail(source, "cannot open: " + errno_str(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0) fail(source, "cannot stat: " + errno_str(errno));
  if (!S_ISREG(st.st_mode)) fail(source, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const std::string shrank = "the file ended early (was it changed while loading?)";

  check_length_field(size, source);
  unsigned char prefix[8];
  if (!read_exact(file.fd, prefix, 8, 0, source)) fail(source, shrank);
  const uint64_t n = read_header_length(prefix, size, source);
  std::string text(n, '\0');
  if (!read_exact(file.fd, text.data(), n, 8, source)) fail(source, shrank);
  Header h = parse_header(text, static_cast<int64_t>(size - 8 - n), source);

  // Everything is validated: read each tensor straight into its own storage.
  SafetensorsContents out;
  for (const TensorEntry& e : h.entries) {
    const int64_t nbytes = e.end - e.begin;
    Tensor t = make_tensor(e.shape, e.dtype);
    if (nbytes > 0) {
      if (!read_exact(file.fd, t.data_ptr(), static_cast<uint64_t>(nbytes),
                      8 + n + static_cast<uint64_t>(e.begin), source))
        fail(source, shrank);
      if (e.dtype == DType::Bool)
        check_bool_bytes(static_cast<const unsigned char*>(t.data_ptr()), nbytes, e, source);
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  out.metadata = std::move(h.metadata);
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string dest = file_source(path);
  if (path.empty()) fail(dest, "the path is empty");
  const WritePlan plan = plan_write(tensors, metadata, dest);

  auto [tmp, fd] = create_temporary(path, dest);
  try {
    write_contents(plan, tensors,
                   [&](const void* p, size_t n) { write_all(fd, p, n, quoted(tmp), dest); });
    // The data must be on disk before the rename makes it visible under `path`.
    if (::fsync(fd) != 0) fail(dest, "fsync of " + quoted(tmp) + " failed: " + errno_str(errno));
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) fail(dest, "closing " + quoted(tmp) + " failed: " + errno_str(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      fail(dest, "renaming " + quoted(tmp) + " over it failed: " + errno_str(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  remove_stale_temporaries(path);
  // Persist the rename itself. Best effort: the new file is complete and in place either way.
  FileDescriptor dir{::open(parent_directory(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0) ::fsync(dir.fd);
}

}  // namespace kiln
