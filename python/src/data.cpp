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
  // A TensorDataset of the C++ reader as (data, targets): the files and their checks are C++'s.
  auto tensors_of = [](const data::TensorDataset& d) {
    return nb::make_tuple(tensor_to_python(d.data()), tensor_to_python(d.targets()));
  };
  data.def(
      "mnist",
      [tensors_of](const std::string& root, bool train) {
        std::optional<data::MNIST> d;
        {
          nb::gil_scoped_release unlocked;
          d.emplace(root, train);
        }
        return tensors_of(*d);
      },
      nb::arg("root"), nb::arg("train"),
      "MNIST's IDX files in `root` as (images float32 [N, 1, 28, 28] in [0, 1], labels int64 "
      "[N]).");
  data.def(
      "cifar10",
      [tensors_of](const std::string& root, bool train) {
        std::optional<data::CIFAR10> d;
        {
          nb::gil_scoped_release unlocked;
          d.emplace(root, train);
        }
        return tensors_of(*d);
      },
      nb::arg("root"), nb::arg("train"),
      "CIFAR-10's binary batches in `root` as (images float32 [N, 3, 32, 32] in [0, 1], labels "
      "int64 [N]).");
}

}  // namespace kiln::python
