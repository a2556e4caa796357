// Philox 4x32-10 and the random ops. Every draw is a pure function of (seed, offset, element
// index) — see docs/random.md — so generated code can reproduce eager's numbers bit for bit,
// and elements can be computed in parallel in any order.
#include <cmath>
#include <limits>

#include "kiln/core/random.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/philox.h"
#include "ops/op_utils.h"

namespace kiln {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  return kernels::philox(c, k);
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}
uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}
uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}
void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  offset_ = offset;
}
uint64_t Generator::advance(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t first = offset_;
  offset_ += n;
  return first;
}

Generator& default_generator() {
  static Generator* g = new Generator();
  return *g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace ops {
namespace {

// attrs of every random op end with [seed, offset] (the generator state the draw used).
uint64_t seed_of(const OpCall& c, size_t k) { return static_cast<uint64_t>(c.attrs.i(k)); }

// uniform: attrs [size, dtype, from, to, seed, offset]
int uniform_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(is_floating(c.attrs.dtype(1)), DTypeError, "uniform_: expected a floating dtype, got ",
             c.attrs.dtype(1));
  KILN_CHECK(c.attrs.f(2) <= c.attrs.f(3), ValueError,
             "uniform_: expects from <= to, got from=", c.attrs.f(2), " > to=", c.attrs.f(3));
  checked_numel(c.attrs.ints(0), "uniform_");
  return one_output(out, c.attrs.dtype(1), Shape(c.attrs.ints(0)));
}
void uniform_kernel(const OpCall& c, std::span<Tensor> outs) {
  const double from = c.attrs.f(2), to = c.attrs.f(3);
  const uint64_t seed = seed_of(c, 4), offset = seed_of(c, 5);
  KILN_DTYPE_SWITCH_FLOATING(outs[0].dtype(), "uniform_", [&]<typename T>() {
    T* o = outs[0].data_ptr<T>();
    kernels::parallel_range(outs[0].numel(), 4096, [&](int64_t b, int64_t e) {
      kernels::uniform_block(o + b, e - b, b, seed, offset, from, to);
    });
  });
}

// normal: attrs [size, dtype, mean, std, seed, offset]; Box-Muller (cosine branch).
int normal_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(is_floating(c.attrs.dtype(1)), DTypeError, "normal_: expected a floating dtype, got ",
             c.attrs.dtype(1));
  KILN_CHECK(c.attrs.f(3) >= 0, ValueError, "normal_: std must be non-negative, got ",
             c.attrs.f(3));
  checked_numel(c.attrs.ints(0), "normal_");
  return one_output(out, c.attrs.dtype(1), Shape(c.attrs.ints(0)));
}
void normal_kernel(const OpCall& c, std::span<Tensor> outs) {
  const double mean = c.attrs.f(2), stdev = c.attrs.f(3);
  const uint64_t seed = seed_of(c, 4), offset = seed_of(c, 5);
  KILN_DTYPE_SWITCH_FLOATING(outs[0].dtype(), "normal_", [&]<typename T>() {
    T* o = outs[0].data_ptr<T>();
    kernels::parallel_range(outs[0].numel(), 4096, [&](int64_t b, int64_t e) {
      kernels::normal_block(o + b, e - b, b, seed, offset, mean, stdev);
    });
  });
}

// randint: attrs [size, dtype, low, high, seed, offset]
int randint_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const int64_t low = c.attrs.i(2), high = c.attrs.i(3);
  KILN_CHECK(low < high, ValueError, "randint: expects low < high, got low=", low, ", high=", high);
  KILN_CHECK(c.attrs.dtype(1) != DType::Bool, DTypeError, "randint: dtype bool is not supported");
  if (c.attrs.dtype(1) == DType::Int32) {
    constexpr int64_t lo32 = std::numeric_limits<int32_t>::min();
    constexpr int64_t hi32 = std::numeric_limits<int32_t>::max();
    KILN_CHECK(low >= lo32 && high - 1 <= hi32, ValueError, "randint: [", low, ", ", high,
               ") is out of the range of dtype int32");
  }
  checked_numel(c.attrs.ints(0), "randint");
  return one_output(out, c.attrs.dtype(1), Shape(c.attrs.ints(0)));
}
void randint_kernel(const OpCall& c, std::span<Tensor> outs) {
  const int64_t low = c.attrs.i(2);
  // high - low in unsigned arithmetic: the full int64 span does not overflow.
  const uint64_t range = static_cast<uint64_t>(c.attrs.i(3)) - static_cast<uint64_t>(low);
  const uint64_t seed = seed_of(c, 4), offset = seed_of(c, 5);
  KILN_DTYPE_SWITCH_NUMERIC(outs[0].dtype(), "randint", [&]<typename T>() {
    T* o = outs[0].data_ptr<T>();
    kernels::parallel_range(outs[0].numel(), 4096, [&](int64_t b, int64_t e) {
      kernels::randint_block(o + b, e - b, b, seed, offset, low, range);
    });
  });
}

// bernoulli: input p (probabilities, any shape); attrs [seed, offset]. 1 where u53 < p.
int bernoulli_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(is_floating(c.in(0).dtype()), DTypeError,
             "bernoulli: probabilities must be floating, got ", c.in(0).dtype());
  return one_output(out, c.in(0).dtype(), c.in(0).sizes());
}
void bernoulli_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  const uint64_t seed = seed_of(c, 0), offset = seed_of(c, 1);
  Tensor p = c.in(0).contiguous();
  KILN_DTYPE_SWITCH_FLOATING(out.dtype(), "bernoulli", [&]<typename T>() {
    const T* pp = p.data_ptr<T>();
    for (int64_t i = 0; i < p.numel(); ++i)
      KILN_CHECK(pp[i] >= T(0) && pp[i] <= T(1), ValueError,
                 "bernoulli: probabilities must be in [0, 1], got ", pp[i], " at element ", i);
    T* o = out.data_ptr<T>();
    kernels::parallel_range(out.numel(), 4096, [&](int64_t b, int64_t e) {
      kernels::bernoulli_block(o + b, pp + b, e - b, b, seed, offset);
    });
  });
}

}  // namespace

const OpDef& uniform_op =
    register_op({.name = "uniform",
                 .schema = "uniform(int[] size, ScalarType dtype, float from, float to, int seed, "
                           "int offset) -> Tensor",
                 .kind = OpKind::Random,
                 .meta = uniform_meta,
                 .kernel = uniform_kernel,
                 .philox_attrs = {4, 5},
                 .internal = true});
const OpDef& normal_op =
    register_op({.name = "normal",
                 .schema = "normal(int[] size, ScalarType dtype, float mean, float std, int seed, "
                           "int offset) -> Tensor",
                 .kind = OpKind::Random,
                 .meta = normal_meta,
                 .kernel = normal_kernel,
                 .philox_attrs = {4, 5},
                 .internal = true});
const OpDef& randint_op = register_op(
    {.name = "randint",
     .schema =
         "randint(int[] size, ScalarType dtype, int low, int high, int seed, int offset) -> Tensor",
     .kind = OpKind::Random,
     .meta = randint_meta,
     .kernel = randint_kernel,
     .philox_attrs = {4, 5},
     .internal = true});
const OpDef& bernoulli_op =
    register_op({.name = "bernoulli",
                 .schema = "bernoulli(Tensor p, int seed, int offset) -> Tensor",
                 .kind = OpKind::Random,
                 .meta = bernoulli_meta,
                 .kernel = bernoulli_kernel,
                 .philox_attrs = {0, 1},
                 .internal = true});

}  // namespace ops

namespace {
Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }
// [seed, offset] for a draw of `n` elements, advancing the generator.
std::pair<int64_t, int64_t> reserve(Generator* g, IntList sizes, const char* op) {
  Generator& gen = gen_or_default(g);
  int64_t n = checked_numel(sizes, op);
  uint64_t offset = gen.advance(static_cast<uint64_t>(n));
  return {static_cast<int64_t>(gen.seed()), static_cast<int64_t>(offset)};
}
// Attrs [size, dtype, a, b, seed, offset] of a draw. The call is validated by the op's meta
// before counters are reserved, so an invalid call leaves the generator untouched.
Attrs draw_attrs(const OpDef& op, IntList sizes, DType dtype, AttrValue a, AttrValue b,
                 Generator* gen, const char* name) {
  // Sizes and dtype are checked under the name the user called (randn, not normal_).
  checked_numel(sizes, name);
  KILN_CHECK(&op == &ops::randint_op || is_floating(dtype), DTypeError, name,
             ": expected a floating dtype, got ", dtype);
  std::array<TensorMeta, kMaxOpOutputs> metas;
  const Attrs probe = {ops::ints_attr(sizes), dtype, a, b, int64_t{0}, int64_t{0}};
  op.meta(OpCall{op, {}, probe}, metas);
  auto [seed, offset] = reserve(gen, sizes, name);
  return {ops::ints_attr(sizes), dtype, std::move(a), std::move(b), seed, offset};
}
}  // namespace

Tensor rand(IntList sizes, DType dtype, Generator* gen) {
  const Attrs attrs = draw_attrs(ops::uniform_op, sizes, dtype, 0.0, 1.0, gen, "rand");
  return dispatch1(ops::uniform_op, {}, attrs);
}
Tensor randn(IntList sizes, DType dtype, Generator* gen) {
  const Attrs attrs = draw_attrs(ops::normal_op, sizes, dtype, 0.0, 1.0, gen, "randn");
  return dispatch1(ops::normal_op, {}, attrs);
}
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.sizes(), t.dtype(), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.sizes(), t.dtype(), gen); }
Tensor randint(int64_t low, int64_t high, IntList sizes, DType dtype, Generator* gen) {
  const Attrs attrs = draw_attrs(ops::randint_op, sizes, dtype, low, high, gen, "randint");
  return dispatch1(ops::randint_op, {}, attrs);
}
Tensor bernoulli(const Tensor& p, Generator* gen) {
  std::array<TensorMeta, kMaxOpOutputs> metas;
  const Attrs probe = {int64_t{0}, int64_t{0}};
  ops::bernoulli_op.meta(OpCall{ops::bernoulli_op, {&p, 1}, probe}, metas);  // validate first
  auto [seed, offset] = reserve(gen, p.sizes(), "bernoulli");
  return ops::call(ops::bernoulli_op, {p}, {seed, offset});
}
Tensor bernoulli(IntList sizes, double p, DType dtype, Generator* gen) {
  KILN_CHECK(p >= 0 && p <= 1, ValueError, "bernoulli: p must be in [0, 1], got ", p);
  checked_numel(sizes, "bernoulli");
  return bernoulli(full(sizes, p, dtype), gen);
}
Tensor& uniform_(Tensor& self, double from, double to, Generator* gen) {
  const Attrs attrs =
      draw_attrs(ops::uniform_op, self.sizes(), self.dtype(), from, to, gen, "uniform_");
  return dispatch_into(ops::uniform_op, {}, attrs, self);
}
Tensor& normal_(Tensor& self, double mean, double std, Generator* gen) {
  const Attrs attrs =
      draw_attrs(ops::normal_op, self.sizes(), self.dtype(), mean, std, gen, "normal_");
  return dispatch_into(ops::normal_op, {}, attrs, self);
}

// ---- Python-facing forms (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
const FunctionDef& uniform__function = register_function(
    {.schema = "uniform_(Tensor self, float from=0, float to=1) -> Tensor",
     .doc = "Fills self with uniform random values in [from, to) from the default generator.",
     .call = [](Args a) -> FunctionResult {
       Tensor self = a.tensor(0);
       return uniform_(self, a.f(1), a.f(2));
     }});
const FunctionDef& normal__function =
    register_function({.schema = "normal_(Tensor self, float mean=0, float std=1) -> Tensor",
                       .doc = "Fills self with normal random values from the default generator.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = a.tensor(0);
                         return normal_(self, a.f(1), a.f(2));
                       }});
const FunctionDef& bernoulli_function = register_function(
    {.schema = "bernoulli(Tensor self) -> Tensor",
     .doc = "1 with probability self (elementwise), else 0, from the default generator.",
     .call = [](Args a) -> FunctionResult { return bernoulli(a.tensor(0)); }});
}  // namespace

}  // namespace kiln
