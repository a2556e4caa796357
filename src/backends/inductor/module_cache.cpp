// The trusted folder of compiled modules (see module_cache.h).
#include "backends/inductor/module_cache.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>

#include "backends/inductor/cpp_compiler.h"
#include "kiln/capture/compile.h"
#include "kiln/core/error.h"

namespace kiln::inductor {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string user_name(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found)
    return detail::concat(found->pw_name, " (uid ", uid, ")");
  return detail::concat("uid ", uid);
}

std::string octal_mode(mode_t mode) {
  char out[8];
  std::snprintf(out, sizeof out, "%04o", static_cast<unsigned>(mode & 07777));
  return out;
}

// Who besides the owner may write, for messages.
std::string writers(mode_t mode) {
  if ((mode & S_IWGRP) && (mode & S_IWOTH)) return "its group and others";
  return (mode & S_IWGRP) ? "its group" : "others";
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) == sizeof v) return v;
  // No getrandom (very old kernels): time, address and pid, still distinct per process.
  v = static_cast<uint64_t>(std::time(nullptr)) * 0x9e3779b97f4a7c15ULL ^
      reinterpret_cast<uintptr_t>(&v) ^ static_cast<uint64_t>(getpid()) << 32;
  return v ^ static_cast<uint64_t>(std::clock());
}

// Is `name` a temporary of this cache ("<stem>.tmp-<hex><suffix>", or the "<stem>.tmp.<pid>"
// of earlier versions)?
bool is_temporary_name(std::string_view name) {
  return name.find(".tmp-") != std::string_view::npos ||
         name.find(".tmp.") != std::string_view::npos;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The whole content of the file open on `fd` (mapped, so a large file costs no copy).
template <class Fn>
auto with_mapped(int fd, size_t size, Fn fn) {
  if (size == 0) return fn(std::string_view());
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return fn(std::string_view());
  auto result = fn(std::string_view(static_cast<const char*>(p), size));
  munmap(p, size);
  return result;
}

constexpr char kTrailerMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', '1'};
constexpr char kTrailerEnd[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'D', '\0'};
struct Trailer {
  char magic[8];
  char key[32];
  uint64_t size;      // bytes before the trailer
  uint64_t checksum;  // content_checksum of those bytes
  char end[8];
};
static_assert(sizeof(Trailer) == 64);

}  // namespace

std::string random_hex16() {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(random_u64()));
  return out;
}

uint64_t content_checksum(std::string_view bytes) {
  constexpr uint64_t kMul1 = 0x9e3779b185ebca87ULL, kMul2 = 0xc2b2ae3d27d4eb4fULL;
  uint64_t lane[4] = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0xa4093822299f31d0ULL,
                      0x082efa98ec4e6c89ULL};
  auto mix = [](uint64_t h, uint64_t w) {
    h ^= w * kMul1;
    h = (h << 31) | (h >> 33);
    return h * kMul2;
  };
  const char* p = bytes.data();
  size_t n = bytes.size(), i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = mix(lane[k], w);
    }
  uint64_t tail = 0, h = n;
  for (size_t shift = 0; i < n; ++i, shift += 8) {
    tail |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (shift % 64);
    if (shift % 64 == 56) {
      h = mix(h, tail);
      tail = 0;
    }
  }
  h = mix(h, tail);
  for (uint64_t l : lane) h = mix(h, l);
  h ^= h >> 29;
  return h * kMul1;
}

uint64_t file_checksum(int fd, uint64_t size) {
  return with_mapped(fd, static_cast<size_t>(size), content_checksum);
}

std::string folder_trust_problem(const fs::path& dir, bool must_own) {
  const uid_t me = geteuid();
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return "cannot be read: " + errno_text(errno);
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "is not a folder";
  if (st.st_uid != me && (must_own || st.st_uid != 0))
    return "is owned by " + user_name(st.st_uid) + ", not by " + user_name(me);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "is writable by " + writers(st.st_mode) + " (mode " + octal_mode(st.st_mode) + ")";
  // Whoever can write a folder above it can move it aside and put another in its place.
  std::error_code ec;
  const fs::path above = fs::canonical(fs::absolute(dir, ec).parent_path(), ec);
  if (ec) return "lies in a folder that cannot be resolved: " + ec.message();
  for (fs::path p = above;; p = p.parent_path()) {
    if (stat(p.c_str(), &st) != 0) return "lies in " + p.string() + ": " + errno_text(errno);
    if (st.st_uid != me && st.st_uid != 0)
      return "lies in " + p.string() + ", owned by " + user_name(st.st_uid);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      return "lies in " + p.string() + ", which " + writers(st.st_mode) + " can write (mode " +
             octal_mode(st.st_mode) + ", no sticky bit)";
    if (p == p.root_path() || p.parent_path() == p) break;
  }
  return "";
}

std::string file_trust_problem(int fd, bool root_may_own) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "cannot be read: " + errno_text(errno);
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  const uid_t me = geteuid();
  if (st.st_uid != me && !(root_may_own && st.st_uid == 0))
    return "is owned by " + user_name(st.st_uid) + ", not by " + user_name(me);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "is writable by " + writers(st.st_mode) + " (mode " + octal_mode(st.st_mode) + ")";
  return "";
}

// ---- the folder ----

ModuleFolder& ModuleFolder::instance() {
  // Never destroyed: static destructors elsewhere may still save tuning files at exit.
  static auto* folder = new ModuleFolder();
  return *folder;
}

ModuleFolder::ModuleFolder() = default;
ModuleFolder::~ModuleFolder() = default;

namespace {
// The private folder of a process whose cache folder cannot be used: removed at exit.
fs::path& fallback_to_remove() {
  static fs::path p;
  return p;
}
void remove_fallback_at_exit() {
  std::error_code ec;
  if (!fallback_to_remove().empty()) fs::remove_all(fallback_to_remove(), ec);
}
}  // namespace

std::string ModuleFolder::try_open(const fs::path& dir) {
  // Make what is missing, each new folder private (0700).
  fs::path made;
  for (const fs::path& part : dir) {
    made /= part;
    if (mkdir(made.c_str(), 0700) != 0 && errno != EEXIST)
      return "cannot be made (" + made.string() + ": " + errno_text(errno) + ")";
  }
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ELOOP || errno == ENOTDIR ? "is a symbolic link or not a folder"
                                              : "cannot be opened: " + errno_text(errno);
  struct stat st {};
  fstat(fd, &st);
  // Kiln's own folder: others need not even read it (the generated source is the user's).
  if (st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)) && (st.st_mode & 077))
    if (fchmod(fd, 0700) == 0) st.st_mode = S_IFDIR | 0700;
  std::string problem = folder_trust_problem(dir, true);
  struct stat now {};
  if (problem.empty() &&
      (lstat(dir.c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev))
    problem = "was replaced while it was being checked";
  if (problem.empty() && access(dir.c_str(), W_OK) != 0)
    problem = "cannot be written: " + errno_text(errno);
  if (!problem.empty()) {
    close(fd);
    return problem;
  }
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  path_ = dir;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  remove_stale_temporaries();
  return "";
}

void ModuleFolder::open_locked() {
  const fs::path wanted = fs::path(cache_dir()) / "inductor";
  const std::string why = try_open(wanted);
  if (why.empty()) return;
  KILN_CHECK(!compile_config().strict_cache, Error, "inductor: the cache folder ", wanted.string(),
             " cannot be used: it ", why,
             " (compile_config().strict_cache / KILN_CACHE_STRICT asks for an error rather than a "
             "private temporary folder)");
  const bool first = fallback_.empty();
  if (first) {
    const std::string tmpl =
        (fs::temp_directory_path() / detail::concat("kiln-", geteuid(), "-XXXXXX")).string();
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    KILN_CHECK(mkdtemp(name.data()), Error, "inductor: the cache folder ", wanted.string(),
               " cannot be used (it ", why, ") and no private temporary folder could be made in ",
               fs::temp_directory_path().string(), ": ", errno_text(errno));
    fallback_ = name.data();
    fallback_to_remove() = fallback_;
    std::atexit(remove_fallback_at_exit);
  }
  const std::string fallback_why = try_open(fallback_);
  KILN_CHECK(fallback_why.empty(), Error, "inductor: the cache folder ", wanted.string(),
             " cannot be used (it ", why, "), nor the private temporary folder ",
             fallback_.string(), " (it ", fallback_why, ")");
  if (first)
    std::cerr << "[kiln] warning: inductor: the cache folder " << wanted.string()
              << " cannot be used: it " << why << ". Compiled modules go to the private folder "
              << fallback_.string()
              << " for this process instead (removed at exit, so the next process compiles "
                 "again). Set KILN_CACHE_DIR to a folder only you can write, or "
                 "KILN_CACHE_STRICT=1 to make this an error.\n";
}

fs::path ModuleFolder::path() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) open_locked();
  return path_;
}

int ModuleFolder::dir_fd() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) open_locked();
  return fd_;
}

void ModuleFolder::revalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) {
    open_locked();
    return;
  }
  struct stat open_st {
  }, named_st{};
  const bool gone = fstat(fd_, &open_st) != 0 || open_st.st_nlink == 0 ||
                    lstat(path_.c_str(), &named_st) != 0 || named_st.st_ino != ino_ ||
                    named_st.st_dev != dev_;
  if (gone) open_locked();
}

fs::path ModuleFolder::make_temporary(const std::string& stem, const std::string& suffix) {
  const int dir = dir_fd();
  for (int attempt = 0;; ++attempt) {
    const std::string name = stem + ".tmp-" + random_hex16() + suffix;
    const int fd =
        openat(dir, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      close(fd);
      return path() / name;
    }
    KILN_CHECK(errno == EEXIST && attempt < 16, Error,
               "inductor: cannot write in the cache folder ", path().string(), ": ",
               errno_text(errno));
  }
}

void ModuleFolder::write_atomically(const std::string& name, std::string_view bytes) {
  const fs::path tmp = make_temporary(name);
  const int dir = dir_fd();
  const int fd = openat(dir, tmp.filename().c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
  bool ok = fd >= 0 && write_all(fd, bytes);
  const int err = errno;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok) {
    unlinkat(dir, tmp.filename().c_str(), 0);
    throw Error(
        detail::concat("inductor: cannot write ", (path() / name).string(), ": ", errno_text(err)));
  }
  rename_into_place(tmp, name);
}

void ModuleFolder::rename_into_place(const fs::path& from, const std::string& name) {
  const int dir = dir_fd();
  if (renameat(dir, from.filename().c_str(), dir, name.c_str()) != 0) {
    const int err = errno;
    unlinkat(dir, from.filename().c_str(), 0);
    throw Error(detail::concat("inductor: cannot move ", from.string(), " into place as ", name,
                               ": ", errno_text(err)));
  }
}

int ModuleFolder::open_checked(const std::string& name, std::string& why) {
  why.clear();
  const int fd = openat(dir_fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) why = errno == ELOOP ? "is a symbolic link" : errno_text(errno);
    return -1;
  }
  why = file_trust_problem(fd);
  if (why.empty()) return fd;
  close(fd);
  return -1;
}

std::optional<std::string> ModuleFolder::read(const std::string& name) {
  std::string why;
  const int fd = open_checked(name, why);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[8192];
  for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  close(fd);
  return text;
}

void ModuleFolder::remove_if_same(const std::string& name, dev_t dev, ino_t ino) {
  const int dir = dir_fd();
  struct stat st {};
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev &&
      st.st_ino == ino)
    unlinkat(dir, name.c_str(), 0);
}

void ModuleFolder::remove(const std::string& name) { unlinkat(dir_fd(), name.c_str(), 0); }

void ModuleFolder::remove_stale_temporaries() {
  // Called with mu_ held, right after opening.
  const int dup_fd = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return;
  DIR* d = fdopendir(dup_fd);
  if (!d) {
    close(dup_fd);
    return;
  }
  const time_t cutoff = std::time(nullptr) - kStaleTemporarySeconds;
  while (const dirent* e = readdir(d)) {
    if (!is_temporary_name(e->d_name)) continue;
    struct stat st {};
    if (fstatat(fd_, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_mtime >= cutoff) continue;
    if (S_ISDIR(st.st_mode)) {
      std::error_code ec;
      fs::remove_all(path_ / e->d_name, ec);  // a precompiled header's unfinished build
    } else {
      unlinkat(fd_, e->d_name, 0);
    }
  }
  closedir(d);
}

// ---- sealed modules ----

void seal_module(const fs::path& path, const std::string& key) {
  KILN_CHECK(key.size() == sizeof(Trailer::key), Error, "inductor: internal error: module key '",
             key, "' is not 32 characters");
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  KILN_CHECK(fd >= 0, Error, "inductor: cannot open the compiled module ", path.string(), ": ",
             errno_text(errno));
  // Whatever the umask gave it: only this user reads or writes it (file_trust_problem).
  fchmod(fd, 0600);
  struct stat st {};
  fstat(fd, &st);
  Trailer t{};
  std::memcpy(t.magic, kTrailerMagic, 8);
  std::memcpy(t.key, key.data(), 32);
  t.size = static_cast<uint64_t>(st.st_size);
  t.checksum = with_mapped(fd, static_cast<size_t>(st.st_size), content_checksum);
  std::memcpy(t.end, kTrailerEnd, 8);
  const bool ok = lseek(fd, 0, SEEK_END) >= 0 &&
                  write_all(fd, std::string_view(reinterpret_cast<const char*>(&t), sizeof t));
  const int err = errno;
  close(fd);
  KILN_CHECK(ok, Error, "inductor: cannot write ", path.string(), ": ", errno_text(err));
}

std::string check_sealed_module(int fd, const std::string& key) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "cannot be read: " + errno_text(errno);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(Trailer)) return detail::concat("is truncated (", size, " bytes, no trailer)");
  Trailer t{};
  if (pread(fd, &t, sizeof t, static_cast<off_t>(size - sizeof t)) != sizeof t)
    return "cannot be read: " + errno_text(errno);
  if (std::memcmp(t.magic, kTrailerMagic, 8) != 0 || std::memcmp(t.end, kTrailerEnd, 8) != 0)
    return detail::concat("has no intact trailer (truncated or damaged; ", size, " bytes)");
  if (std::string_view(t.key, 32) != key)
    return "was built for another key (" + std::string(t.key, 32) + ")";
  if (t.size != size - sizeof t)
    return detail::concat("has ", size - sizeof t, " bytes where its trailer says ", t.size);
  const uint64_t sum = with_mapped(fd, static_cast<size_t>(t.size), content_checksum);
  if (sum != t.checksum) return "is damaged (its checksum does not match)";
  return "";
}

namespace {
// Generated modules call into libkiln (its runtime exports) by symbol. A program linked with
// libkiln has them in the global scope; a library loaded with RTLD_LOCAL (the Python extension
// and libkiln with it) does not, so libkiln is promoted to RTLD_GLOBAL once, before the first
// module is loaded.
void make_runtime_symbols_global() {
  static const bool done = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&make_runtime_symbols_global), &info) && info.dli_fname)
      dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);  // a no-op when linked
    return true;
  }();
  (void)done;
}
}  // namespace

void* ModuleFolder::open_library(const std::string& name, std::string& error) {
  make_runtime_symbols_global();
  // (Without /proc: the path itself; only this user can write the folder.)
  const std::string via_fd = detail::concat("/proc/self/fd/", dir_fd(), "/", name);
  const std::string target = access(via_fd.c_str(), F_OK) == 0 ? via_fd : (path() / name).string();
  dlerror();
  void* handle = dlopen(target.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    error = why ? why : "dlopen failed";
  }
  return handle;
}

}  // namespace kiln::inductor
