// The compiled-code cache tried as a careful attacker and a clumsy operator would (issue 42):
// modules planted by another user, indexes pointing anywhere, links, shell syntax in paths and
// in $CXX, damaged and swapped modules, a damaged precompiled header, hanging and broken
// compilers, full and read-only filesystems, a deleted folder, processes in several PID
// namespaces sharing one cache. docs/reliability.md lists the cases.
//
// CacheTrust.* and most CacheFaults.* run tests/backends/cache_client as a second process with
// the environment each sets (cache folder, compiler, time limit); the rest damage modules of
// this process's own cache. "Another user" is nobody (uid 65534): where a plant must be owned
// by another user the test needs root (files are chowned to nobody) and is skipped otherwise.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "backends/inductor/cpp_compiler.h"
#include "backends/inductor/module_cache.h"
#include "core/subprocess.h"
#include "kiln/kiln.h"

#ifndef KILN_CACHE_CLIENT
#error "KILN_CACHE_CLIENT must name the cache client program (tests/CMakeLists.txt)"
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uid_t kNobody = 65534;

bool running_as_root() { return geteuid() == 0; }

#define SKIP_UNLESS_ROOT()                                                                   \
  if (!running_as_root())                                                                    \
  GTEST_SKIP() << "needs root: the plant must be owned by another user (nobody), made with " \
                  "chown"

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << p;
}

// A private folder for one test, removed at its end (whatever modes the test left in it).
struct Scratch {
  fs::path dir;
  Scratch() {
    char tmpl[] = "/tmp/kiln-cache-test-XXXXXX";
    dir = mkdtemp(tmpl);
    fs::create_directory(dir / "tmp");
    fs::permissions(dir / "tmp", fs::perms::owner_all);
  }
  ~Scratch() {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec))
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// Every file and folder name below `dir` holding `part`.
std::vector<std::string> names_with(const fs::path& dir, const std::string& part) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().filename().string().find(part) != std::string::npos)
      found.push_back(e.path().string());
  return found;
}

// A C++ file defining kiln_cache_probe() to return `value`; with `marker`, a constructor that
// appends a line to that file when the module is loaded (as a planted module would run code).
fs::path probe_source(const fs::path& dir, int value, const fs::path& marker = {}) {
  fs::create_directories(dir);
  const fs::path file = dir / ("probe" + std::to_string(value) + ".cpp");
  std::string text =
      "extern \"C\" int kiln_cache_probe() { return " + std::to_string(value) + "; }\n";
  if (!marker.empty())
    text =
        "#include <cstdio>\n__attribute__((constructor)) static void planted() {\n"
        "  if (FILE* f = std::fopen(\"" +
        marker.string() +
        "\", \"a\")) {\n"
        "    std::fputs(\"ran\\n\", f);\n    std::fclose(f);\n  }\n}\n" +
        text;
  write_file(file, text);
  return file;
}

// The cache client: this build's, or $KILN_TEST_CACHE_CLIENT (to run these tests against a
// client built with another Kiln, e.g. to see them fail on an older one).
std::string client_program() {
  const char* other = std::getenv("KILN_TEST_CACHE_CLIENT");
  return other && *other ? other : KILN_CACHE_CLIENT;
}

// Runs the cache client with exactly `env` (plus PATH and the sanitizers' options) after the
// command words `prefix` (unshare, ...). Its output holds stdout and stderr.
detail::ProcessResult run_client(const std::vector<std::string>& env,
                                 const std::vector<std::string>& args,
                                 const std::vector<std::string>& prefix = {},
                                 const std::string& client = client_program(),
                                 double timeout = 300) {
  std::vector<std::string> argv{"env", "-i"};
  for (const char* name :
       {"PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "OMP_WAIT_POLICY"})
    if (const char* v = std::getenv(name)) argv.push_back(std::string(name) + "=" + v);
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), prefix.begin(), prefix.end());
  argv.push_back(client);
  argv.insert(argv.end(), args.begin(), args.end());
  return detail::run_process(argv, timeout);
}

// The environment of a client whose cache is `cache` and whose temporary folder is the
// scratch's (where a private fallback folder would go).
std::vector<std::string> cache_env(const Scratch& s, const fs::path& cache) {
  return {"KILN_CACHE_DIR=" + cache.string(), "TMPDIR=" + (s.dir / "tmp").string()};
}

// The key of the only module in cache folder `cache` (its <key>.so).
std::string only_module_key(const fs::path& cache) {
  std::vector<std::string> keys;
  for (const fs::directory_entry& e : fs::directory_iterator(cache / "inductor"))
    if (e.path().extension() == ".so") keys.push_back(e.path().stem().string());
  EXPECT_EQ(keys.size(), 1u) << "in " << cache;
  return keys.empty() ? "" : keys.front();
}

// The key the client's module for `source` gets: what an attacker learns by compiling the
// same function in a cache of their own.
std::string learn_key(const Scratch& s, const fs::path& source) {
  const fs::path cache = s.dir / "learn-cache";
  fs::remove_all(cache);
  const detail::ProcessResult r = run_client(cache_env(s, cache), {"probe", source.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return only_module_key(cache);
}

// A module for `key` holding other code, as an attacker who learnt the key would make it: an
// evil module (returns 666, its constructor appends to `marker`) with its key symbol rewritten
// to `key` and sealed as `key`. Nothing in the file tells it from the real one: only where it
// lies and who owns it can.
fs::path forge_module(const Scratch& s, const std::string& key, const fs::path& marker) {
  const fs::path evil_cache = s.dir / "evil-cache";
  const fs::path source = probe_source(s.dir / "evil", 666, marker);
  const detail::ProcessResult r = run_client(cache_env(s, evil_cache), {"probe", source.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string evil_key = only_module_key(evil_cache);
  std::string bytes = read_file(evil_cache / "inductor" / (evil_key + ".so"));
  if (bytes.size() > 64 && bytes.compare(bytes.size() - 8, 8, std::string("KILNEND\0", 8)) == 0)
    bytes.resize(bytes.size() - 64);  // the trailer (a client of an older Kiln writes none)
  for (size_t at; (at = bytes.find(evil_key)) != std::string::npos;) bytes.replace(at, 32, key);
  const fs::path forged = s.dir / "forged.so";
  write_file(forged, bytes);
  inductor::seal_module(forged, key);
  fs::remove(marker);  // the evil module's constructor ran when it was built
  return forged;
}

// A cache folder <cache>/inductor holding `file` as <key>.so.
void plant(const fs::path& cache, const std::string& key, const fs::path& file, mode_t folder_mode,
           uid_t owner) {
  fs::create_directories(cache / "inductor");
  fs::copy_file(file, cache / "inductor" / (key + ".so"), fs::copy_options::overwrite_existing);
  ASSERT_EQ(chmod((cache / "inductor" / (key + ".so")).c_str(), 0755), 0);
  ASSERT_EQ(chmod((cache / "inductor").c_str(), folder_mode), 0);
  if (owner != geteuid()) {
    ASSERT_EQ(chown((cache / "inductor").c_str(), owner, owner), 0);
    ASSERT_EQ(chown((cache / "inductor" / (key + ".so")).c_str(), owner, owner), 0);
  }
}

// ---- trust ----

// The attacker's preparation: the victim's function (a probe returning 1), its key, and a
// forged module for that key whose constructor appends to `marker`.
struct Attack {
  Scratch s;
  fs::path marker = s.dir / "planted-code-ran";
  fs::path source = probe_source(s.dir / "src", 1);
  std::string key = learn_key(s, source);
  fs::path forged = forge_module(s, key, marker);
};

// The control for the tests below: in a folder the victim owns, the forgery is loaded (its
// bytes are indistinguishable from the real module's), so where it is not, the folder's or
// the file's owner and mode are why.
TEST(CacheTrust, AForgedModuleInTheUsersOwnFolderIsIndistinguishable) {
  const Attack a;
  const fs::path cache = a.s.dir / "victim";
  plant(cache, a.key, a.forged, 0700, geteuid());
  ASSERT_EQ(chmod((cache / "inductor" / (a.key + ".so")).c_str(), 0600), 0);
  const detail::ProcessResult r = run_client(cache_env(a.s, cache), {"probe", a.source.string()});
  EXPECT_THAT(r.output, HasSubstr("probe=666 (cached)"));
  EXPECT_TRUE(fs::exists(a.marker));
}

TEST(CacheTrust, AFolderOthersCanWriteIsNeverLoadedFrom) {
  const Attack a;
  const fs::path victim_file = a.s.dir / "victims-own-file";
  // The folder writable by everyone (its owner is this user or root), with links at the names
  // the module's files would take.
  const fs::path cache = a.s.dir / "shared";
  plant(cache, a.key, a.forged, 0777, geteuid());
  write_file(victim_file, "precious\n");
  for (const std::string& name : {a.key + ".cpp", a.key + ".batch", a.key + ".so.tune"})
    fs::create_symlink(victim_file, cache / "inductor" / name);
  detail::ProcessResult r = run_client(cache_env(a.s, cache), {"probe", a.source.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)"));
  EXPECT_THAT(r.output, HasSubstr("cannot be used: it is writable by its group and others"));
  EXPECT_THAT(r.output, HasSubstr("private folder"));
  EXPECT_FALSE(fs::exists(a.marker)) << "the planted module ran";
  EXPECT_EQ(read_file(victim_file), "precious\n");
  // The private folder went with the process.
  EXPECT_THAT(names_with(a.s.dir / "tmp", "kiln-"), ::testing::IsEmpty());

  // KILN_CACHE_STRICT makes it an error.
  std::vector<std::string> strict = cache_env(a.s, cache);
  strict.push_back("KILN_CACHE_STRICT=1");
  r = run_client(strict, {"probe", a.source.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot be used: it is writable"));
  EXPECT_FALSE(fs::exists(a.marker));

  // A folder above the cache that others can write (no sticky bit): the cache could be
  // swapped for another.
  const fs::path open_parent = a.s.dir / "open";
  fs::create_directories(open_parent);
  ASSERT_EQ(chmod(open_parent.c_str(), 0777), 0);
  plant(open_parent / "cache", a.key, a.forged, 0700, geteuid());
  r = run_client(cache_env(a.s, open_parent / "cache"), {"probe", a.source.string()});
  EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)"));
  EXPECT_THAT(r.output, HasSubstr("lies in " + open_parent.string()));
  EXPECT_FALSE(fs::exists(a.marker)) << "the planted module ran";
}

TEST(CacheTrust, AFolderOrModuleOwnedByAnotherUserIsNeverLoaded) {
  SKIP_UNLESS_ROOT();
  const Attack a;
  // The folder belongs to nobody (who planted the module in it).
  const fs::path theirs = a.s.dir / "theirs";
  plant(theirs, a.key, a.forged, 0755, kNobody);
  detail::ProcessResult r = run_client(cache_env(a.s, theirs), {"probe", a.source.string()});
  EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)"));
  EXPECT_THAT(r.output, HasSubstr("is owned by nobody (uid 65534)"));
  EXPECT_FALSE(fs::exists(a.marker)) << "the planted module ran";

  // The folder is the victim's, the module in it nobody's.
  const fs::path mine = a.s.dir / "mine";
  plant(mine, a.key, a.forged, 0700, geteuid());
  ASSERT_EQ(chown((mine / "inductor" / (a.key + ".so")).c_str(), kNobody, kNobody), 0);
  r = run_client(cache_env(a.s, mine), {"probe", a.source.string()});
  EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)"));
  EXPECT_THAT(r.output, HasSubstr((mine / "inductor" / (a.key + ".so")).string() +
                                  " is owned by nobody (uid 65534)"));
  EXPECT_FALSE(fs::exists(a.marker)) << "the planted module ran";
}

TEST(CacheTrust, WithoutAHomeTheDefaultFolderIsPerUserAndChecked) {
  Scratch s;
  const fs::path source = probe_source(s.dir / "src", 1);
  // No KILN_CACHE_DIR, XDG_CACHE_HOME or HOME: <TMPDIR>/kiln-<uid>, private.
  const fs::path tmp = s.dir / "tmp";
  detail::ProcessResult r = run_client({"TMPDIR=" + tmp.string()}, {"probe", source.string()});
  EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)"));
  const fs::path own = tmp / ("kiln-" + std::to_string(geteuid()));
  struct stat st {};
  ASSERT_EQ(stat((own / "inductor").c_str(), &st), 0) << r.output;
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  if (!running_as_root()) return;
  // Another user made that folder first (it is a fixed name in a shared place) and planted
  // the module in it.
  const fs::path marker = s.dir / "planted-code-ran";
  const std::string key = only_module_key(own);
  const fs::path forged = forge_module(s, key, marker);
  const fs::path tmp2 = s.dir / "tmp2";
  fs::create_directories(tmp2);
  ASSERT_EQ(chmod(tmp2.c_str(), 01777), 0);
  const fs::path squatted = tmp2 / ("kiln-" + std::to_string(geteuid()));
  plant(squatted, key, forged, 0777, kNobody);
  ASSERT_EQ(chown(squatted.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(chmod(squatted.c_str(), 0777), 0);
  r = run_client({"TMPDIR=" + tmp2.string()}, {"probe", source.string()});
  EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)"));
  EXPECT_THAT(r.output, HasSubstr("cannot be used"));
  EXPECT_FALSE(fs::exists(marker)) << "the planted module ran";
}

TEST(CacheTrust, ABatchIndexHoldsAKeyNeverAPath) {
  const Attack a;
  const fs::path cache = a.s.dir / "victim";
  fs::create_directories(cache / "inductor");
  fs::permissions(cache / "inductor", fs::perms::owner_all);
  fs::copy_file(a.forged, cache / "evil.so");
  // An absolute path, a path climbing out of the folder, and a name with a slash.
  for (const std::string& index :
       {a.forged.string(), std::string("../evil.so"), std::string("sub/evil")}) {
    write_file(cache / "inductor" / (a.key + ".batch"), index);
    fs::remove(cache / "inductor" / (a.key + ".so"));
    const detail::ProcessResult r = run_client(cache_env(a.s, cache), {"probe", a.source.string()});
    EXPECT_THAT(r.output, HasSubstr("probe=1 (compiled)")) << index;
    EXPECT_FALSE(fs::exists(a.marker)) << "the library the index named was loaded: " << index;
    EXPECT_FALSE(fs::exists(cache / "inductor" / (a.key + ".batch"))) << "the bad index stayed";
  }
}

TEST(CacheTrust, TemporariesAreUniqueAndWritesNeverFollowLinks) {
  Scratch s;
  inductor::ModuleFolder& folder = inductor::ModuleFolder::instance();
  const fs::path victim = s.dir / "victims-own-file";
  write_file(victim, "precious\n");
  const std::string name = "link-test-" + inductor::random_hex16() + ".tune";
  fs::create_symlink(victim, folder.path() / name);
  EXPECT_FALSE(folder.read(name).has_value()) << "read through a link";
  folder.write_atomically(name, "mine\n");
  EXPECT_EQ(read_file(victim), "precious\n");
  EXPECT_FALSE(fs::is_symlink(folder.path() / name));
  EXPECT_EQ(folder.read(name).value_or(""), "mine\n");
  folder.remove(name);
  // Temporaries: random names (not the pid, which repeats across PID namespaces), created
  // exclusively, private.
  const fs::path a = folder.make_temporary("stem", ".so");
  const fs::path b = folder.make_temporary("stem", ".so");
  EXPECT_NE(a, b);
  EXPECT_THAT(a.filename().string(), ::testing::MatchesRegex("stem\\.tmp-[0-9a-f]{16}\\.so"));
  EXPECT_THAT(a.filename().string(), Not(HasSubstr(std::to_string(getpid()))));
  struct stat st {};
  ASSERT_EQ(lstat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  fs::remove(a);
  fs::remove(b);
}

TEST(CacheTrust, NoShellReadsAProgramsPath) {
  Scratch s;
  // A program in a folder whose name is shell syntax; a graph break at bool(Tensor) looks its
  // call site up with addr2line on the program's path.
  const fs::path odd = s.dir / "bob's tools;touch X;'";
  fs::create_directories(odd);
  fs::copy_file(client_program(), odd / "client");
  fs::permissions(odd / "client", fs::perms::owner_all);
  std::vector<std::string> env = cache_env(s, s.dir / "cache");
  env.push_back("KILN_LOGS=graph_breaks");
  const detail::ProcessResult r =
      run_client(env, {"break"}, {"env", "-C", s.dir.string()}, (odd / "client").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("break ok"));
  EXPECT_FALSE(fs::exists(s.dir / "X")) << "a shell ran the program's path:\n" << r.output;
  if (!detail::find_executable("addr2line").empty()) {
    EXPECT_THAT(r.output, HasSubstr("main.cpp:")) << "addr2line did not find the call site";
  }
}

// ---- faults in this process's cache ----

// A fresh module in this process's cache: its source, value and file.
struct Probe {
  std::string source;
  int value = 0;
  fs::path file;
};
Probe fresh_probe() {
  static std::mt19937 rng(std::random_device{}());
  Probe p;
  p.value = static_cast<int>(rng() % 1000000) + 1;
  p.source = "extern \"C\" int kiln_cache_probe() { return " + std::to_string(p.value) +
             "; }\n// " + inductor::random_hex16() + "\n";
  p.file = inductor::compile_module(p.source, nullptr)->path();
  // Unloaded before a test damages the file (a mapped file written in place would crash).
  inductor::forget_loaded_modules();
  return p;
}
int call_probe(const std::shared_ptr<inductor::LoadedModule>& m) {
  return reinterpret_cast<int (*)()>(m->kernel("cache_probe"))();
}

// A later process (here: this one, having forgotten its modules) finds `p`'s entry damaged:
// it warns naming the file and `why`, compiles it again, and runs the right code.
void expect_rebuilt(const Probe& p, const std::string& why) {
  inductor::forget_loaded_modules();
  ::testing::internal::CaptureStderr();
  inductor::CompileStats stats;
  std::shared_ptr<inductor::LoadedModule> m;
  EXPECT_NO_THROW(m = inductor::compile_module(p.source, &stats));
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(m);
  EXPECT_FALSE(stats.cache_hit);
  EXPECT_EQ(call_probe(m), p.value);
  EXPECT_THAT(err, HasSubstr(p.file.string()));
  EXPECT_THAT(err, HasSubstr(why));
}

TEST(CacheFaults, TruncatedModulesAreRebuilt) {
  for (int percent : {1, 10, 50, 90, 99}) {
    SCOPED_TRACE(percent);
    const Probe p = fresh_probe();
    fs::resize_file(p.file, fs::file_size(p.file) * static_cast<uintmax_t>(percent) / 100);
    expect_rebuilt(p, "truncated");
  }
}

TEST(CacheFaults, FlippedBytesAreRebuilt) {
  const Probe p = fresh_probe();
  const uintmax_t size = fs::file_size(p.file);
  // Into the ELF header, the code and data, and each field of the trailer.
  for (uintmax_t at :
       {uintmax_t{0}, uintmax_t{5}, uintmax_t{40}, size / 7, size / 3, size / 2, 2 * size / 3,
        size - 100, size - 64, size - 50, size - 20, size - 12, size - 1}) {
    SCOPED_TRACE(at);
    inductor::forget_loaded_modules();  // the last rebuild is mapped: unload it first
    std::string bytes = read_file(p.file);
    ASSERT_EQ(bytes.size(), size);
    bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
    write_file(p.file, bytes);
    expect_rebuilt(p, "[kiln] warning: inductor: the cached module");
  }
}

TEST(CacheFaults, AModuleStoredUnderAnotherKeyIsRebuilt) {
  const Probe a = fresh_probe(), b = fresh_probe();
  fs::copy_file(a.file, b.file, fs::copy_options::overwrite_existing);
  expect_rebuilt(b, "was built for another key");
  // The same with its trailer rewritten for b's key: the key symbol tells.
  inductor::forget_loaded_modules();
  std::string bytes = read_file(a.file);
  bytes.resize(bytes.size() - 64);
  write_file(b.file, bytes);
  inductor::seal_module(b.file, b.file.stem().string());
  expect_rebuilt(b, "does not carry its key");
}

TEST(CacheFaults, LinksAndOpenModesAreRefused) {
  const Probe a = fresh_probe(), b = fresh_probe();
  fs::remove(b.file);
  fs::create_symlink(a.file, b.file);
  expect_rebuilt(b, "is a symbolic link");
  ASSERT_EQ(chmod(b.file.c_str(), 0666), 0);
  expect_rebuilt(b, "is writable by its group and others");
  if (running_as_root()) {
    ASSERT_EQ(chown(b.file.c_str(), kNobody, kNobody), 0);
    expect_rebuilt(b, "is owned by nobody");
  }
}

TEST(CacheFaults, ADamagedBatchLibraryIsRebuiltOneByOne) {
  // Kernels named through KILN_KERNEL, as generated code's: one library holds both.
  std::vector<std::string> sources;
  for (int k = 0; k < 2; ++k)
    sources.push_back(
        "#ifndef KILN_KERNEL\n#define KILN_KERNEL(name) kiln_##name\n#endif\n"
        "extern \"C\" int KILN_KERNEL(cache_probe)() { return " +
        std::to_string(50 + k) + "; }\n// " + inductor::random_hex16() + "\n");
  inductor::compile_modules_batched(sources, 1);
  inductor::CompileStats stats;
  const fs::path library = inductor::compile_module(sources[0], &stats)->path();
  ASSERT_TRUE(stats.cache_hit);
  ASSERT_THAT(library.filename().string(), ::testing::StartsWith("batch-"));
  inductor::forget_loaded_modules();
  fs::resize_file(library, fs::file_size(library) / 2);
  for (int k = 0; k < 2; ++k) {
    Probe p{sources[static_cast<size_t>(k)], 50 + k, library};
    if (k == 0) {
      expect_rebuilt(p, "truncated");
    } else {
      inductor::forget_loaded_modules();
      auto m = inductor::compile_module(p.source, nullptr);
      EXPECT_EQ(call_probe(m), 51);
    }
  }
}

// ---- faults through a second process ----

TEST(CacheFaults, ADamagedPrecompiledHeaderIsRebuilt) {
  const std::string gxx = detail::find_executable("g++");
  if (gxx.empty()) GTEST_SKIP() << "needs g++ (precompiled headers are GCC's)";
  Scratch s;
  // CXX=g++ is another compiler identity than the default c++: the header prepared beside the
  // library does not match, so the cache builds its own.
  std::vector<std::string> env = cache_env(s, s.dir / "cache");
  env.push_back("CXX=g++");
  detail::ProcessResult r = run_client(env, {"probe", probe_source(s.dir / "src", 1).string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> gch = names_with(s.dir / "cache" / "inductor", ".h.gch");
  ASSERT_GE(gch.size(), 1u) << "no precompiled header was built in the cache";
  const fs::path header = *std::find_if(gch.begin(), gch.end(), [](const std::string& n) {
    return n.size() > 4 && n.substr(n.size() - 4) == ".gch";
  });
  const uintmax_t size = fs::file_size(header);
  fs::resize_file(header, size / 2);
  r = run_client(env, {"probe", probe_source(s.dir / "src", 2).string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("probe=2 (compiled)"));
  EXPECT_THAT(r.output, HasSubstr("precompiled runtime header in the cache cannot be used"));
  // Whole again: the size its checksum file records.
  std::istringstream sum(read_file(header.string() + ".sum"));
  uintmax_t recorded = 0;
  sum >> recorded;
  EXPECT_EQ(fs::file_size(header), recorded) << "not rebuilt";
  EXPECT_GT(recorded, size / 2);
}

// A compiler script: `body` runs for everything but --version, which g++ answers (unless
// `hang_on_version`).
fs::path fake_compiler(const Scratch& s, const std::string& name, const std::string& body,
                       bool hang_on_version = false) {
  const fs::path script = s.dir / name;
  write_file(
      script,
      "#!/bin/sh\n" +
          std::string(hang_on_version ? ""
                                      : "case \"$1\" in --version) exec g++ --version;; esac\n") +
          body);
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

// Processes whose command line is `sleep <seconds>`.
int sleeping_processes(const std::string& seconds) {
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string cmdline = read_file(e.path() / "cmdline");
    if (cmdline == std::string("sleep\0", 6) + seconds + std::string(1, '\0')) ++n;
  }
  return n;
}
// Those processes after a kill has had up to 5 s to take them down (on a loaded machine a killed
// process can still be listed a moment after the kill returns; one left running stays listed).
int sleeping_processes_after_kill(const std::string& seconds) {
  int n = sleeping_processes(seconds);
  for (int tries = 0; n > 0 && tries < 50; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    n = sleeping_processes(seconds);
  }
  return n;
}

TEST(CacheFaults, AHangingCompilerIsStoppedAndTheGraphRunsEagerly) {
  if (detail::find_executable("g++").empty()) GTEST_SKIP() << "needs g++ to answer --version";
  Scratch s;
  std::vector<std::string> env = cache_env(s, s.dir / "cache");
  env.push_back("KILN_COMPILE_TIMEOUT=2");
  // The driver waits on a child, as g++ on cc1plus: the whole process group must go.
  // A sleep of its own length (another run of this test may be going on), told apart below.
  const std::string hang = std::to_string(5000 + getpid() % 4000);
  const std::string mute = std::to_string(10000 + getpid() % 4000);
  env.push_back("CXX=" + fake_compiler(s, "hanging-cxx", "sleep " + hang + " &\nwait\n").string());
  const auto start = std::chrono::steady_clock::now();
  detail::ProcessResult r = run_client(env, {"graph"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("graph ok"));
  EXPECT_THAT(r.output, HasSubstr("did not finish within 2 s"));
  EXPECT_THAT(r.output, HasSubstr("runs with the eager kernels instead"));
  EXPECT_LT(seconds, 60);
  EXPECT_EQ(sleeping_processes_after_kill(hang), 0) << "the compiler's children were left running";

  // A compiler that hangs on --version too: inductor is unavailable, with the reason.
  env.back() = "CXX=" + fake_compiler(s, "mute-cxx", "sleep " + mute + " &\nwait\n", true).string();
  r = run_client(env, {"graph"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("graph ok"));
  EXPECT_THAT(r.output, HasSubstr("when asked for --version"));
  EXPECT_EQ(sleeping_processes_after_kill(mute), 0);
}

TEST(CacheFaults, BrokenCompilersAndCxxValuesAreReported) {
  if (detail::find_executable("g++").empty()) GTEST_SKIP() << "needs g++";
  Scratch s;
  const std::vector<std::string> base = cache_env(s, s.dir / "cache");
  auto with = [&](const std::string& var) {
    std::vector<std::string> env = base;
    env.push_back(var);
    return env;
  };
  // Writes garbage where the object should go and says it succeeded.
  const fs::path garbage = fake_compiler(
      s, "garbage-cxx",
      "prev=''\nfor a in \"$@\"; do [ \"$prev\" = -o ] && echo 'not an object' > \"$a\"; "
      "prev=\"$a\"; done\nexit 0\n");
  detail::ProcessResult r = run_client(with("CXX=" + garbage.string()),
                                       {"probe", probe_source(s.dir / "src", 3).string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("just built for"));
  EXPECT_THAT(r.output, HasSubstr("cannot be loaded"));

  // A launcher before the compiler is honoured.
  r = run_client(with("CXX=env g++"), {"probe", probe_source(s.dir / "src", 4).string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("probe=4"));

  // Shell syntax is refused, never run; an unknown name is named.
  r = run_client(with("CXX=g++;touch X"), {"graph"}, {"env", "-C", s.dir.string()});
  EXPECT_THAT(r.output, HasSubstr("graph ok"));
  EXPECT_THAT(r.output, HasSubstr("holds shell syntax"));
  EXPECT_FALSE(fs::exists(s.dir / "X"));
  r = run_client(with("CXX=no-such-compiler-kiln"), {"graph"});
  EXPECT_THAT(r.output, HasSubstr("graph ok"));
  EXPECT_THAT(r.output, HasSubstr("names 'no-such-compiler-kiln', which is not an executable"));
}

// Runs the client in a mount namespace of its own with a tmpfs mounted (`options`) on `where`
// (with `fill`, filled up first), then lists what is left in <where>/inductor after "left:".
detail::ProcessResult run_on_tmpfs(const std::vector<std::string>& env, const fs::path& where,
                                   const std::string& options, const fs::path& source,
                                   bool fill = false) {
  return run_client(
      env, {},
      {"unshare", "-m", "sh", "-c",
       "mount -t tmpfs -o \"$1\" tmpfs \"$2\" || exit 97; "
       "if [ \"$5\" = fill ]; then head -c 1000000 /dev/zero >\"$2/fill\" 2>/dev/null; fi; "
       "\"$3\" probe \"$4\"; echo \"status=$?\"; echo left:; ls -A \"$2/inductor\" 2>&1",
       "sh", options, where.string(), client_program(), source.string(), fill ? "fill" : "-"},
      "true");
}

bool can_mount_in_a_namespace() {
  return detail::run_process({"unshare", "-m", "true"}, 30).succeeded();
}

TEST(CacheFaults, AFullDiskIsReportedWithItsReasonAndLeavesNoTemporaries) {
  if (!can_mount_in_a_namespace()) GTEST_SKIP() << "cannot make a mount namespace here";
  Scratch s;
  const fs::path where = s.dir / "small";
  fs::create_directories(where);
  const detail::ProcessResult r =
      run_on_tmpfs(cache_env(s, where), where, "size=8k", probe_source(s.dir / "src", 5));
  ASSERT_NE(r.exit_code, 97) << r.output;
  EXPECT_THAT(r.output, HasSubstr("status=1"));
  EXPECT_THAT(r.output, HasSubstr("No space left on device"));
  const std::string left = r.output.substr(r.output.find("left:"));
  EXPECT_THAT(left, Not(HasSubstr(".tmp"))) << r.output;
  // Already full: Kiln's own first write (the source) fails, and says why.
  const detail::ProcessResult full =
      run_on_tmpfs(cache_env(s, where), where, "size=8k", probe_source(s.dir / "src", 5), true);
  EXPECT_THAT(full.output, HasSubstr("status=1"));
  EXPECT_THAT(full.output, HasSubstr(".cpp: No space left on device"));
  EXPECT_THAT(full.output.substr(full.output.find("left:")), Not(HasSubstr(".tmp"))) << full.output;
}

TEST(CacheFaults, AReadOnlyCacheFallsBackOnceWithTheReason) {
  if (!can_mount_in_a_namespace()) GTEST_SKIP() << "cannot make a mount namespace here";
  Scratch s;
  const fs::path where = s.dir / "readonly";
  fs::create_directories(where);
  const detail::ProcessResult r =
      run_on_tmpfs(cache_env(s, where), where, "ro", probe_source(s.dir / "src", 6));
  ASSERT_NE(r.exit_code, 97) << r.output;
  EXPECT_THAT(r.output, HasSubstr("status=0"));
  EXPECT_THAT(r.output, HasSubstr("probe=6"));
  EXPECT_THAT(r.output, HasSubstr("Read-only file system"));
  EXPECT_THAT(r.output, HasSubstr("private folder"));
  EXPECT_THAT(names_with(s.dir / "tmp", "kiln-"), ::testing::IsEmpty())
      << "the private folder was left behind";
}

TEST(CacheFaults, ADeletedCacheFolderIsMadeAgain) {
  Scratch s;
  const fs::path cache = s.dir / "cache";
  const detail::ProcessResult r =
      run_client(cache_env(s, cache), {"probe", probe_source(s.dir / "src", 7).string(), "rmcache",
                                       "probe", probe_source(s.dir / "src", 8).string(), "graph"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("probe=7"));
  EXPECT_THAT(r.output, HasSubstr("probe=8"));
  EXPECT_THAT(r.output, HasSubstr("graph ok"));
  EXPECT_TRUE(fs::exists(cache / "inductor")) << r.output;
  EXPECT_GE(names_with(cache / "inductor", ".so").size(), 3u);
}

TEST(CacheFaults, StaleTemporariesAreRemovedAtStartUp) {
  Scratch s;
  const fs::path folder = s.dir / "cache" / "inductor";
  fs::create_directories(folder);
  fs::permissions(folder, fs::perms::owner_all);
  const std::vector<std::string> old_names{"a.so.tmp-0123456789abcdef", "b.tmp.4242.cpp",
                                           "pch-0123.tmp-0123456789abcdef"};
  for (const std::string& n : old_names) {
    if (n.rfind("pch-", 0) == 0)
      fs::create_directories(folder / n / "inner");
    else
      write_file(folder / n, "left by a killed process");
    const timeval two_days_ago[2] = {{time(nullptr) - 2 * 86400, 0},
                                     {time(nullptr) - 2 * 86400, 0}};
    ASSERT_EQ(utimes((folder / n).c_str(), two_days_ago), 0);
  }
  write_file(folder / "c.so.tmp-fedcba9876543210", "another process is writing this");
  const detail::ProcessResult r =
      run_client(cache_env(s, s.dir / "cache"), {"probe", probe_source(s.dir / "src", 9).string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& n : old_names) EXPECT_FALSE(fs::exists(folder / n)) << n;
  EXPECT_TRUE(fs::exists(folder / "c.so.tmp-fedcba9876543210"));
}

TEST(CacheFaults, EightProcessesInTwoPidNamespacesShareOneCache) {
  Scratch s;
  const fs::path cache = s.dir / "cache";
  const bool namespaces =
      detail::run_process({"unshare", "--pid", "--fork", "true"}, 30).succeeded();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    // Each round compiles new modules (another constant) into the same cache, all at once;
    // two of the eight run in PID namespaces of their own, where both are pid 1.
    std::vector<std::vector<std::string>> commands;
    for (int p = 0; p < 8; ++p) {
      std::vector<std::string> argv{"env", "-i"};
      for (const char* name : {"PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "OMP_WAIT_POLICY"})
        if (const char* v = std::getenv(name)) argv.push_back(std::string(name) + "=" + v);
      for (const std::string& e : cache_env(s, cache)) argv.push_back(e);
      if (namespaces && p >= 6)
        for (const char* w : {"unshare", "--pid", "--fork"}) argv.push_back(w);
      argv.push_back(client_program());
      argv.push_back("graph");
      argv.push_back(std::to_string(3 + round));
      commands.push_back(argv);
    }
    const std::vector<detail::ProcessResult> results = detail::run_processes(commands, 600);
    for (const detail::ProcessResult& r : results) {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_THAT(r.output, HasSubstr("graph ok"));
      EXPECT_THAT(r.output, Not(HasSubstr("warning")));
    }
    EXPECT_THAT(names_with(cache, ".tmp"), ::testing::IsEmpty()) << "temporaries were left";
  }
  if (!namespaces) std::cout << "[note] unshare --pid is not allowed here: 8 plain processes\n";
}

}  // namespace
}  // namespace kiln
