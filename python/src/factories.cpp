// Tensor factories with torch's Python forms: sizes as varargs or one sequence, dtype=,
// requires_grad=, and kiln.tensor(data) inferring the dtype as torch does (Python floats are
// float32, ints int64, bools bool).
#include <nanobind/stl/optional.h>

#include "bindings.h"
#include "kiln/core/parallel.h"
#include "kiln/core/random.h"
#include "kiln/ops/factory.h"

namespace kiln::python {

namespace {

// `zeros(2, 3)` and `zeros((2, 3))` alike.
std::vector<int64_t> sizes_of(const nb::args& args, const char* what) {
  if (args.size() == 1 && !PyLong_Check(args[0].ptr())) return to_ints(args[0], what);
  return to_ints(args, what);
}

std::optional<DType> optional_dtype(nb::handle h, const char* what) {
  if (h.is_none()) return std::nullopt;
  return to_dtype(h, what);
}

Tensor finish(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// The shape and values of nested sequences of numbers.
struct Nested {
  std::vector<int64_t> sizes;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  bool any_float = false;
  bool all_bool = true;
  bool sized = false;
};

void walk(nb::handle h, size_t depth, Nested& out) {
  PyObject* o = h.ptr();
  if (PyList_Check(o) || PyTuple_Check(o)) {
    const int64_t n = static_cast<int64_t>(PySequence_Fast_GET_SIZE(o));
    if (!out.sized) {
      out.sizes.push_back(n);
    } else {
      KILN_CHECK(depth < out.sizes.size() && out.sizes[depth] == n, ValueError,
                 "kiln.tensor(): the nested sequences are ragged (expected length ",
                 depth < out.sizes.size() ? out.sizes[depth] : 0, " at depth ", depth, ", got ", n,
                 ")");
    }
    if (n == 0) out.sized = true;
    PyObject** items = PySequence_Fast_ITEMS(o);
    for (int64_t k = 0; k < n; ++k) walk(items[k], depth + 1, out);
    return;
  }
  if (!out.sized) out.sized = true;
  KILN_CHECK(depth == out.sizes.size(), ValueError,
             "kiln.tensor(): the nested sequences are ragged (a number at depth ", depth, ")");
  if (const Tensor* t = as_tensor(h)) {
    KILN_CHECK(t->numel() == 1, ValueError,
               "kiln.tensor(): only one-element tensors can be elements of a sequence");
  }
  const Scalar s = to_scalar(h, "kiln.tensor(): an element");
  if (!s.is_bool()) out.all_bool = false;
  if (s.is_floating()) out.any_float = true;
  out.floats.push_back(s.to_double());
  out.ints.push_back(s.to_int());
}

Tensor tensor_from_data(nb::handle data, std::optional<DType> dtype) {
  if (const Tensor* t = as_tensor(data)) return t->detach().to(dtype.value_or(t->dtype())).clone();
  if (PyObject_HasAttrString(data.ptr(), "__array_interface__")) {
    Tensor shared = to_operand(data, "kiln.tensor(): data");
    return shared.to(dtype.value_or(shared.dtype())).clone();
  }
  Nested nested;
  walk(data, 0, nested);
  const DType dt = dtype.value_or(nested.any_float                          ? kDefaultFloat
                                  : nested.all_bool && !nested.ints.empty() ? DType::Bool
                                                                            : DType::Int64);
  Tensor t = make_tensor(nested.sizes, dt);
  const size_t n = nested.floats.size();
  void* p = t.data_ptr();
  switch (dt) {
    case DType::Bool:
      for (size_t k = 0; k < n; ++k) static_cast<bool*>(p)[k] = nested.floats[k] != 0;
      break;
    case DType::Int32:
      for (size_t k = 0; k < n; ++k)
        static_cast<int32_t*>(p)[k] = static_cast<int32_t>(nested.ints[k]);
      break;
    case DType::Int64:
      for (size_t k = 0; k < n; ++k) static_cast<int64_t*>(p)[k] = nested.ints[k];
      break;
    case DType::Float32:
      for (size_t k = 0; k < n; ++k)
        static_cast<float*>(p)[k] = static_cast<float>(nested.floats[k]);
      break;
    case DType::Float64:
      for (size_t k = 0; k < n; ++k) static_cast<double*>(p)[k] = nested.floats[k];
      break;
  }
  return t;
}

}  // namespace

void bind_factories(nb::module_& m) {
  using Maker = Tensor (*)(IntList, DType);
  const auto sized = [&](const char* name, Maker make, const char* doc) {
    m.def(
        name,
        [make, name](nb::args size, nb::handle dtype, bool requires_grad) {
          const std::string what = std::string("kiln.") + name + "()";
          return finish(make(sizes_of(size, what.c_str()),
                             optional_dtype(dtype, "dtype").value_or(kDefaultFloat)),
                        requires_grad);
        },
        nb::arg("size"), nb::kw_only(), nb::arg("dtype").none() = nb::none(),
        nb::arg("requires_grad") = false, doc);
  };
  sized(
      "zeros", +[](IntList s, DType d) { return zeros(s, d); }, "A tensor of zeros.");
  sized(
      "ones", +[](IntList s, DType d) { return ones(s, d); }, "A tensor of ones.");
  sized(
      "empty", +[](IntList s, DType d) { return empty(s, d); },
      "A tensor whose values are not initialised.");
  sized(
      "rand", +[](IntList s, DType d) { return rand(s, d); },
      "Uniform random values in [0, 1) from the default generator.");
  sized(
      "randn", +[](IntList s, DType d) { return randn(s, d); },
      "Standard normal random values from the default generator.");
  m.def(
      "full",
      [](nb::handle size, nb::handle fill_value, nb::handle dtype, bool requires_grad) {
        return finish(
            full(to_ints(size, "kiln.full(): size"),
                 to_scalar(fill_value, "kiln.full(): fill_value"), optional_dtype(dtype, "dtype")),
            requires_grad);
      },
      nb::arg("size"), nb::arg("fill_value"), nb::kw_only(), nb::arg("dtype").none() = nb::none(),
      nb::arg("requires_grad") = false, "A tensor filled with one value.");
  m.def(
      "randint",
      [](nb::args args, nb::handle dtype) {
        // randint(high, size) or randint(low, high, size), as torch.
        KILN_CHECK(args.size() == 2 || args.size() == 3, ValueError,
                   "kiln.randint(): expected (high, size) or (low, high, size)");
        const int64_t low = args.size() == 3 ? to_int(args[0], "kiln.randint(): low") : 0;
        const int64_t high = to_int(args[args.size() - 2], "kiln.randint(): high");
        return randint(low, high, to_ints(args[args.size() - 1], "kiln.randint(): size"),
                       optional_dtype(dtype, "dtype").value_or(DType::Int64));
      },
      nb::arg("args"), nb::kw_only(), nb::arg("dtype").none() = nb::none(),
      "Random integers in [low, high) from the default generator.");
  m.def(
      "arange",
      [](nb::handle start, nb::handle end, nb::handle step, nb::handle dtype, bool requires_grad) {
        const std::optional<DType> dt = optional_dtype(dtype, "dtype");
        if (end.is_none())
          return finish(arange(to_scalar(start, "kiln.arange(): end"), dt), requires_grad);
        return finish(
            arange(to_scalar(start, "kiln.arange(): start"), to_scalar(end, "kiln.arange(): end"),
                   to_scalar(step, "kiln.arange(): step"), dt),
            requires_grad);
      },
      nb::arg("start"), nb::arg("end").none() = nb::none(), nb::arg("step") = 1, nb::kw_only(),
      nb::arg("dtype").none() = nb::none(), nb::arg("requires_grad") = false,
      "Values from start (default 0) up to end, step apart.");
  m.def(
      "linspace",
      [](double start, double end, int64_t steps, nb::handle dtype) {
        return linspace(start, end, steps, optional_dtype(dtype, "dtype").value_or(kDefaultFloat));
      },
      nb::arg("start"), nb::arg("end"), nb::arg("steps"), nb::kw_only(),
      nb::arg("dtype").none() = nb::none(), "steps values evenly spaced from start to end.");
  m.def(
      "eye",
      [](int64_t n, std::optional<int64_t> mcols, nb::handle dtype) {
        return eye(n, mcols, optional_dtype(dtype, "dtype").value_or(kDefaultFloat));
      },
      nb::arg("n"), nb::arg("m").none() = nb::none(), nb::kw_only(),
      nb::arg("dtype").none() = nb::none(), "The identity matrix (n x m).");
  const auto like = [&](const char* name, Tensor (*make)(const Tensor&, std::optional<DType>)) {
    m.def(
        name,
        [make](const Tensor& t, nb::handle dtype) {
          return make(t, optional_dtype(dtype, "dtype"));
        },
        nb::arg("input"), nb::kw_only(), nb::arg("dtype").none() = nb::none());
  };
  like("zeros_like", &zeros_like);
  like("ones_like", &ones_like);
  like("empty_like", &empty_like);
  m.def(
      "rand_like", [](const Tensor& t) { return rand_like(t); }, nb::arg("input"));
  m.def(
      "randn_like", [](const Tensor& t) { return randn_like(t); }, nb::arg("input"));
  m.def(
      "full_like",
      [](const Tensor& t, nb::handle value, nb::handle dtype) {
        return full_like(t, to_scalar(value, "fill_value"), optional_dtype(dtype, "dtype"));
      },
      nb::arg("input"), nb::arg("fill_value"), nb::kw_only(), nb::arg("dtype").none() = nb::none());
  m.def(
      "tensor",
      [](nb::handle data, nb::handle dtype, bool requires_grad) {
        return finish(tensor_from_data(data, optional_dtype(dtype, "dtype")), requires_grad);
      },
      nb::arg("data"), nb::kw_only(), nb::arg("dtype").none() = nb::none(),
      nb::arg("requires_grad") = false,
      "A new tensor holding a copy of data (nested sequences of numbers, an array, a tensor).");
  m.def(
      "manual_seed", [](uint64_t seed) { manual_seed(seed); }, nb::arg("seed"),
      "Seeds the default generator (every random op draws from it).");
  m.def("set_num_threads", &set_num_threads, nb::arg("n"),
        "Threads for ops and matrix products (OpenMP's and OpenBLAS's), as torch.set_num_threads.");
  m.def("get_num_threads", &get_num_threads, "The threads ops and products use.");
}

}  // namespace kiln::python
