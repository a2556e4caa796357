// What the oneDNN-backed ops share (conv_onednn.cpp, lstm_onednn.cpp): the CPU engine, a
// stream per thread, per-thread scratch for arguments held in oneDNN's chosen layouts, and
// running a primitive with those reorders.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <vector>

namespace kiln::ops::onednn {

// False when the environment variable KILN_ONEDNN is 0 (read once): the ops that have a Kiln
// composite (convolution, the LSTM layer) then run it instead, for comparisons.
bool enabled();

dnnl::engine& cpu_engine();
// Streams are not to be shared between threads that execute at once.
dnnl::stream& thread_stream();
// This thread's scratch buffer `slot`, at least `bytes` long (reused from call to call, so a
// large activation is not freshly allocated and page-faulted each time).
void* thread_scratch(size_t slot, size_t bytes);

// One argument of a primitive: the plain buffer Kiln holds and the layout oneDNN chose.
// `zeroed`: an output the primitive accumulates into (set to zero first).
struct Argument {
  int id;
  dnnl::memory::desc plain, chosen;
  void* data;
  bool output;
  bool zeroed = false;
};
// Runs `prim`, reordering each argument whose chosen layout is not its plain one into scratch
// (inputs, before) or out of it (outputs, after).
void execute(const dnnl::primitive& prim, const std::vector<Argument>& args);

}  // namespace kiln::ops::onednn
