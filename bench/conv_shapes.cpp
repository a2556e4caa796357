// Kiln's float32 convolution forward (kiln::conv1d/2d through src/ops/conv_onednn.cpp: plain
// tensors in and out, reorders to oneDNN's layouts around the primitive) against oneDNN's
// primitive alone on data already in its chosen layouts (what oneDNN's own benchdnn times), shape
// by shape, alternating call by call. Not part of the build:
//
//   g++ -O2 -std=c++20 -Iinclude bench/conv_shapes.cpp -o /tmp/conv_shapes -ldnnl \
//       -Lbuild/release/src -lkiln -Wl,-rpath,$PWD/build/release/src
//   OMP_NUM_THREADS=2 /tmp/conv_shapes
//
// Prints per shape Kiln's median, the primitive's and their ratio, then oneDNN doing Kiln's whole
// job (plain NCHW tensors reordered into its layouts, the primitive, the output reordered back)
// and Kiln's ratio to that.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kiln/kiln.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  const char* name;
  int64_t n, c, h, o, k, stride, padding;
};

void compare(const Shape& s, int runs) {
  using namespace dnnl;
  using tag = memory::format_tag;
  const int64_t out = (s.h + 2 * s.padding - s.k) / s.stride + 1;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  const memory::dims src{s.n, s.c, s.h, s.h}, wei{s.o, s.c, s.k, s.k}, bias{s.o},
      dst{s.n, s.o, out, out}, strides{s.stride, s.stride}, dil{0, 0}, pad{s.padding, s.padding};
  auto any = [](const memory::dims& d) {
    return memory::desc(d, memory::data_type::f32, tag::any);
  };
  convolution_forward::desc desc(
      prop_kind::forward_training, algorithm::convolution_direct, any(src), any(wei),
      memory::desc(bias, memory::data_type::f32, tag::x), any(dst), strides, dil, pad, pad);
  convolution_forward::primitive_desc pd(desc, eng);
  memory m_src(pd.src_desc(), eng), m_wei(pd.weights_desc(), eng), m_bias(pd.bias_desc(), eng),
      m_dst(pd.dst_desc(), eng);
  convolution_forward conv(pd);
  const kiln::Tensor x = kiln::randn({s.n, s.c, s.h, s.h}), w = kiln::randn({s.o, s.c, s.k, s.k}),
                     b = kiln::randn({s.o});
  // oneDNN's operands hold the same values, reordered into its layouts (left uninitialised,
  // their garbage's denormals made some shapes ~25x slower).
  memory p_src({src, memory::data_type::f32, tag::nchw}, eng, x.data_ptr()),
      p_wei({wei, memory::data_type::f32, tag::oihw}, eng, w.data_ptr()),
      p_bias({bias, memory::data_type::f32, tag::x}, eng, b.data_ptr()),
      p_dst({dst, memory::data_type::f32, tag::nchw}, eng);
  reorder(p_src, m_src).execute(st, p_src, m_src);
  reorder(p_wei, m_wei).execute(st, p_wei, m_wei);
  reorder(p_bias, m_bias).execute(st, p_bias, m_bias);
  st.wait();
  // oneDNN doing Kiln's whole job: plain tensors reordered in, the primitive, the output
  // reordered out (pre-made reorder primitives, pre-allocated buffers).
  reorder to_src(p_src, m_src), to_wei(p_wei, m_wei), from_dst(m_dst, p_dst);
  auto plain_job = [&] {
    to_src.execute(st, p_src, m_src);
    to_wei.execute(st, p_wei, m_wei);
    conv.execute(st, {{DNNL_ARG_SRC, m_src},
                      {DNNL_ARG_WEIGHTS, m_wei},
                      {DNNL_ARG_BIAS, m_bias},
                      {DNNL_ARG_DST, m_dst}});
    from_dst.execute(st, m_dst, p_dst);
    st.wait();
  };
  std::vector<double> kiln_ms, onednn_ms, plain_ms;
  for (int r = 0; r < runs + 3; ++r) {
    double t0 = now_ms();
    kiln::Tensor y = kiln::conv2d(x, w, b, {s.stride}, {s.padding});
    const double t_kiln = now_ms() - t0;
    t0 = now_ms();
    conv.execute(st, {{DNNL_ARG_SRC, m_src},
                      {DNNL_ARG_WEIGHTS, m_wei},
                      {DNNL_ARG_BIAS, m_bias},
                      {DNNL_ARG_DST, m_dst}});
    st.wait();
    const double t_onednn = now_ms() - t0;
    t0 = now_ms();
    plain_job();
    const double t_plain = now_ms() - t0;
    if (r >= 3) {  // (the first calls build primitives and fault pages in)
      kiln_ms.push_back(t_kiln);
      onednn_ms.push_back(t_onednn);
      plain_ms.push_back(t_plain);
    }
  }
  const double k = median(kiln_ms), d = median(onednn_ms), p = median(plain_ms);
  std::printf(
      "| %s | [%ld, %ld, %ld, %ld] * [%ld, %ld, %ld, %ld] / %ld | %.3f | %.3f | %.2f | %.3f | "
      "%.2f |\n",
      s.name, s.n, s.c, s.h, s.h, s.o, s.c, s.k, s.k, s.stride, k, d, k / d, p, k / p);
}

}  // namespace

int main() {
  const Shape shapes[] = {
      {"W10 conv1", 64, 1, 28, 32, 3, 1, 0},        {"W10 conv2", 64, 32, 26, 64, 3, 1, 0},
      {"W9 stem", 16, 3, 64, 64, 7, 2, 3},          {"W9 layer1", 16, 64, 16, 64, 3, 1, 1},
      {"W9 layer2 down", 16, 64, 16, 128, 3, 2, 1}, {"W9 layer3", 16, 256, 4, 256, 3, 1, 1},
      {"W9 layer4", 16, 512, 2, 512, 3, 1, 1},
  };
  std::printf(
      "| shape | input * weight / stride | Kiln ms | oneDNN primitive ms | ratio | oneDNN with "
      "reorders ms | ratio |\n|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) compare(s, 21);
}
