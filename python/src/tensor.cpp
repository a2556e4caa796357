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

// An index item that is a tensor, or a list read as one: checked to be integer or bool.
Tensor index_tensor_item(nb::handle item, const char* what) {
  const Tensor index = as_tensor(item)
                           ? *as_tensor(item)
                           : nb::cast<Tensor>(nb::module_::import_("kiln._C").attr("tensor")(item));
  if (index.dtype() == DType::Bool) return index;
  KILN_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, IndexError, what,
             ": tensors used as indices must be integer or bool tensors, not ", index.dtype());
  return index;
}

// Advanced indexing (several index tensors, and every assignment through index tensors), as
// NumPy and torch define it: the index tensors broadcast together into one block of result
// dims, placed where they stand when they are adjacent and first otherwise; slices, None and
// ints index their dims as in basic indexing. Computed as the storage offset of every result
// element (a sum of each item's contribution, broadcast), so reading is one index_select from
// the tensor's memory seen flat and writing one scatter_ into it.
struct ElementOffsets {
  std::vector<int64_t> sizes;  // the result's shape
  Tensor offsets;  // int64, broadcastable to `sizes`: storage offsets from self's own offset
  Tensor flat;     // self's memory as a 1-d view from its offset (empty when nothing is read)
};

// `index` with negative entries counted from the end, after checking every entry is in range
// (a sync point: an out-of-range index would otherwise read or write another element).
Tensor checked_index(const Tensor& index, int64_t size, int64_t dim, const char* what) {
  Tensor idx = index.dtype() == DType::Int64 ? index : index.to(DType::Int64);
  if (idx.numel() == 0) return idx;
  const bool in_range = all(logical_and(idx >= Scalar(-size), idx < Scalar(size))).item<bool>();
  KILN_CHECK(in_range, IndexError, what, ": an index is out of range for dim ", dim, " of size ",
             size);
  return where(idx < Scalar(0), idx + Scalar(size), idx);
}

std::vector<int64_t> broadcast_of(const std::vector<Tensor>& tensors, const char* what) {
  std::vector<int64_t> out;
  for (const Tensor& t : tensors) {
    const Shape& s = t.sizes();
    if (s.size() > out.size()) out.insert(out.begin(), s.size() - out.size(), 1);
    const size_t lead = out.size() - s.size();
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[lead + k];
      KILN_CHECK(
          o == s[k] || o == 1 || s[k] == 1, IndexError, what,
          ": the index tensors cannot be broadcast together (shapes ",
          [&] {
            std::string shapes;
            for (const Tensor& u : tensors) shapes += (shapes.empty() ? "" : ", ") + u.shape_str();
            return shapes;
          }(),
          ")");
      if (o == 1) o = s[k];
    }
  }
  return out;
}

ElementOffsets element_offsets(const Tensor& self, nb::tuple items, const char* what) {
  // One entry per item, Ellipsis expanded and bool masks split into one index per masked dim.
  struct Item {
    enum Kind { NewAxis, Int, Slice, Advanced } kind;
    int64_t dim = -1;  // the dim of self it indexes
    int64_t value = 0;
    int64_t start = 0, length = 0, step = 1;
    Tensor index;
  };
  int64_t consumed = 0;
  bool ellipsis = false;
  for (nb::handle item : items) {
    if (item.ptr() == Py_Ellipsis) {
      KILN_CHECK(!ellipsis, IndexError, what, ": an index can only have a single ellipsis");
      ellipsis = true;
    } else if (!item.is_none()) {
      const Tensor* t = as_tensor(item);
      consumed += t && t->dtype() == DType::Bool ? std::max<int64_t>(t->dim(), 1) : 1;
    }
  }
  KILN_CHECK(consumed <= self.dim(), IndexError, what, ": too many indices for a tensor of ",
             self.dim(), " dims (", consumed, " given)");
  std::vector<Item> parsed;
  int64_t d = 0;
  for (nb::handle item : items) {
    PyObject* o = item.ptr();
    if (o == Py_Ellipsis) {
      for (int64_t k = 0; k < self.dim() - consumed; ++k, ++d)
        parsed.push_back({Item::Slice, d, 0, 0, self.size(d), 1, {}});
    } else if (item.is_none()) {
      parsed.push_back({Item::NewAxis});
    } else if (PySlice_Check(o)) {
      Py_ssize_t start = 0, stop = 0, step = 1;
      if (PySlice_Unpack(o, &start, &stop, &step) < 0) throw nb::python_error();
      KILN_CHECK(step > 0, ValueError, what, ": slice step must be positive, not ", step);
      const Py_ssize_t length = PySlice_AdjustIndices(self.size(d), &start, &stop, step);
      parsed.push_back({Item::Slice, d, 0, start, length, step, {}});
      ++d;
    } else if (PyLong_Check(o) || (PyIndex_Check(o) && !as_tensor(item))) {
      int64_t k = to_int(item, what);
      KILN_CHECK(k >= -self.size(d) && k < self.size(d), IndexError, what, ": index ", k,
                 " is out of range for dim ", d, " of size ", self.size(d));
      parsed.push_back({Item::Int, d, k < 0 ? k + self.size(d) : k});
      ++d;
    } else {
      Tensor idx = index_tensor_item(item, what);
      if (idx.dtype() == DType::Bool) {
        const Tensor mask = idx.dim() == 0 ? idx.unsqueeze(0) : idx;
        for (int64_t k = 0; k < mask.dim(); ++k)
          KILN_CHECK(mask.size(k) == self.size(d + k), IndexError, what, ": the mask's shape ",
                     mask.shape_str(), " does not match the indexed dims of ", self.shape_str());
        const Tensor where_true = nonzero(mask);  // [n, mask dims]
        for (int64_t k = 0; k < mask.dim(); ++k, ++d)
          parsed.push_back({Item::Advanced, d, 0, 0, 0, 1, where_true.select(1, k)});
      } else {
        parsed.push_back(
            {Item::Advanced, d, 0, 0, 0, 1, checked_index(idx, self.size(d), d, what)});
        ++d;
      }
    }
  }
  for (; d < self.dim(); ++d) parsed.push_back({Item::Slice, d, 0, 0, self.size(d), 1, {}});

  // Where the broadcast block goes: at the first index tensor when they are adjacent (ints,
  // which select their dims, do not separate them), else first.
  std::vector<Tensor> indices;
  int first = -1, last = -1, position = 0;  // position: among the result-making items
  bool adjacent = true;
  for (const Item& it : parsed) {
    if (it.kind == Item::Int) continue;
    if (it.kind == Item::Advanced) {
      if (first >= 0 && last != position - 1) adjacent = false;
      if (first < 0) first = position;
      last = position;
      indices.push_back(it.index);
    }
    ++position;
  }
  const std::vector<int64_t> block = broadcast_of(indices, what);
  const auto block_dims = static_cast<int64_t>(block.size());
  ElementOffsets out;
  std::vector<int64_t> place;  // each item's first result dim (-1: an int, which has none)
  // Result dims in order: the block first when the index tensors are not adjacent.
  int64_t block_at = adjacent ? -1 : 0;
  if (!adjacent) out.sizes.insert(out.sizes.end(), block.begin(), block.end());
  position = 0;
  for (const Item& it : parsed) {
    if (it.kind == Item::Int) {
      place.push_back(-1);
      continue;
    }
    if (it.kind == Item::Advanced) {
      if (adjacent && position == first) {
        block_at = static_cast<int64_t>(out.sizes.size());
        out.sizes.insert(out.sizes.end(), block.begin(), block.end());
      }
      place.push_back(block_at);
    } else {
      place.push_back(static_cast<int64_t>(out.sizes.size()));
      out.sizes.push_back(it.kind == Item::NewAxis ? 1 : it.length);
    }
    ++position;
  }
  const auto rank = static_cast<int64_t>(out.sizes.size());
  // Each item's contribution, shaped to broadcast against the result.
  int64_t constant = 0;
  Tensor offsets = zeros({}, DType::Int64);
  for (size_t k = 0; k < parsed.size(); ++k) {
    const Item& it = parsed[k];
    const int64_t stride = it.dim >= 0 ? self.stride(it.dim) : 0;
    if (it.kind == Item::Int) {
      constant += it.value * stride;
    } else if (it.kind == Item::Slice) {
      std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
      shape[static_cast<size_t>(place[k])] = it.length;
      const Tensor along = arange(Scalar(it.start), Scalar(it.start + it.length * it.step),
                                  Scalar(it.step), DType::Int64);
      offsets = offsets + (along * Scalar(stride)).reshape(shape);
    } else if (it.kind == Item::Advanced) {
      std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
      const Shape& s = it.index.sizes();
      for (size_t j = 0; j < s.size(); ++j)
        shape[static_cast<size_t>(place[k] + block_dims - static_cast<int64_t>(s.size())) + j] =
            s[j];
      offsets = offsets + (it.index * Scalar(stride)).reshape(shape);
    }
  }
  out.offsets = constant != 0 ? offsets + Scalar(constant) : offsets;
  int64_t span = 1;
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (self.size(k) == 0) span = 0;
    if (span > 0) span += (self.size(k) - 1) * self.stride(k);
  }
  if (self.dim() == 0) span = 1;
  out.flat = self.as_strided({span}, {1}, self.storage_offset());
  return out;
}

// x[key] through element offsets (several index tensors).
Tensor advanced_index(const Tensor& self, nb::tuple items, const char* what) {
  const ElementOffsets e = element_offsets(self, items, what);
  int64_t n = 1;
  for (int64_t s : e.sizes) n *= s;
  if (n == 0) return zeros(e.sizes, self.dtype());
  return index_select(e.flat, 0, e.offsets.expand(e.sizes).reshape({-1})).reshape(e.sizes);
}

// Whether an index item is an index tensor (or a list, read as one); how many dims it indexes.
int64_t index_tensor_dims(nb::handle item) {
  if (const Tensor* t = as_tensor(item)) return t->dtype() == DType::Bool ? t->dim() : 1;
  return PyList_Check(item.ptr()) ? 1 : 0;
}

Tensor index(const Tensor& self, nb::handle key) {
  const char* what = "Tensor.__getitem__";
  nb::tuple items = PyTuple_Check(key.ptr()) ? nb::borrow<nb::tuple>(key) : nb::make_tuple(key);
  // Several index tensors (or a mask over some of the dims): advanced indexing proper. One
  // index tensor, or a mask over every dim, is one index_select or masked_select below.
  int64_t tensor_dims = 0;
  for (nb::handle item : items) tensor_dims += index_tensor_dims(item);
  const bool whole_mask = items.size() == 1 && as_tensor(items[0]) &&
                          as_tensor(items[0])->dtype() == DType::Bool &&
                          as_tensor(items[0])->dim() == self.dim();
  if (tensor_dims > 1 && !whole_mask) return advanced_index(self, items, what);
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
      Tensor idx = index_tensor_item(item, what);
      if (idx.dtype() == DType::Bool) {
        if (idx.dim() == result.dim() && d == 0) {
          result = masked_select(result, idx);
          d = 1;
          continue;
        }
        idx = nonzero(idx).select(1, 0);  // a 1-d mask (larger ones went the advanced way)
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
  nb::tuple items = PyTuple_Check(key.ptr()) ? nb::borrow<nb::tuple>(key) : nb::make_tuple(key);
  int64_t tensor_dims = 0;
  for (nb::handle item : items) tensor_dims += index_tensor_dims(item);
  if (tensor_dims == 0) {  // basic indexing: a view of self, written in place
    Tensor view = index(self, key);
    if (is_number(value))
      view.fill_(to_scalar(value, what));
    else
      view.copy_(to_operand(value, what));
    return;
  }
  // A mask over every dim with one value: masked_fill_ (no sync point under compile).
  const Tensor* mask = items.size() == 1 ? as_tensor(items[0]) : nullptr;
  if (mask && mask->dtype() == DType::Bool && mask->dim() == self.dim()) {
    Tensor target = self;
    if (is_number(value)) {
      masked_fill_(target, *mask, to_scalar(value, what));
      return;
    }
    if (const Tensor v = to_operand(value, what); v.numel() == 1) {
      masked_fill_(target, *mask, v.item_scalar());
      return;
    }
  }
  // Index tensors: every addressed element's storage offset, then one scatter_ into self's
  // memory (an index tensor's x[i] is a copy, so writing into it would change nothing).
  const ElementOffsets e = element_offsets(self, items, what);
  int64_t n = 1;
  for (int64_t s : e.sizes) n *= s;
  if (n == 0) return;
  const Tensor v = is_number(value) ? full(e.sizes, to_scalar(value, what), self.dtype())
                                    : to_operand(value, what).to(self.dtype());
  KILN_CHECK(v.dim() <= static_cast<int64_t>(e.sizes.size()), ShapeError, what,
             ": cannot assign a value of shape ", v.shape_str(), " to an indexed shape ",
             IntList(e.sizes));
  Tensor flat = e.flat;
  scatter_(flat, 0, e.offsets.expand(e.sizes).reshape({-1}), v.expand(e.sizes).reshape({-1}));
}

}  // namespace

// What register_hook returns (torch.utils.hooks.RemovableHandle).
struct RemovableHandle {
  Tensor tensor;
  size_t handle;
};

void bind_tensor(nb::module_& m) {
  nb::class_<RemovableHandle>(m, "RemovableHandle", "Unregisters a tensor hook: remove().")
      .def("remove", [](const RemovableHandle& h) { h.tensor.remove_hook(h.handle); });
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
          "register_hook",
          [](const Tensor& t, nb::handle fn) {
            auto ref = std::make_shared<PyRef>(fn);
            const size_t handle = t.register_hook([ref](const Tensor& grad) -> Tensor {
              nb::gil_scoped_acquire locked;
              nb::object replaced = ref->get()(tensor_to_python(grad));
              if (replaced.is_none()) return Tensor();
              const Tensor* r = as_tensor(replaced);
              if (!r) throw nb::type_error("a tensor hook must return a Tensor or None");
              return *r;
            });
            return RemovableHandle{t, handle};
          },
          nb::arg("hook"),
          "Calls hook(grad) whenever this tensor's gradient is computed; a tensor it returns "
          "replaces the gradient. Returns a handle whose remove() unregisters it.")
      .def(
          "register_post_accumulate_grad_hook",
          [](const Tensor& t, nb::handle fn) {
            auto ref = std::make_shared<PyRef>(fn);
            const size_t handle = t.register_post_accumulate_grad_hook([ref](const Tensor& leaf) {
              nb::gil_scoped_acquire locked;
              ref->get()(tensor_to_python(leaf));
            });
            return RemovableHandle{t, handle};
          },
          nb::arg("hook"),
          "Calls hook(tensor) after a backward pass has accumulated this leaf's gradient.")
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
