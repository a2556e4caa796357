// What kiln.utils.data takes from C++: the epoch order the C++ DataLoader uses (so a seeded
// Python loader visits examples in the same order) and the MNIST / CIFAR-10 datasets' files.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"

namespace kiln::python {

void bind_data(nb::module_& m) {
  nb::module_ data = m.def_submodule("data", "The C++ data readers kiln.utils.data wraps.");
  data.def("epoch_order", &data::epoch_order, nb::arg("size"), nb::arg("shuffle"),
           nb::arg("seed").none(), nb::arg("epoch"),
           "The indices epoch `epoch` visits, in order or shuffled (seed None: drawn from "
           "kiln's generator).");
  // A reader (a TensorDataset) built without the GIL, returned as (data, targets): the files and
  // their checks are C++'s.
  auto read = []<typename Reader>(const std::string& root, bool train) {
    std::optional<Reader> d;
    {
      nb::gil_scoped_release unlocked;
      d.emplace(root, train);
    }
    return nb::make_tuple(tensor_to_python(d->data()), tensor_to_python(d->targets()));
  };
  data.def(
      "mnist",
      [read](const std::string& root, bool train) {
        return read.template operator()<data::MNIST>(root, train);
      },
      nb::arg("root"), nb::arg("train"),
      "MNIST's IDX files in `root` as (images float32 [N, 1, 28, 28] in [0, 1], labels int64 "
      "[N]).");
  data.def(
      "cifar10",
      [read](const std::string& root, bool train) {
        return read.template operator()<data::CIFAR10>(root, train);
      },
      nb::arg("root"), nb::arg("train"),
      "CIFAR-10's binary batches in `root` as (images float32 [N, 3, 32, 32] in [0, 1], labels "
      "int64 [N]).");
}

}  // namespace kiln::python
