// The process group: rendezvous (environment → store → Gloo context), the communication thread
// that runs Gloo's blocking collectives in issue order, and the collectives on tensors.
#include "kiln/distributed/process_group.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include "distributed/work_state.h"
#include "kiln/core/error.h"

namespace kiln::distributed {

namespace {

using kiln::detail::concat;

// ---- the environment ----
std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  KILN_CHECK(*end == '\0' && x >= 0 && x < (1 << 20), ValueError, "init_process_group: ", name, "=",
             v, " is not a non-negative integer");
  return static_cast<int>(x);
}
std::string env_str(const char* name, const std::string& otherwise = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : otherwise;
}

bool is_loopback(const std::string& host) {
  if (host.empty() || host == "localhost") return true;
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

// The rendezvous URL from the options and the environment (InitOptions::rendezvous says the
// order).
std::string rendezvous_url(const InitOptions& options) {
  if (!options.rendezvous.empty()) return options.rendezvous;
  if (std::string url = env_str("KILN_RENDEZVOUS"); !url.empty()) return url;
  if (std::string dir = env_str("KILN_RENDEZVOUS_DIR"); !dir.empty()) return "file://" + dir;
  const std::string addr = env_str("MASTER_ADDR");
  const std::string port = env_str("MASTER_PORT", "29500");
  if (!is_loopback(addr)) return concat("redis://", addr, ":", port);
  return concat("file://", std::filesystem::temp_directory_path().string(), "/kiln-rendezvous-",
                getuid(), "-", port);
}

std::unique_ptr<gloo::rendezvous::Store> open_store(const std::string& url) {
  if (url.starts_with("file://")) {
    const std::string dir = url.substr(7);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    KILN_CHECK(!ec, Error, "init_process_group: cannot make the rendezvous folder ", dir, ": ",
               ec.message());
    return std::make_unique<gloo::rendezvous::FileStore>(dir);
  }
  if (url.starts_with("redis://")) {
    const std::string rest = url.substr(8);
    const size_t colon = rest.rfind(':');
    const std::string host = colon == std::string::npos ? rest : rest.substr(0, colon);
    const int port = colon == std::string::npos ? 6379 : std::atoi(rest.c_str() + colon + 1);
    try {
      return std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } catch (const std::exception& e) {
      throw Error(concat("init_process_group: cannot reach the redis rendezvous store at ", host,
                         ":", port, " (", e.what(),
                         "); start redis-server there (docs/distributed.md)"));
    }
  }
  throw ValueError(concat("init_process_group: rendezvous '", url,
                          "' is neither file:///folder nor redis://host:port"));
}

std::shared_ptr<gloo::transport::Device> open_device(const std::string& url) {
  gloo::transport::tcp::attr attr;
  const std::string ifname = env_str("KILN_SOCKET_IFNAME");
  if (!ifname.empty()) {
    attr.iface = ifname;
  } else {
    const bool one_machine = url.starts_with("file://") && is_loopback(env_str("MASTER_ADDR"));
    KILN_CHECK(one_machine, ValueError, "init_process_group: the ranks meet through ", url,
               ", so they may run on several machines, but KILN_SOCKET_IFNAME is not set: set it "
               "to the network interface the other machines reach this one on (e.g. "
               "KILN_SOCKET_IFNAME=eth0). Without it this process would announce the address "
               "its hostname maps to, which on Debian is 127.0.1.1, and the others would wait "
               "for it until the timeout");
    attr.hostname = "127.0.0.1";
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(concat("init_process_group: cannot open a TCP device on ",
                       ifname.empty() ? "127.0.0.1" : "interface " + ifname, ": ", e.what()));
  }
}

// ---- the group ----
struct Task {
  std::string what;  // "all_reduce of 262144 float32 elements", for errors
  std::function<void(uint32_t tag)> run;
  std::shared_ptr<Work::State> work;
};

struct Group {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{};
  std::unique_ptr<gloo::rendezvous::Store> base_store;
  std::unique_ptr<gloo::rendezvous::Store> store;  // base_store's keys of this run
  std::string default_folder;  // the rendezvous folder when Kiln chose it (removed at the end)
  std::shared_ptr<gloo::rendezvous::Context> context;
  bool debug = false;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  bool stopping = false;
  std::string failure;  // the first collective's error: the group is unusable after it
  uint64_t issued = 0;  // collectives issued (the next one's sequence number)
  std::thread thread;

  void loop();
  std::string describe_failure(const Task& task, uint64_t seq, const std::exception& e);
};

// The process's group. Never destroyed at exit: its thread may be inside a collective that
// cannot be interrupted, and the process's end stops it anyway (destroy_process_group joins it).
std::mutex& g_mu = *new std::mutex;  // guards g_group's lifetime against concurrent collectives
std::shared_ptr<Group>& g_group = *new std::shared_ptr<Group>;

std::shared_ptr<Group> current(const char* api) {
  std::lock_guard lock(g_mu);
  KILN_CHECK(g_group != nullptr, Error, "kiln::distributed::", api,
             ": no process group: call kiln::distributed::init_process_group() first");
  return g_group;
}

std::string Group::describe_failure(const Task& task, uint64_t seq, const std::exception& e) {
  std::string msg = concat("kiln::distributed: ", task.what, " (collective #", seq,
                           ") failed on rank ", rank, " of ", size, ": ");
  const std::string what = e.what();
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr &&
      what.find("Timed out") == std::string::npos) {
    return msg +
           "a connection to another rank failed (that rank's process has probably exited "
           "or crashed, or ran out of data before this one: every rank must call the same "
           "collectives): " +
           what;
  }
  if (what.find("Timed out") == std::string::npos) return msg + what;
  // A timeout: find out which ranks reached this collective. Every rank that did times out
  // here too and leaves a mark in the store; the ranks without one did not arrive.
  msg += concat("timed out after ", timeout.count() / 1000.0, " s");
  std::vector<int> missing;
  try {
    store->set(concat("kiln/timeout/", seq, "/", rank), {'1'});
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      try {
        store->wait({concat("kiln/timeout/", seq, "/", r)}, std::chrono::seconds(3));
      } catch (const std::exception&) {
        missing.push_back(r);
      }
    }
  } catch (const std::exception&) {
    return msg + " (the store could not be asked which ranks arrived): " + what;
  }
  if (missing.empty()) return msg + ": every rank reached it but the data did not arrive: " + what;
  msg += "; ranks that did not arrive at it: ";
  for (size_t i = 0; i < missing.size(); ++i) msg += (i ? ", " : "") + std::to_string(missing[i]);
  return msg + " (still busy, e.g. compiling, stuck, or calling other collectives)";
}

void Group::loop() {
  for (;;) {
    Task task;
    uint64_t seq = 0;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      task = std::move(queue.front());
      queue.pop_front();
      seq = task.work->seq;
    }
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    {
      std::lock_guard lock(mu);
      error = failure;
    }
    if (!error.empty()) {
      error = concat("kiln::distributed: ", task.what,
                     " not run: the process group failed "
                     "earlier: ",
                     error);
    } else {
      try {
        task.run(static_cast<uint32_t>(seq));
      } catch (const Error& e) {
        error = e.what();
      } catch (const std::exception& e) {
        error = describe_failure(task, seq, e);
        std::lock_guard lock(mu);
        if (failure.empty()) failure = error;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    task.work->finish(error, seconds);
  }
}

// ---- tensors ----
void check_tensor(const char* api, const Tensor& t) {
  KILN_CHECK(t.defined(), ValueError, "kiln::distributed::", api, ": the tensor is undefined");
  KILN_CHECK(t.is_contiguous(), ValueError, "kiln::distributed::", api, ": the tensor (shape ",
             t.shape_str(), ") must be contiguous");
  KILN_CHECK(!t.requires_grad(), ValueError, "kiln::distributed::", api, ": the tensor (shape ",
             t.shape_str(),
             ") requires grad; collectives are not differentiable (pass a "
             "detached tensor, e.g. param.detach() or param.grad())");
  KILN_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::Float64 ||
                 t.dtype() == DType::Int32 || t.dtype() == DType::Int64,
             ValueError, "kiln::distributed::", api, ": dtype ", t.dtype(),
             " is not supported (float32, float64, int32, int64)");
}

template <class F>
void with_element_type(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32:
      f(float{});
      break;
    case DType::Float64:
      f(double{});
      break;
    case DType::Int32:
      f(int32_t{});
      break;
    case DType::Int64:
      f(int64_t{});
      break;
    default:
      break;  // check_tensor refused it
  }
}

// What a collective is, as the ranks compare it in debug mode and errors name it: kind 0
// all_reduce (a = the ReduceOp, 5 = avg sent as float16), 1 broadcast (a = src), 2 all_gather,
// 3 barrier; the dtype and element count.
struct Fingerprint {
  int64_t kind = 3, a = 0, dtype = 0, count = 0;
  std::array<int64_t, 4> values() const { return {kind, a, dtype, count}; }
  std::string str() const {
    static constexpr const char* kOps[] = {"sum", "avg", "product",
                                           "min", "max", "avg, sent as float16"};
    const std::string elements =
        concat(count, " ",
               dtype >= 0 && dtype < kNumDTypes ? dtype_info(static_cast<DType>(dtype)).name : "?",
               " elements");
    switch (kind) {
      case 0:
        return concat("all_reduce (", a >= 0 && a < 6 ? kOps[a] : "?", ") of ", elements);
      case 1:
        return concat("broadcast from rank ", a, " of ", elements);
      case 2:
        return concat("all_gather of ", elements);
      case 3:
        return "barrier";
      default:
        return "an unknown collective";
    }
  }
};

// Debug mode: the ranks exchange the fingerprints of collective #tag and fail, every one, when
// they differ.
void check_fingerprint(Group& g, uint32_t tag, const Fingerprint& fp) {
  const std::array<int64_t, 4> v = fp.values();
  const std::array<int64_t, 5> mine{static_cast<int64_t>(tag), v[0], v[1], v[2], v[3]};
  std::vector<int64_t> all(mine.size() * g.size);
  gloo::AllgatherOptions opts(g.context);
  opts.setInput(const_cast<int64_t*>(mine.data()), mine.size());
  opts.setOutput(all.data(), all.size());
  opts.setTag(tag | 0x80000000u);
  opts.setTimeout(g.timeout);
  gloo::allgather(opts);
  std::string diff;
  for (int r = 0; r < g.size; ++r) {
    const int64_t* theirs = all.data() + r * mine.size();
    if (std::equal(mine.begin(), mine.end(), theirs)) continue;
    diff += concat("\n  rank ", r, " called ",
                   Fingerprint{theirs[1], theirs[2], theirs[3], theirs[4]}.str(),
                   " as collective #", theirs[0]);
  }
  KILN_CHECK(diff.empty(), Error,
             "kiln::distributed: mismatched collectives (KILN_DISTRIBUTED_DEBUG): rank ", g.rank,
             " called ", fp.str(), " as collective #", tag, diff,
             "\nEvery rank must call the same collectives in the same order, with tensors of the "
             "same dtype and size");
}

// Queues `run` on the communication thread (after the debug-mode fingerprint check).
Work enqueue(const char* api, const Fingerprint& fp, int64_t bytes,
             std::function<void(Group&, uint32_t)> run) {
  std::shared_ptr<Group> g = current(api);
  Work work;
  auto state = std::make_shared<Work::State>();
  state->bytes = bytes;
  {
    std::lock_guard lock(g->mu);
    state->seq = g->issued++;
    g->queue.push_back(Task{fp.str(),
                            [g = g.get(), fp, run = std::move(run)](uint32_t tag) {
                              if (g->debug) check_fingerprint(*g, tag, fp);
                              run(*g, tag);
                            },
                            state});
  }
  g->cv.notify_one();
  WorkAccess::set(work, std::move(state));
  return work;
}

int64_t dtype_code(DType dt) { return static_cast<int64_t>(dt); }
}  // namespace

// ---- Work ----
void Work::State::finish(std::string err, double secs) {
  {
    std::lock_guard lock(mu);
    error = std::move(err);
    seconds = secs;
    done = true;
  }
  cv.notify_all();
}
void Work::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  KILN_CHECK(state_->error.empty(), Error, state_->error);
}
bool Work::is_completed() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}
int64_t Work::bytes() const { return state_ ? state_->bytes : 0; }
double Work::seconds() const {
  if (!state_) return 0;
  std::lock_guard lock(state_->mu);
  return state_->seconds;
}

// ---- the group's lifetime ----
void init_process_group(const std::string& backend, const InitOptions& options) {
  KILN_CHECK(backend == "gloo", ValueError, "init_process_group: backend '", backend,
             "' is not available; Kiln runs collectives on CPU tensors with \"gloo\"");
  {
    std::lock_guard lock(g_mu);
    KILN_CHECK(g_group == nullptr, Error,
               "init_process_group: this process has joined a group already (call "
               "destroy_process_group() first)");
  }
  auto g = std::make_shared<Group>();
  std::optional<int> rank = options.rank ? options.rank : env_int("RANK");
  if (!rank) rank = env_int("OMPI_COMM_WORLD_RANK");
  std::optional<int> size = options.world_size ? options.world_size : env_int("WORLD_SIZE");
  if (!size) size = env_int("OMPI_COMM_WORLD_SIZE");
  KILN_CHECK(rank && size, ValueError,
             "init_process_group: the rank and world size are not set: start the processes with "
             "`kiln launch --nproc-per-node N -- program` (or torchrun/mpirun, which set RANK and "
             "WORLD_SIZE / OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE), or pass them in "
             "InitOptions");
  KILN_CHECK(*size >= 1 && *rank < *size, ValueError, "init_process_group: rank ", *rank,
             " is not below the world size ", *size);
  KILN_CHECK(options.timeout.count() > 0, ValueError,
             "init_process_group: the timeout must be positive");
  g->rank = *rank;
  g->size = *size;
  g->timeout = options.timeout;
  g->debug = debug_checks_enabled();
  const std::string url = rendezvous_url(options);
  std::shared_ptr<gloo::transport::Device> device = open_device(url);
  g->base_store = open_store(url);
  if (options.rendezvous.empty() && env_str("KILN_RENDEZVOUS").empty() &&
      env_str("KILN_RENDEZVOUS_DIR").empty() && url.starts_with("file://"))
    g->default_folder = url.substr(7);
  // A run id keeps the keys of one run apart from a folder or redis another run used.
  g->store = std::make_unique<gloo::rendezvous::PrefixStore>(env_str("KILN_RUN_ID", "kiln"),
                                                             *g->base_store);
  g->context = std::make_shared<gloo::rendezvous::Context>(g->rank, g->size);
  g->context->setTimeout(options.timeout);
  try {
    g->context->connectFullMesh(*g->store, device);
  } catch (const std::exception& e) {
    throw Error(concat("init_process_group: rank ", g->rank, " of ", g->size,
                       " could not connect to the others through ", url, ": ", e.what()));
  }
  g->thread = std::thread([raw = g.get()] { raw->loop(); });
  std::lock_guard lock(g_mu);
  g_group = std::move(g);
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  return g_group != nullptr;
}
int get_rank() {
  std::lock_guard lock(g_mu);
  return g_group ? g_group->rank : 0;
}
int get_world_size() {
  std::lock_guard lock(g_mu);
  return g_group ? g_group->size : 1;
}

void destroy_process_group() {
  std::shared_ptr<Group> g;
  {
    std::lock_guard lock(g_mu);
    g = g_group;
  }
  if (!g) return;
  // The folder Kiln chose holds this run's addresses: rank 0 removes it once every rank is
  // done with it, so that the next run there does not read them.
  bool clean = !g->default_folder.empty() && g->rank == 0;
  if (!g->default_folder.empty()) {
    try {
      barrier();
    } catch (const Error&) {
      clean = false;  // a rank is gone: leave the folder to the others
    }
  }
  {
    std::lock_guard lock(g_mu);
    g_group.reset();
  }
  {
    std::lock_guard lock(g->mu);
    g->stopping = true;
  }
  g->cv.notify_all();
  g->thread.join();
  if (clean) {
    std::error_code ec;
    std::filesystem::remove_all(g->default_folder, ec);
  }
}

bool debug_checks_enabled() {
  const char* v = std::getenv("KILN_DISTRIBUTED_DEBUG");
  return v && std::strcmp(v, "1") == 0;
}

// ---- collectives ----
Work all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor);
  KILN_CHECK(op != ReduceOp::Avg || is_floating(tensor.dtype()), ValueError,
             "kiln::distributed::all_reduce: ReduceOp::Avg needs a floating tensor, got ",
             tensor.dtype());
  void* data = tensor.data_ptr();  // materialises a pending tensor on the caller's thread
  tensor.impl()->storage()->bump_version();
  const size_t n = static_cast<size_t>(tensor.numel());
  const DType dt = tensor.dtype();
  const Fingerprint fp{0, static_cast<int64_t>(op), dtype_code(dt), static_cast<int64_t>(n)};
  return enqueue("all_reduce", fp, static_cast<int64_t>(n) * itemsize(dt),
                 [tensor, data, n, dt, op](Group& g, uint32_t tag) {
                   if (g.size == 1) return;
                   with_element_type(dt, [&]<class T>(T) {
                     T* p = static_cast<T*>(data);
                     // Avg divides first, then sums (DDP's order: no overflow however many ranks).
                     if constexpr (std::is_floating_point_v<T>)
                       if (op == ReduceOp::Avg)
                         for (size_t i = 0; i < n; ++i) p[i] /= static_cast<T>(g.size);
                     {
                       gloo::AllreduceOptions opts(g.context);
                       opts.setOutput(p, n);
                       opts.setTag(tag);
                       opts.setTimeout(g.timeout);
                       using Fn = void (*)(void*, const void*, const void*, size_t);
                       switch (op) {
                         case ReduceOp::Sum:
                         case ReduceOp::Avg:
                           opts.setReduceFunction(static_cast<Fn>(&gloo::sum<T>));
                           break;
                         case ReduceOp::Product:
                           opts.setReduceFunction(static_cast<Fn>(&gloo::product<T>));
                           break;
                         case ReduceOp::Min:
                           opts.setReduceFunction(static_cast<Fn>(&gloo::min<T>));
                           break;
                         case ReduceOp::Max:
                           opts.setReduceFunction(static_cast<Fn>(&gloo::max<T>));
                           break;
                       }
                       gloo::allreduce(opts);
                     }
                   });
                 });
}
void all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }

Work all_reduce_fp16_async(const Tensor& tensor) {
  check_tensor("all_reduce_fp16", tensor);
  KILN_CHECK(tensor.dtype() == DType::Float32, ValueError,
             "kiln::distributed::all_reduce_fp16: the tensor must be float32, got ",
             tensor.dtype());
  float* data = tensor.data_ptr<float>();
  tensor.impl()->storage()->bump_version();
  const size_t n = static_cast<size_t>(tensor.numel());
  const Fingerprint fp{0, 5, dtype_code(DType::Float32), static_cast<int64_t>(n)};
  return enqueue("all_reduce_fp16", fp, static_cast<int64_t>(n) * 2,
                 [tensor, data, n](Group& g, uint32_t tag) {
                   if (g.size == 1) return;
                   std::vector<gloo::float16> half(n);
                   const float scale = 1.0f / static_cast<float>(g.size);
                   for (size_t i = 0; i < n; ++i)
                     half[i] = gloo::cpu_float2half_rn(data[i] * scale);
                   gloo::AllreduceOptions opts(g.context);
                   opts.setOutput(half.data(), n);
                   opts.setTag(tag);
                   opts.setTimeout(g.timeout);
                   using Fn = void (*)(void*, const void*, const void*, size_t);
                   opts.setReduceFunction(static_cast<Fn>(&gloo::sum<gloo::float16>));
                   gloo::allreduce(opts);
                   for (size_t i = 0; i < n; ++i) data[i] = gloo::cpu_half2float(half[i]);
                 });
}

Work broadcast_async(const Tensor& tensor, int src) {
  check_tensor("broadcast", tensor);
  const int size = get_world_size();
  KILN_CHECK(src >= 0 && src < size, ValueError, "kiln::distributed::broadcast: src ", src,
             " is not a rank of the group (world size ", size, ")");
  void* data = tensor.data_ptr();
  tensor.impl()->storage()->bump_version();
  const size_t n = static_cast<size_t>(tensor.numel());
  const size_t bytes = n * static_cast<size_t>(tensor.element_size());
  const Fingerprint fp{1, src, dtype_code(tensor.dtype()), static_cast<int64_t>(n)};
  return enqueue("broadcast", fp, static_cast<int64_t>(bytes),
                 [tensor, data, bytes, src](Group& g, uint32_t tag) {
                   if (g.size == 1) return;
                   gloo::BroadcastOptions opts(g.context);
                   opts.setOutput(static_cast<char*>(data), bytes);
                   opts.setRoot(src);
                   opts.setTag(tag);
                   opts.setTimeout(g.timeout);
                   gloo::broadcast(opts);
                 });
}
void broadcast(const Tensor& tensor, int src) { broadcast_async(tensor, src).wait(); }

void all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_tensor("all_gather", input);
  const int size = get_world_size();
  KILN_CHECK(static_cast<int>(outputs.size()) == size, ValueError,
             "kiln::distributed::all_gather: outputs holds ", outputs.size(),
             " tensors but the world size is ", size);
  for (Tensor& out : outputs) {
    check_tensor("all_gather", out);
    KILN_CHECK(out.sizes() == input.sizes() && out.dtype() == input.dtype(), ValueError,
               "kiln::distributed::all_gather: an output has shape ", out.shape_str(),
               " and dtype ", out.dtype(), " but the input has shape ", input.shape_str(),
               " and dtype ", input.dtype());
  }
  const size_t bytes = static_cast<size_t>(input.numel() * input.element_size());
  const void* in = input.data_ptr();
  std::vector<void*> outs;
  for (Tensor& out : outputs) {
    outs.push_back(out.data_ptr());
    out.impl()->storage()->bump_version();
  }
  const Fingerprint fp{2, 0, dtype_code(input.dtype()), input.numel()};
  enqueue("all_gather", fp, static_cast<int64_t>(bytes),
          [input, outputs, in, outs, bytes](Group& g, uint32_t tag) {
            std::vector<char> gathered(bytes * g.size);
            if (g.size == 1) {
              std::memcpy(gathered.data(), in, bytes);
            } else {
              gloo::AllgatherOptions opts(g.context);
              opts.setInput(static_cast<char*>(const_cast<void*>(in)), bytes);
              opts.setOutput(gathered.data(), gathered.size());
              opts.setTag(tag);
              opts.setTimeout(g.timeout);
              gloo::allgather(opts);
            }
            for (size_t r = 0; r < outs.size(); ++r)
              std::memcpy(outs[r], gathered.data() + r * bytes, bytes);
          })
      .wait();
}

void barrier() {
  enqueue("barrier", Fingerprint{}, 0, [](Group& g, uint32_t tag) {
    if (g.size == 1) return;
    gloo::BarrierOptions opts(g.context);
    opts.setTag(tag);
    opts.setTimeout(g.timeout);
    gloo::barrier(opts);
  }).wait();
}

}  // namespace kiln::distributed
