// Finding the backend a kiln::compile call asked for, with its mode (CompileOptions::mode).
#pragma once

#include <string>

#include "kiln/capture/compile.h"

namespace kiln::backends {

// The backend registered as `name`, in `mode`: "" or "default" is lookup_backend(name);
// "max-autotune" exists for "inductor" only (it tunes each large kernel's threads at its first
// run). kiln::ValueError for an unknown mode or one the backend does not have.
Backend lookup_backend_in_mode(const std::string& name, const std::string& mode);

}  // namespace kiln::backends
