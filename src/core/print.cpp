// Printing tensors in PyTorch's format: nested brackets aligned to a common width, 4 decimals,
// scientific notation when magnitudes span a wide range, and "..." for summarised dims.
#include <cmath>
#include <iomanip>
#include <mutex>
#include <ostream>
#include <sstream>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

namespace {

std::mutex g_print_mu;
PrintOptions g_print_options;

struct Formatter {
  DType dtype;
  int precision;
  bool int_mode = false;  // floats that are all whole numbers print as "3."
  bool sci_mode = false;
  int width = 1;

  std::string format(double v) const {
    std::ostringstream os;
    if (dtype == DType::Bool) return v != 0 ? "True" : "False";
    if (!is_floating(dtype)) {
      os << static_cast<int64_t>(v);
      return os.str();
    }
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (sci_mode) {
      os << std::scientific << std::setprecision(precision) << v;
    } else if (int_mode) {
      os << std::fixed << std::setprecision(0) << v << ".";
    } else {
      os << std::fixed << std::setprecision(precision) << v;
    }
    return os.str();
  }
};

double element(const Tensor& t, const char* base, IntList idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  double v = 0;
  KILN_DISPATCH_ALL(t.dtype(), "print", [&]<typename T>() {
    v = static_cast<double>(*reinterpret_cast<const T*>(base + off * t.element_size()));
  });
  return v;
}

// Visits the elements that will be shown (the first and last `edge` of each summarised dim).
template <typename F>
void visit_shown(const Tensor& t, bool summarize, int64_t edge, Shape& idx, int64_t d, F&& f) {
  if (d == t.dim()) {
    f(IntList(idx));
    return;
  }
  int64_t n = t.size(d);
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) i = n - edge;
    idx[d] = i;
    visit_shown(t, summarize, edge, idx, d + 1, f);
  }
}

void print_rec(std::ostream& os, const Tensor& t, const char* base, const Formatter& fmt,
               bool summarize, int64_t edge, Shape& idx, int64_t d, int indent) {
  if (d == t.dim()) {
    std::string s = fmt.format(element(t, base, idx));
    os << std::string(static_cast<size_t>(std::max<int>(0, fmt.width - int(s.size()))), ' ') << s;
    return;
  }
  // The items of this dim: indices, with -1 standing for the "..." of a summarised dim.
  int64_t n = t.size(d);
  std::vector<int64_t> items;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * edge && i == edge) {
      items.push_back(-1);
      i = n - edge;
    }
    items.push_back(i);
  }
  const bool last = d == t.dim() - 1;
  const std::string sep = last ? ", "
                               : "," + std::string(static_cast<size_t>(t.dim() - 1 - d), '\n') +
                                     std::string(static_cast<size_t>(indent + 1), ' ');
  os << "[";
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) os << sep;
    if (items[k] < 0) {
      os << "...";
      continue;
    }
    idx[d] = items[k];
    print_rec(os, t, base, fmt, summarize, edge, idx, d + 1, indent + 1);
  }
  os << "]";
}

}  // namespace

void set_printoptions(const PrintOptions& options) {
  std::lock_guard<std::mutex> lock(g_print_mu);
  g_print_options = options;
}
PrintOptions get_printoptions() {
  std::lock_guard<std::mutex> lock(g_print_mu);
  return g_print_options;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  PrintOptions opt = get_printoptions();
  const std::string prefix = "tensor(";
  std::vector<std::string> suffix;
  if (t.numel() == 0) {
    os << prefix << "[]";
    if (t.dim() != 1) {
      os << ", size=(";
      for (int64_t d = 0; d < t.dim(); ++d) os << (d ? ", " : "") << t.size(d);
      os << (t.dim() == 1 ? ",)" : ")");
    }
  } else {
    const char* base = static_cast<const char*>(t.data_ptr());
    bool summarize = t.numel() > opt.threshold;
    Formatter fmt{t.dtype(), opt.precision};
    Shape idx(static_cast<size_t>(t.dim()), 0);
    // First pass over the shown values: choose the notation and the common width.
    if (is_floating(t.dtype())) {
      double amax = 0, amin = INFINITY;
      bool all_int = true, any_finite = false;
      visit_shown(t, summarize, opt.edgeitems, idx, 0, [&](IntList i) {
        double v = element(t, base, i);
        if (!std::isfinite(v)) return;
        any_finite = true;
        all_int = all_int && v == std::nearbyint(v);
        double a = std::fabs(v);
        amax = std::max(amax, a);
        if (a != 0) amin = std::min(amin, a);
      });
      if (any_finite && all_int) {
        fmt.int_mode = amax < 1e8;
        fmt.sci_mode = !fmt.int_mode;
      } else if (any_finite) {
        fmt.sci_mode = amax > 1e8 || (amin < 1e-4) || (amin < INFINITY && amax / amin > 1000);
      }
    }
    visit_shown(t, summarize, opt.edgeitems, idx, 0, [&](IntList i) {
      fmt.width = std::max<int>(fmt.width, static_cast<int>(fmt.format(element(t, base, i)).size()));
    });
    os << prefix;
    if (t.dim() == 0) {
      os << fmt.format(element(t, base, {}));
    } else {
      print_rec(os, t, base, fmt, summarize, opt.edgeitems, idx, 0,
                static_cast<int>(prefix.size()));
    }
  }
  if (t.dtype() != DType::Float32 && t.dtype() != DType::Int64 && t.dtype() != DType::Bool) {
    os << ", dtype=" << t.dtype();
  }
  if (t.requires_grad()) os << ", requires_grad=True";
  return os << ")";
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace kiln
