#include "backends/inductor/autotune.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/module_cache.h"
#include "core/clock.h"
#include "diagnostics/diagnostics.h"
#include "kiln/core/parallel.h"

namespace kiln::inductor {

KernelTuning::KernelTuning(const Schedule& schedule, const RunPlan& plan,
                           const std::string& module_path)
    : schedule_(schedule),
      plan_(plan),
      file_(std::filesystem::path(module_path).filename().string() + ".tune"),
      grain_(schedule.kernels.size(), 0) {}

bool KernelTuning::needs_tuning(size_t k) const {
  return plan_.kernel_shapes[k][0] >= kMinTunedElements && get_num_threads() > 1 &&
         !schedule_.kernels[k].folds_columns();
}

std::string KernelTuning::key(size_t k) const {
  return detail::concat(get_num_threads(), " ", plan_.kernel_shapes[k][0], " ",
                        schedule_.kernels[k].name);
}

void KernelTuning::tune(size_t kernel, KernelFn fn, char* const* buffers) {
  // Kernels are pure functions of their inputs into fresh outputs, so running one again is
  // harmless. Each way: one warm-up, then the fastest of three.
  auto fastest = [&](int64_t grain) {
    KernelGrainScope scope(grain);
    double best = 1e300;
    for (int rep = 0; rep < 4; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      fn(buffers, plan_.kernel_attrs[kernel].data(), plan_.kernel_shapes[kernel].data());
      if (rep > 0) best = std::min(best, detail::seconds_since(t0));
    }
    return best;
  };
  const double serial = fastest(kGrainSerial);
  const double parallel = fastest(kGrainParallel);
  grain_[kernel] = parallel < serial ? kGrainParallel : kGrainSerial;
  if (log_enabled(LogTopic::OutputCode))
    diagnostics::log(
        LogTopic::OutputCode,
        detail::concat("inductor max-autotune: ", schedule_.kernels[kernel].name, " (",
                       plan_.kernel_shapes[kernel][0], " elements): one thread ", serial * 1e6,
                       " us, ", get_num_threads(), " threads ", parallel * 1e6, " us -> ",
                       parallel < serial ? "threads" : "one thread"));
}

bool KernelTuning::load() {
  bool complete = true;
  const std::optional<std::string> text = ModuleFolder::instance().read(file_);
  std::istringstream in(text.value_or(""));
  std::map<std::string, int64_t> known;
  for (std::string line; std::getline(in, line);) {
    // "<threads> <elements> <kernel> <grain>"; anything else (a torn write) is skipped.
    const size_t last = line.rfind(' ');
    if (last == std::string::npos) continue;
    const std::string grain = line.substr(last + 1);
    if (grain == std::to_string(kGrainParallel))
      known[line.substr(0, last)] = kGrainParallel;
    else if (grain == std::to_string(kGrainSerial))
      known[line.substr(0, last)] = kGrainSerial;
  }
  for (size_t k = 0; k < schedule_.kernels.size(); ++k) {
    if (!needs_tuning(k)) continue;
    auto it = known.find(key(k));
    if (it != known.end())
      grain_[k] = it->second;
    else
      complete = false;
  }
  return complete;
}

void KernelTuning::save() const {
  // Merged with what is there (the module may serve other shapes); written to a temporary file
  // and renamed, so a reader never sees half a file. A cache that cannot be written keeps the
  // choices in this process only.
  ModuleFolder& folder = ModuleFolder::instance();
  std::map<std::string, std::string> lines;
  {
    std::istringstream in(folder.read(file_).value_or(""));
    for (std::string line; std::getline(in, line);)
      if (const size_t last = line.rfind(' '); last != std::string::npos)
        lines[line.substr(0, last)] = line;
  }
  for (size_t k = 0; k < schedule_.kernels.size(); ++k)
    if (needs_tuning(k) && grain_[k] != 0) lines[key(k)] = key(k) + " " + std::to_string(grain_[k]);
  std::string text;
  for (const auto& [key, line] : lines) text += line + "\n";
  try {
    folder.write_atomically(file_, text);
  } catch (const Error&) {
    // A full or read-only disk: the choices stay in this process.
  }
}

}  // namespace kiln::inductor
