// The folder compiled modules are kept in, and the checks that make loading from it safe. A
// module is code this process runs, so the folder must be one that only this user can write
// (checked on the opened folder, and on every folder above it), every file is opened without
// following links and checked on its descriptor before it is read, and every module carries a
// trailer (its key, size and checksum) that is verified before it is handed to dlopen, which
// looks the name up through the checked folder's descriptor.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::inductor {

// A checksum of `bytes` for detecting damage (truncation, flipped bits, a module copied over
// another): 64 bits, four independent lanes over 8-byte words. Not a defence against an
// attacker — the ownership checks are.
uint64_t content_checksum(std::string_view bytes);
// content_checksum of the first `size` bytes of the file open on `fd`.
uint64_t file_checksum(int fd, uint64_t size);

// 16 random hex digits (getrandom): temporary names unique across processes and PID namespaces.
std::string random_hex16();

// Why `dir` cannot be trusted to hold code or headers this process uses ("" when it can): a
// folder above it that is writable by others (and not sticky like /tmp) or owned by someone
// else than this user or root; the folder itself a link, not a folder, writable by group or
// others, or (`must_own`) owned by someone else.
std::string folder_trust_problem(const std::filesystem::path& dir, bool must_own);

// Why the file open on `fd` cannot be trusted ("" when it can): not a regular file, owned by
// someone else (than this user, or root when `root_may_own`), writable by group or others.
std::string file_trust_problem(int fd, bool root_may_own = false);

// The folder modules are kept in: cache_dir()/inductor, created 0700, checked, and held open.
// When it cannot be used (untrusted, unwritable, not creatable) the process warns once, with the
// reason, and uses a private temporary folder instead (removed at exit), unless
// compile_config().strict_cache asks for an error. A folder deleted while the process runs is
// made again before the next write.
class ModuleFolder {
 public:
  static ModuleFolder& instance();

  // The folder in use now (it changes only when the folder had to be made again or replaced).
  std::filesystem::path path();
  // Before writing: makes the folder again if it was deleted or replaced since it was opened.
  void revalidate();

  // A new, empty file with a unique name "<stem>.tmp-<16 hex digits><suffix>" (created with
  // O_EXCL, mode 0600, random across processes and PID namespaces); its full path.
  std::filesystem::path make_temporary(const std::string& stem, const std::string& suffix = "");
  // Writes `bytes` to a temporary and renames it to `name` (a reader sees the old file or the
  // whole new one). Throws kiln::Error with the reason (the errno text) when it cannot.
  void write_atomically(const std::string& name, std::string_view bytes);
  // Moves the temporary `from` (a full path from make_temporary) into place as `name`.
  void rename_into_place(const std::filesystem::path& from, const std::string& name);
  // The text of `name` when it is a regular file this user owns that others cannot write.
  std::optional<std::string> read(const std::string& name);
  // Opens `name` for reading without following a link and checks it (file_trust_problem): the
  // descriptor, or -1 with `why` set ("" when the file does not exist).
  int open_checked(const std::string& name, std::string& why);
  // Removes `name` if its entry is still the file (device, inode) that was checked.
  void remove_if_same(const std::string& name, dev_t dev, ino_t ino);
  void remove(const std::string& name);
  // dlopen of `name` through the folder's own descriptor (/proc/self/fd/<folder>/<name>): the
  // name is looked up in the folder that was checked, never through the folders above it, and
  // it is unique per key (a /proc/self/fd/<file> name would be reused for another file once the
  // descriptor is closed, and the loader matches already-loaded libraries by name). Null with
  // `error` set on failure.
  void* open_library(const std::string& name, std::string& error);

  // Temporaries older than this are left by killed processes and removed when the folder opens.
  static constexpr int kStaleTemporarySeconds = 24 * 3600;

 private:
  ModuleFolder();
  ~ModuleFolder();
  void open_locked();  // opens (or makes) the configured folder, else the fallback
  std::string try_open(const std::filesystem::path& dir);  // "" when opened
  void remove_stale_temporaries();
  int dir_fd();

  std::mutex mu_;
  std::filesystem::path path_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::filesystem::path fallback_;  // the private temporary folder, removed at exit
};

// The trailer every module file ends with (after the shared object's own bytes, which the loader
// ignores): what `key` it was built for, how long the object is and its checksum.
void seal_module(const std::filesystem::path& path, const std::string& key);
// Checks the module open on `fd` against its trailer: "" when it is whole and was built for
// `key`, else what is wrong ("truncated: 4096 bytes, expected 18232", "built for key ...").
std::string check_sealed_module(int fd, const std::string& key);

}  // namespace kiln::inductor
