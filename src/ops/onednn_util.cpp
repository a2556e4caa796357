// What the oneDNN-backed ops share (see onednn_util.h).
#include "ops/onednn_util.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::ops::onednn {

using dnnl::memory;

bool enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KILN_ONEDNN");
    return !(env && std::string(env) == "0");
  }();
  return on;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

namespace {

// Per-thread scratch for the arguments held in oneDNN's chosen layouts: reused from call to
// call, so a large activation is not freshly allocated (and page-faulted) each time.
class Scratch {
 public:
  void* get(size_t slot, size_t bytes) {
    if (slots_.size() <= slot) slots_.resize(slot + 1);
    Slot& s = slots_[slot];
    if (s.bytes < bytes) {
      s.data.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      KILN_CHECK(s.data, Error, "oneDNN: out of memory for ", bytes, " bytes of oneDNN scratch");
      s.bytes = bytes;
    }
    return s.data.get();
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Slot {
    std::unique_ptr<char, Free> data;
    size_t bytes = 0;
  };
  std::vector<Slot> slots_;
};
}  // namespace

void* thread_scratch(size_t slot, size_t bytes) {
  thread_local Scratch scratch;
  return scratch.get(slot, bytes);
}

void execute(const dnnl::primitive& prim, const std::vector<Argument>& args) {
  dnnl::stream& stream = thread_stream();
  std::unordered_map<int, memory> bound;
  std::vector<std::pair<memory, memory>> write_back;  // (chosen, plain)
  for (size_t k = 0; k < args.size(); ++k) {
    const Argument& a = args[k];
    memory plain(a.plain, cpu_engine(), a.data);
    if (a.zeroed) std::memset(a.data, 0, a.plain.get_size());
    if (a.chosen == a.plain) {
      bound.emplace(a.id, plain);
      continue;
    }
    memory chosen(a.chosen, cpu_engine(), thread_scratch(k, a.chosen.get_size()));
    if (a.zeroed) std::memset(chosen.get_data_handle(), 0, a.chosen.get_size());
    if (a.output)
      write_back.emplace_back(chosen, plain);
    else
      dnnl::reorder(plain, chosen).execute(stream, plain, chosen);
    bound.emplace(a.id, chosen);
  }
  prim.execute(stream, bound);
  for (auto& [chosen, plain] : write_back)
    dnnl::reorder(chosen, plain).execute(stream, chosen, plain);
  stream.wait();
}

}  // namespace kiln::ops::onednn
