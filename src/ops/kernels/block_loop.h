// The strided block loop under every pointwise kernel, eager (kernels/loops.h) and generated
// (the inductor backend's runtime header): it walks an iteration space in blocks of up to kBlock
// contiguous elements, split across OpenMP threads above a grain. Depends only on OpenMP and
// the standard library, so generated code can include it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

namespace kiln::kernels {

inline constexpr int64_t kBlock = 512;  // elements per contiguous block
inline constexpr int kMaxDims = 64;     // dims after coalescing (more are not mergeable)
// Generated kernels whose innermost range is shorter run in their own loop
// (inductor_rt::short_run_loop): per run, this loop's bookkeeping would cost more than the body.
inline constexpr int64_t kShortRun = 256;

// Splits [0, n) across the OpenMP threads when n is large; f(begin, end) per piece.
template <typename F>
void parallel_range(int64_t n, int64_t grain, F&& f) {
  if (n <= grain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = tid * chunk, e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

// Whether index idx (nd dims, innermost first) lies inside a window's bounds lo_hi (lo, hi per
// dim) in every dim but the innermost (a run along it is split at the window's edges instead).
inline bool inside_window_outer(const int64_t* lo_hi, const int64_t* idx, int nd) {
  for (int d = 1; d < nd; ++d)
    if (idx[d] < lo_hi[2 * d] || idx[d] >= lo_hi[2 * d + 1]) return false;
  return true;
}

// Calls f.template operator()<U>() with U the unsigned integer of isz bytes (1, 2, 4 or 8):
// copies of elements by their bits, whatever their dtype.
template <class F>
inline void with_element_bits(int64_t isz, F&& f) {
  switch (isz) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

inline void strided_copy(char* dst, int64_t dst_stride, const char* src, int64_t src_stride,
                         int64_t n, int64_t isz) {
  with_element_bits(isz, [&]<typename T>() {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(dst + i * dst_stride) =
          *reinterpret_cast<const T*>(src + i * src_stride);
  });
}

// n copies of the element at src (an operand broadcast along the run) into dst.
inline void broadcast_fill(char* dst, const char* src, int64_t n, int64_t isz) {
  with_element_bits(isz, [&]<typename T>() {
    std::fill_n(reinterpret_cast<T*>(dst), n, *reinterpret_cast<const T*>(src));
  });
}

// Whether operand k of a launch `shape` (block_loop_any's) is laid out contiguously over the
// whole iteration space (element size isz).
inline bool contiguous_over_all(const int64_t* shape, size_t k, int64_t isz) {
  const int64_t nd = shape[1];
  const int64_t* sizes = shape + 2;
  const int64_t* strides = sizes + nd + static_cast<int64_t>(k) * nd;
  int64_t step = isz;
  for (int64_t d = 0; d < nd; step *= sizes[d], ++d)
    if (strides[d] != step) return false;
  return true;
}

// Whether block_loop_any makes its blocks span several runs (see there) for this launch, whose
// first num_out operands are outputs: runs of at most kBlock / 4 elements, outputs laid out
// contiguously, no windows and no scalar inputs. Generated code asks it too, to pick its loop.
inline bool blocks_span_runs(const int64_t* shape, const int64_t* isz, size_t num_out, bool windows,
                             uint64_t scalar_inputs) {
  if (windows || scalar_inputs != 0 || shape[1] < 2 || shape[2] * 4 > kBlock) return false;
  for (size_t k = 0; k < num_out; ++k)
    if (!contiguous_over_all(shape, k, isz[k])) return false;
  return true;
}

// The loop over a strided iteration space that eager pointwise kernels and generated kernels
// share. `shape` = {numel, nd, sizes[nd] innermost first (coalesced), then per operand its byte
// strides[nd]}. Operands [0, num_outputs) are written (outputs), the rest read. body(p, n) gets
// a pointer per operand to n contiguous elements (an input read with another stride arrives
// gathered into a block buffer, a broadcast one filled; an output is scattered after the body
// when not contiguous). The operand count is a runtime value, so that one compiled copy of this
// loop (in libkiln) serves every generated kernel. A body taking a third argument also gets the
// flat index (row-major over the iteration space) of the block's first element.
//
// `windows` (generated code's pad and cat, read as index arithmetic; null: none) says, per
// operand k, windows[k * (1 + 2 * nd)] = -2: an ordinary operand; else the operand holds
// elements only where lo[d] <= idx[d] < hi[d] in every dim d (the nd pairs lo, hi that follow)
// and elsewhere reads operand windows[...] (a later operand: a cat's next piece, resolved the
// same way) or, when that is -1, `fills[k]` (kBlock elements of a fill value). Runs along the
// innermost dim are split at the windows' edges, so a block is wholly inside or outside each.
//
// `scalar_inputs` (generated code's broadcast operands, a bit per operand): an operand whose
// bit is set has byte stride 0 along the innermost dim, and its pointer is to its one element,
// not to a filled block (the body broadcasts it into a register once per block).
template <class Body>
void block_loop_any(size_t num_operands, size_t num_outputs, const int64_t* shape,
                    char* const* base, const int64_t* isz, int64_t grain, Body&& body,
                    const int64_t* windows = nullptr, char* const* fills = nullptr,
                    uint64_t scalar_inputs = 0) {
  constexpr size_t kMaxOperands = 64;  // more would not fit the pointer arrays below
  constexpr size_t kStackOperands = 16;
  const size_t N = num_operands;
  if (N > kMaxOperands) std::abort();  // the scheduler never forms such a kernel
  const int64_t numel = shape[0];
  const int nd = static_cast<int>(shape[1]);
  const int64_t* sizes = shape + 2;
  const int64_t* st[kMaxOperands];  // st[k][d]: operand k's byte stride in dim d
  for (size_t k = 0; k < N; ++k) st[k] = shape + 2 + nd + static_cast<int64_t>(k) * nd;
  if (numel == 0) return;
  // Operand offsets follow the index like an odometer: a run of n elements moves operand k's
  // byte offset by n * inner_stride[k]; when dim d wraps to 0 and dim d + 1 steps, it changes by
  // wrap[d * N + k]. Both laid out by operand, computed once: recomputing each offset from the
  // index (through the per-operand stride rows, which compilers vectorise into gathers) cost
  // more than a short run's body, and innermost runs of 32 elements are common (attention heads).
  constexpr size_t kStackWraps = 256;
  int64_t stack_wraps[kStackWraps];
  std::unique_ptr<int64_t[]> heap_wraps;
  int64_t* wrap = stack_wraps;
  if (N * static_cast<size_t>(nd) > kStackWraps) {
    heap_wraps.reset(new int64_t[N * static_cast<size_t>(nd)]);
    wrap = heap_wraps.get();
  }
  int64_t inner_stride[kMaxOperands];
  for (size_t k = 0; k < N; ++k) {
    inner_stride[k] = st[k][0];
    // (The renderer marks only operands it saw broadcast along the run: a mark on any other
    // would read one element for the whole block.)
    if ((scalar_inputs >> k & 1) && (st[k][0] != 0 || k < num_outputs)) std::abort();
    for (int d = 0; d + 1 < nd; ++d)
      wrap[static_cast<size_t>(d) * N + k] = st[k][d + 1] - sizes[d] * st[k][d];
  }
  // Short runs (a per-channel operand over [N, C, 2, 2]: runs of 4) make blocks span several
  // runs: otherwise each run of a few elements is its own block, and the bookkeeping and the
  // body's call per run cost ~25 ns (x * s on [16, 512, 2, 2] took 60x x * y's time). Outputs and
  // the inputs laid out contiguously over the whole iteration space are read in place; the
  // others are gathered (filled, for a broadcast) run by run into their block buffers. Not with
  // windows or operands the body reads as one element (their values differ run to run).
  const bool span_runs =
      blocks_span_runs(shape, isz, num_outputs, windows != nullptr, scalar_inputs);
  bool whole[kMaxOperands];  // contiguous over the whole iteration space
  for (size_t k = 0; k < N && span_runs; ++k) whole[k] = contiguous_over_all(shape, k, isz[k]);
  parallel_range(numel, grain, [&](int64_t begin, int64_t end) {
    constexpr int64_t kBufferBytes = kBlock * 8;
    alignas(64) char stack_buffers[kStackOperands][kBufferBytes];
    std::unique_ptr<char[]> heap_buffers;
    char* buffers = &stack_buffers[0][0];
    if (N > kStackOperands) {
      heap_buffers.reset(new char[N * kBufferBytes + 64]);
      buffers = heap_buffers.get() + (64 - reinterpret_cast<uintptr_t>(heap_buffers.get()) % 64);
    }
    // (Only the first N entries of these arrays are used, and only they are initialised: zeroing
    // all of them cost more than a small kernel's body.)
    const char* filled_from[kMaxOperands];
    int64_t filled_n[kMaxOperands];
    bool outside[kMaxOperands];  // a windowed operand outside its window in this run
    for (size_t k = 0; k < N; ++k) {
      filled_from[k] = nullptr;
      filled_n[k] = 0;
      outside[k] = false;
    }
    int64_t idx[kMaxDims];
    idx[0] = 0;
    int64_t rem = begin;
    for (int d = 0; d < nd; ++d) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
    }
    // Byte offset of each operand's element at idx. (An integer, not a pointer: outside its
    // window an operand's offset may lie outside the tensor, and its row is never formed.)
    int64_t off[kMaxOperands];
    for (size_t k = 0; k < N; ++k) {
      off[k] = 0;
      for (int d = 0; d < nd; ++d) off[k] += idx[d] * st[k][d];
    }
    const int64_t inner = sizes[0];
    int64_t pos = begin;
    char* row[kMaxOperands];
    char* ptrs[kMaxOperands];
    const int64_t window_stride = 1 + 2 * static_cast<int64_t>(nd);
    // Moves the index and the offsets `count` steps along dim `from` (0: elements of the
    // current run; 1: whole runs, from a run's start), carrying into the dims above it.
    auto step = [&](int from, int64_t count) {
      pos += from == 0 ? count : count * inner;
      idx[from] += count;
      for (size_t k = 0; k < N; ++k) off[k] += count * st[k][from];
      for (int d = from; d + 1 < nd && idx[d] >= sizes[d]; ++d) {
        idx[d] = 0;
        ++idx[d + 1];
        const int64_t* w = wrap + static_cast<size_t>(d) * N;
        for (size_t k = 0; k < N; ++k) off[k] += w[k];
      }
    };
    while (span_runs && pos < end) {
      const int64_t first = pos;
      for (size_t k = 0; k < N; ++k)
        ptrs[k] = whole[k] ? base[k] + off[k] : buffers + k * kBufferBytes;
      int64_t n = 0;
      while (pos < end) {
        // Whole runs of one index of dim 1 at a time (each operand's run `r` at its offset +
        // r * its dim-1 stride); a partial run (a thread's first or last) alone.
        const int64_t runs =
            idx[0] == 0 ? std::min({(kBlock - n) / inner, (end - pos) / inner, sizes[1] - idx[1]})
                        : 0;
        const int64_t piece = runs > 0 ? runs * inner : std::min(inner - idx[0], end - pos);
        if (n + piece > kBlock) break;
        const int64_t count = runs > 0 ? runs : 1, length = runs > 0 ? inner : piece;
        for (size_t k = num_outputs; k < N; ++k) {
          if (whole[k]) continue;
          const char* from = base[k] + off[k];
          const int64_t run_step = st[k][1], along = inner_stride[k];
          with_element_bits(isz[k], [&]<typename T>() {
            T* to = reinterpret_cast<T*>(ptrs[k]) + n;
            for (int64_t r = 0; r < count; ++r, to += length, from += run_step)
              if (along == 0)
                std::fill_n(to, length, *reinterpret_cast<const T*>(from));
              else
                for (int64_t j = 0; j < length; ++j)
                  to[j] = *reinterpret_cast<const T*>(from + j * along);
          });
        }
        n += piece;
        if (runs > 0)
          step(1, runs);
        else
          step(0, piece);
      }
      if constexpr (std::is_invocable_v<Body&, char* const*, int64_t, int64_t>)
        body(static_cast<char* const*>(ptrs), n, first);
      else
        body(static_cast<char* const*>(ptrs), n);
    }
    while (pos < end) {
      int64_t run = std::min(inner - idx[0], end - pos);
      // Whether windowed operand k is outside its window here; shortens the run to the next
      // edge along the innermost dim.
      auto outside_window = [&](size_t k) {
        const int64_t* w = windows + static_cast<int64_t>(k) * window_stride;
        if (w[0] == -2) return false;  // not windowed
        const int64_t* lo_hi = w + 1;
        const bool in = inside_window_outer(lo_hi, idx, nd);
        if (idx[0] < lo_hi[0]) {
          run = std::min(run, lo_hi[0] - idx[0]);
          return true;
        }
        if (idx[0] >= lo_hi[1]) return true;
        run = std::min(run, lo_hi[1] - idx[0]);
        return !in;
      };
      for (size_t k = 0; k < N; ++k) {
        // (Outside its window an operand's row is never formed: it may lie outside the tensor.)
        if (windows && (outside[k] = outside_window(k))) continue;
        row[k] = base[k] + off[k];
      }
      for (int64_t j = 0; j < run; j += kBlock) {
        const int64_t n = std::min(kBlock, run - j);
        // (Last operand first: a windowed operand outside its window takes a later one's block.)
        for (size_t k = N; k-- > 0;) {
          if (outside[k]) {
            const int64_t other = windows[static_cast<int64_t>(k) * window_stride];
            ptrs[k] = other >= 0 ? ptrs[other] : fills[k];
            continue;
          }
          char* p = row[k] + j * inner_stride[k];
          if (inner_stride[k] == isz[k] || (scalar_inputs >> k & 1)) {
            ptrs[k] = p;
            continue;
          }
          ptrs[k] = buffers + k * kBufferBytes;
          if (k < num_outputs) continue;  // outputs are scattered after the body
          if (inner_stride[k] == 0) {
            if (filled_from[k] != p || filled_n[k] < n) {
              broadcast_fill(ptrs[k], p, n, isz[k]);
              filled_from[k] = p;
              filled_n[k] = n;
            }
          } else {
            strided_copy(ptrs[k], isz[k], p, inner_stride[k], n, isz[k]);
          }
        }
        if constexpr (std::is_invocable_v<Body&, char* const*, int64_t, int64_t>)
          body(static_cast<char* const*>(ptrs), n, pos + j);
        else
          body(static_cast<char* const*>(ptrs), n);
        for (size_t k = 0; k < num_outputs; ++k)
          if (ptrs[k] != row[k] + j * inner_stride[k])
            strided_copy(row[k] + j * inner_stride[k], inner_stride[k], ptrs[k], isz[k], n, isz[k]);
      }
      step(0, run);
    }
  });
}

// The same with the operand counts known at compile time (eager kernels).
template <size_t N, size_t NOut, class Body>
void block_loop(const int64_t* shape, const std::array<char*, N>& base,
                const std::array<int64_t, N>& isz, int64_t grain, Body&& body) {
  block_loop_any(N, NOut, shape, base.data(), isz.data(), grain, std::forward<Body>(body));
}

}  // namespace kiln::kernels
