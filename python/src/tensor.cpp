// kiln.Tensor: metadata, conversions, operators and indexing. The ops' own functions become
// methods in op_functions.cpp; what is here has a Python form an op schema does not give
// (operators, `x.size(1)`, `x.view(2, 3)` on composite C++ methods, indexing).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln::python {

namespace {

bool is_operand(nb::handle h) {
  return as_tensor(h) || is_number(h) || PyObject_HasAttrString(h.ptr(), "__array_interface__");
}

// A binary operator: NotImplemented for an operand it does not know (Python then tries the
// other operand's reflected operator), the GIL released while a large result is computed.
template <class F>
nb::object binary(const Tensor& self, nb::handle other, F&& fn) {
  if (!is_operand(other)) return nb::borrow(Py_NotImplemented);
  const Tensor o = to_operand(other, "operand");
  if (worth_releasing_gil(self.numel() + o.numel())) {
    Tensor result;
    {
      nb::gil_scoped_release unlocked;
      result = fn(self, o);
    }
    return tensor_to_python(std::move(result));
  }
  return tensor_to_python(fn(self, o));
}

template <class F>
nb::object in_place(nb::handle self_obj, nb::handle other, F&& fn) {
  Tensor& self = *nb::inst_ptr<Tensor>(self_obj);
  if (!is_operand(other)) return nb::borrow(Py_NotImplemented);
  const Tensor o = to_operand(other, "operand");
  if (worth_releasing_gil(self.numel())) {
    nb::gil_scoped_release unlocked;
    fn(self, o);
  } else {
    fn(self, o);
  }
  return nb::borrow(self_obj);
}

nb::object element(const void* p, DType dt) {
  switch (dt) {
    case DType::Bool:
      return nb::bool_(*static_cast<const bool*>(p));
    case DType::Int32:
      return nb::int_(*static_cast<const int32_t*>(p));
    case DType::Int64:
      return nb::int_(*static_cast<const int64_t*>(p));
    case DType::Float32:
      return nb::float_(*static_cast<const float*>(p));
    case DType::Float64:
      return nb::float_(*static_cast<const double*>(p));
  }
  return nb::none();
}

nb::object to_list(const char* data, const Shape& sizes, DType dt, size_t dim) {
  if (dim == sizes.size()) return element(data, dt);
  const int64_t n = sizes[dim];
  int64_t step = itemsize(dt);
  for (size_t k = dim + 1; k < sizes.size(); ++k) step *= sizes[k];
  nb::list out;
  for (int64_t i = 0; i < n; ++i) out.append(to_list(data + i * step, sizes, dt, dim + 1));
  return out;
}

// ---- indexing ----

// One item of an index: what x[...] does along the dims it reaches.
Tensor index_tensor_item(const Tensor& index, const char* what) {
  if (index.dtype() == DType::Bool) return index;
  KILN_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, IndexError, what,
             ": tensors used as indices must be integer or bool tensors, not ", index.dtype());
  return index;
}

Tensor index(const Tensor& self, nb::handle key) {
  const char* what = "Tensor.__getitem__";
  nb::tuple items = PyTuple_Check(key.ptr()) ? nb::borrow<nb::tuple>(key) : nb::make_tuple(key);
  // Dims the items consume (an Ellipsis stands for the rest).
  int64_t consumed = 0;
  int ellipses = 0;
  for (nb::handle item : items) {
    if (item.ptr() == Py_Ellipsis) {
      ++ellipses;
    } else if (item.is_none()) {
    } else if (const Tensor* t = as_tensor(item); t && t->dtype() == DType::Bool) {
      consumed += t->dim();
    } else {
      ++consumed;
    }
  }
  KILN_CHECK(ellipses <= 1, IndexError, what, ": an index can only have a single ellipsis");
  KILN_CHECK(consumed <= self.dim(), IndexError, what, ": too many indices for a tensor of ",
             self.dim(), " dims (", consumed, " given)");
  Tensor result = self;
  int64_t d = 0;  // the dim of `result` the next item indexes
  int advanced = 0;
  for (nb::handle item : items) {
    PyObject* o = item.ptr();
    if (o == Py_Ellipsis) {
      d += self.dim() - consumed;
    } else if (item.is_none()) {
      result = result.unsqueeze(d++);
    } else if (PySlice_Check(o)) {
      auto* s = reinterpret_cast<PySliceObject*>(o);
      const auto bound = [&](PyObject* v) -> std::optional<int64_t> {
        if (v == Py_None) return std::nullopt;
        return to_int(v, what);
      };
      const int64_t step = s->step == Py_None ? 1 : to_int(s->step, what);
      KILN_CHECK(step > 0, ValueError, what, ": slice step must be positive, not ", step);
      result = result.slice(d++, bound(s->start), bound(s->stop), step);
    } else if (PyLong_Check(o) || (PyIndex_Check(o) && !as_tensor(item))) {
      result = result.select(d, to_int(item, what));
    } else {
      Tensor idx = as_tensor(item)
                       ? *as_tensor(item)
                       : nb::cast<Tensor>(nb::module_::import_("kiln._C").attr("tensor")(item));
      idx = index_tensor_item(idx, what);
      KILN_CHECK(++advanced <= 1, NotImplementedError, what,
                 ": indexing with more than one index tensor (advanced indexing with "
                 "broadcast index tensors) is not implemented; index one dim at a time");
      if (idx.dtype() == DType::Bool) {
        if (idx.dim() == result.dim() && d == 0) {
          result = masked_select(result, idx);
          d = 1;
          continue;
        }
        KILN_CHECK(idx.dim() == 1, NotImplementedError, what, ": a ", idx.dim(),
                   "-d bool index that is not the whole tensor's mask is not implemented");
        idx = nonzero(idx).select(1, 0);
      }
      const Shape idx_sizes = idx.sizes();
      Tensor picked = index_select(result, d, idx.reshape({-1}));
      std::vector<int64_t> sizes(picked.sizes().begin(), picked.sizes().end());
      sizes.erase(sizes.begin() + d);
      sizes.insert(sizes.begin() + d, idx_sizes.begin(), idx_sizes.end());
      result = picked.reshape(sizes);
      d += static_cast<int64_t>(idx_sizes.size());
    }
  }
  return result;
}

void set_index(const Tensor& self, nb::handle key, nb::handle value) {
  const char* what = "Tensor.__setitem__";
  if (const Tensor* mask = as_tensor(key); mask && mask->dtype() == DType::Bool) {
    Tensor target = self;
    if (is_number(value)) {
      masked_fill_(target, *mask, to_scalar(value, what));
      return;
    }
    const Tensor v = to_operand(value, what);
    KILN_CHECK(v.numel() == 1, NotImplementedError, what,
               ": assigning a tensor of several values through a bool mask is not implemented; "
               "use kiln.where(mask, value, x)");
    masked_fill_(target, *mask, v.item_scalar());
    return;
  }
  Tensor view = index(self, key);
  if (is_number(value))
    view.fill_(to_scalar(value, what));
  else
    view.copy_(to_operand(value, what));
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> cls(m, "Tensor", "A multi-dimensional array of one dtype, with autograd.");
  // Tensor(t) is t itself under another Python object (the same tensor: metadata, storage and
  // autograd state), which is how nn.Parameter wraps a layer's weight; Tensor(data) copies
  // numbers as float32, as torch.Tensor does.
  cls.def("__init__", [](Tensor* self, nb::handle data) {
    if (const Tensor* t = as_tensor(data)) {
      new (self) Tensor(*t);
      return;
    }
    nb::object made = nb::module_::import_("kiln._C").attr("tensor")(
        data, nb::arg("dtype") = dtype_object(kDefaultFloat));
    new (self) Tensor(*as_tensor(made));
  });
  cls.def_prop_ro("shape", [](const Tensor& t) { return shape_tuple(t.sizes()); })
      .def_prop_ro("dtype", [](const Tensor& t) { return dtype_object(t.dtype()); })
      .def_prop_ro("ndim", &Tensor::dim)
      .def_prop_ro("device", [](const Tensor&) { return "cpu"; })
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_ro("T",
                   [](const Tensor& t) {
                     return t.dim() < 2 ? t : t.permute({1, 0});
                   })
      .def_prop_ro("mT", &Tensor::mT)
      .def_prop_rw("requires_grad", &Tensor::requires_grad,
                   [](Tensor& t, bool r) { t.requires_grad_(r); })
      .def_prop_rw(
          "grad", [](const Tensor& t) { return tensor_to_python(t.grad()); },
          [](Tensor& t, nb::handle g) {
            t.set_grad(g.is_none() ? Tensor() : to_operand(g, "Tensor.grad"));
          },
          nb::for_setter(nb::arg("grad").none()))
      .def_prop_ro("data", &Tensor::detach)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("storage_offset", &Tensor::storage_offset)
      .def(
          "size",
          [](const Tensor& t, std::optional<int64_t> dim) -> nb::object {
            if (dim) return nb::int_(t.size(*dim));
            return shape_tuple(t.sizes());
          },
          nb::arg("dim").none() = nb::none())
      .def(
          "stride",
          [](const Tensor& t, std::optional<int64_t> dim) -> nb::object {
            if (dim) return nb::int_(t.stride(*dim));
            return shape_tuple(t.strides());
          },
          nb::arg("dim").none() = nb::none())
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("detach", &Tensor::detach)
      .def(
          "requires_grad_",
          [](nb::handle self, bool r) {
            nb::inst_ptr<Tensor>(self)->requires_grad_(r);
            return nb::borrow(self);
          },
          nb::arg("requires_grad") = true)
      .def("retain_grad", &Tensor::retain_grad)
      .def(
          "backward",
          [](const Tensor& t, nb::handle gradient, std::optional<bool> retain_graph,
             bool create_graph) {
            const Tensor g = gradient.is_none() ? Tensor() : to_operand(gradient, "gradient");
            nb::gil_scoped_release unlocked;
            t.backward(g, retain_graph, create_graph);
          },
          nb::arg("gradient").none() = nb::none(), nb::arg("retain_graph").none() = nb::none(),
          nb::arg("create_graph") = false)
      .def("item", [](const Tensor& t) { return scalar_to_python(t.item_scalar()); })
      .def("tolist",
           [](const Tensor& t) {
             const Tensor c = t.detach().contiguous();
             return to_list(static_cast<const char*>(c.data_ptr()), c.sizes(), c.dtype(), 0);
           })
      .def("reshape",
           [](const Tensor& t, nb::args shape) {
             return t.reshape(to_ints(shape.size() == 1 ? shape[0] : shape, "Tensor.reshape()"));
           })
      .def("transpose", &Tensor::transpose, nb::arg("dim0"), nb::arg("dim1"))
      .def("t", &Tensor::t)
      .def("flatten", &Tensor::flatten, nb::arg("start_dim") = 0, nb::arg("end_dim") = -1)
      .def("narrow", &Tensor::narrow, nb::arg("dim"), nb::arg("start"), nb::arg("length"))
      .def("to", [](const Tensor& t, nb::handle dtype) { return t.to(to_dtype(dtype, "dtype")); })
      .def("float", [](const Tensor& t) { return t.to(DType::Float32); })
      .def("double", [](const Tensor& t) { return t.to(DType::Float64); })
      .def("long", [](const Tensor& t) { return t.to(DType::Int64); })
      .def("int", [](const Tensor& t) { return t.to(DType::Int32); })
      .def("bool", [](const Tensor& t) { return t.to(DType::Bool); })
      .def("__repr__", [](const Tensor& t) { return to_string(t); })
      .def("__len__",
           [](const Tensor& t) {
             KILN_CHECK(t.dim() > 0, Error, "len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__bool__", [](const Tensor& t) { return static_cast<bool>(t); })
      .def("__float__", [](const Tensor& t) { return t.item_scalar().to_double(); })
      .def("__int__", [](const Tensor& t) { return t.item_scalar().to_int(); })
      .def("__index__",
           [](const Tensor& t) {
             KILN_CHECK(!is_floating(t.dtype()) && t.numel() == 1, DTypeError,
                        "only integer tensors of a single element can be converted to an index");
             return t.item_scalar().to_int();
           })
      .def("__hash__", [](nb::handle self) { return reinterpret_cast<intptr_t>(self.ptr()); })
      .def("__getitem__", &index)
      .def("__setitem__", &set_index);

  // Operators. Python numbers are wrapped scalars (they promote by category only).
  const auto op = [&](const char* name, Tensor (*fn)(const Tensor&, const Tensor&)) {
    cls.def(name, [fn](const Tensor& a, nb::handle b) { return binary(a, b, fn); });
  };
  const auto rop = [&](const char* name, Tensor (*fn)(const Tensor&, const Tensor&)) {
    cls.def(name, [fn](const Tensor& a, nb::handle b) {
      return binary(a, b, [fn](const Tensor& x, const Tensor& y) { return fn(y, x); });
    });
  };
  const auto add_fn = +[](const Tensor& a, const Tensor& b) { return kiln::add(a, b); };
  const auto sub_fn = +[](const Tensor& a, const Tensor& b) { return kiln::sub(a, b); };
  op("__add__", add_fn);
  rop("__radd__", add_fn);
  op("__sub__", sub_fn);
  rop("__rsub__", sub_fn);
  op("__mul__", &kiln::mul);
  rop("__rmul__", &kiln::mul);
  const auto div_fn = +[](const Tensor& a, const Tensor& b) { return kiln::div(a, b); };
  op("__truediv__", div_fn);
  rop("__rtruediv__", div_fn);
  op("__floordiv__", &kiln::floor_divide);
  rop("__rfloordiv__", &kiln::floor_divide);
  op("__mod__", &kiln::remainder);
  rop("__rmod__", &kiln::remainder);
  const auto pow_fn = +[](const Tensor& a, const Tensor& b) { return kiln::pow(a, b); };
  op("__pow__", pow_fn);
  rop("__rpow__", pow_fn);
  op("__matmul__", &kiln::matmul);
  rop("__rmatmul__", &kiln::matmul);
  op("__and__", &kiln::bitwise_and);
  rop("__rand__", &kiln::bitwise_and);
  op("__or__", &kiln::bitwise_or);
  rop("__ror__", &kiln::bitwise_or);
  op("__xor__", &kiln::bitwise_xor);
  rop("__rxor__", &kiln::bitwise_xor);
  op("__eq__", &kiln::eq);
  op("__ne__", &kiln::ne);
  op("__lt__", &kiln::lt);
  op("__le__", &kiln::le);
  op("__gt__", &kiln::gt);
  op("__ge__", &kiln::ge);
  const auto iop = [&](const char* name, void (*fn)(Tensor&, const Tensor&)) {
    cls.def(name, [fn](nb::handle self, nb::handle b) { return in_place(self, b, fn); });
  };
  iop(
      "__iadd__", +[](Tensor& a, const Tensor& b) { add_(a, b); });
  iop(
      "__isub__", +[](Tensor& a, const Tensor& b) { sub_(a, b); });
  iop(
      "__imul__", +[](Tensor& a, const Tensor& b) { mul_(a, b); });
  iop(
      "__itruediv__", +[](Tensor& a, const Tensor& b) { div_(a, b); });
  cls.def("__neg__", [](const Tensor& t) { return kiln::neg(t); })
      .def("__pos__", [](const Tensor& t) { return t; })
      .def("__abs__", [](const Tensor& t) { return kiln::abs(t); })
      .def("__invert__", [](const Tensor& t) {
        KILN_CHECK(t.dtype() == DType::Bool, NotImplementedError, "~ (bitwise not) of a ",
                   t.dtype(),
                   " tensor is not implemented; it is "
                   "logical not on bool tensors");
        return kiln::logical_not(t);
      });
}

}  // namespace kiln::python
