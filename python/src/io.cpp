// Checkpoints (safetensors, as the safetensors package's save_file / load_file) and
// nn.utils.clip_grad_norm_.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "kiln/io/safetensors.h"
#include "kiln/optim/optimizer.h"

namespace kiln::python {

void bind_io(nb::module_& m) {
  m.def(
      "save_file",
      [](nb::dict tensors, const std::string& path,
         std::optional<std::map<std::string, std::string>> metadata) {
        NamedTensors named;
        for (auto [name, value] : tensors) {
          const Tensor* t = as_tensor(value);
          if (!t) throw nb::type_error("save_file: every value must be a kiln.Tensor");
          named.emplace_back(nb::cast<std::string>(name), *t);
        }
        nb::gil_scoped_release unlocked;
        save_safetensors(path, named, metadata.value_or(std::map<std::string, std::string>{}));
      },
      nb::arg("tensors"), nb::arg("filename"), nb::arg("metadata").none() = nb::none(),
      "Writes the tensors to a .safetensors file (atomically: a crash leaves the old file).");
  m.def(
      "load_file",
      [](const std::string& path) {
        SafetensorsContents contents;
        {
          nb::gil_scoped_release unlocked;
          contents = load_safetensors(path);
        }
        nb::dict out;
        for (auto& [name, t] : contents.tensors) out[name.c_str()] = tensor_to_python(t);
        return out;
      },
      nb::arg("filename"), "The tensors of a .safetensors file, by name.");
  m.def(
      "clip_grad_norm_",
      [](nb::handle params, double max_norm, double norm_type, bool error_if_nonfinite) {
        std::vector<Tensor> list;
        if (const Tensor* t = as_tensor(params)) {
          list.push_back(*t);
        } else {
          for (nb::handle p : nb::iter(params)) list.push_back(to_operand(p, "parameters"));
        }
        return optim::clip_grad_norm_tensor_(list, max_norm, norm_type, error_if_nonfinite);
      },
      nb::arg("parameters"), nb::arg("max_norm"), nb::arg("norm_type") = 2.0,
      nb::arg("error_if_nonfinite") = false,
      "Scales the gradients so that their total norm is at most max_norm; returns the norm "
      "before (torch.nn.utils.clip_grad_norm_).");
}

}  // namespace kiln::python
