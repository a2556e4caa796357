// Printing tensors in PyTorch's format (torch/_tensor_str.py): one formatter for the whole
// tensor chooses between integer-valued ("3."), fixed ("3.1416") and scientific notation from
// the non-zero finite values shown, pads every element to a common width, wraps rows at the
// line width, and summarises large tensors with "...". Kiln's dtype names stand in for
// "torch.<dtype>" in the dtype suffix.
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

// One element as read from the tensor: floating values as double, the rest exactly as int64.
struct Element {
  double f = 0;
  int64_t i = 0;
};

Element read_element(const Tensor& t, const char* base, IntList idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  Element e;
  KILN_DTYPE_SWITCH_ALL(t.dtype(), "print", [&]<typename T>() {
    const T v = *reinterpret_cast<const T*>(base + off * t.element_size());
    if constexpr (std::is_floating_point_v<T>) {
      e.f = static_cast<double>(v);
    } else {
      e.i = static_cast<int64_t>(v);
    }
  });
  return e;
}

class Formatter {
 public:
  Formatter(DType dtype, int precision, const std::vector<Element>& shown)
      : dtype_(dtype), precision_(precision) {
    if (!is_floating(dtype)) {
      for (const Element& e : shown) width_ = std::max(width_, static_cast<int>(raw(e).size()));
      return;
    }
    double amax = 0, amin = INFINITY;
    bool any = false;
    for (const Element& e : shown) {
      if (!std::isfinite(e.f) || e.f == 0) continue;  // only non-zero finite values decide
      any = true;
      int_mode_ = int_mode_ && e.f == std::ceil(e.f);
      amax = std::max(amax, std::fabs(e.f));
      amin = std::min(amin, std::fabs(e.f));
    }
    if (!any) return;  // int mode, width 1: "0.", "nan", "inf"
    const bool wide_range = amax / amin > 1000.0 || amax > 1.0e8;
    sci_mode_ = int_mode_ ? wide_range : (wide_range || amin < 1.0e-4);
    for (const Element& e : shown) {
      if (!std::isfinite(e.f) || e.f == 0) continue;
      const int len = static_cast<int>(raw(e).size());
      width_ = std::max(width_, len);
    }
  }

  int width() const { return width_; }

  // The element padded on the left to the common width.
  std::string format(const Element& e) const {
    std::string s = raw(e);
    if (static_cast<int>(s.size()) < width_)
      s.insert(0, static_cast<size_t>(width_) - s.size(), ' ');
    return s;
  }

 private:
  std::string raw(const Element& e) const {
    if (dtype_ == DType::Bool) return e.i ? "True" : "False";
    if (!is_floating(dtype_)) return std::to_string(e.i);
    const double v = e.f;
    if (std::isnan(v)) return "nan";  // also for negative NaNs, as Python prints them
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::ostringstream os;
    if (sci_mode_) {
      os << std::scientific << std::setprecision(precision_) << v;
    } else if (int_mode_) {
      os << std::fixed << std::setprecision(0) << v << ".";
    } else {
      os << std::fixed << std::setprecision(precision_) << v;
    }
    return os.str();
  }

  DType dtype_;
  int precision_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  int width_ = 1;
};

struct Printer {
  const Tensor& t;
  const char* base;
  const PrintOptions& opt;
  bool summarize;

  // The indices shown along a dim of size n: all, or the first and last `edgeitems` with -1
  // standing for the elision between them.
  std::vector<int64_t> shown(int64_t n) const {
    std::vector<int64_t> items;
    const int64_t edge = opt.edgeitems;
    if (summarize && n > 2 * edge) {
      for (int64_t i = 0; i < edge; ++i) items.push_back(i);
      items.push_back(-1);
      for (int64_t i = n - edge; i < n; ++i) items.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) items.push_back(i);
    }
    return items;
  }

  void collect(Shape& idx, int64_t d, std::vector<Element>& out) const {
    if (d == t.dim()) {
      out.push_back(read_element(t, base, idx));
      return;
    }
    for (int64_t i : shown(t.size(d))) {
      if (i < 0) continue;
      idx[d] = i;
      collect(idx, d + 1, out);
    }
  }

  std::string str(const Formatter& fmt, Shape& idx, int64_t d, int indent) const {
    const int64_t nd = t.dim();
    if (nd == 0) return fmt.format(read_element(t, base, {}));
    if (d == nd - 1) {  // a row: elements wrapped to the line width
      const int64_t per_line = std::max<int64_t>(1, (opt.linewidth - indent) / (fmt.width() + 2));
      std::vector<std::string> data;
      for (int64_t i : shown(t.size(d))) {
        if (i < 0) {
          data.push_back(" ...");
          continue;
        }
        idx[d] = i;
        data.push_back(fmt.format(read_element(t, base, idx)));
      }
      std::string s = "[";
      for (size_t k = 0; k < data.size(); ++k) {
        if (k > 0)
          s +=
              static_cast<int64_t>(k) % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
        s += data[k];
      }
      return s + "]";
    }
    const std::string sep = "," + std::string(static_cast<size_t>(nd - d - 1), '\n') +
                            std::string(static_cast<size_t>(indent + 1), ' ');
    std::string s = "[";
    bool first = true;
    for (int64_t i : shown(t.size(d))) {
      if (!first) s += sep;
      first = false;
      if (i < 0) {
        s += "...";
        continue;
      }
      idx[d] = i;
      s += str(fmt, idx, d + 1, indent + 1);
    }
    return s + "]";
  }
};

// Appends ", suffix" pieces, moving a suffix to its own line when it would pass the line width.
std::string add_suffixes(std::string s, const std::vector<std::string>& suffixes, int indent,
                         int linewidth) {
  const size_t nl = s.rfind('\n');
  int64_t last_line = static_cast<int64_t>(s.size()) -
                      (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& suffix : suffixes) {
    const int64_t len = static_cast<int64_t>(suffix.size());
    if (last_line + len + 2 > linewidth) {
      s += ",\n" + std::string(static_cast<size_t>(indent), ' ') + suffix;
      last_line = indent + len;
    } else {
      s += ", " + suffix;
      last_line += len + 2;
    }
  }
  return s + ")";
}

}  // namespace

void set_printoptions(const PrintOptions& options) {
  KILN_CHECK(options.precision >= 0 && options.threshold >= 0 && options.edgeitems >= 0 &&
                 options.linewidth > 0,
             ValueError,
             "set_printoptions: precision, threshold and edgeitems must be "
             "non-negative and linewidth positive");
  std::lock_guard<std::mutex> lock(g_print_mu);
  g_print_options = options;
}
PrintOptions get_printoptions() {
  std::lock_guard<std::mutex> lock(g_print_mu);
  return g_print_options;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const PrintOptions opt = get_printoptions();
  const std::string prefix = "tensor(";
  const int indent = static_cast<int>(prefix.size());
  std::vector<std::string> suffixes;
  std::string body;
  if (t.numel() == 0) {
    if (t.dim() != 1) {
      std::ostringstream size;
      size << "size=(";
      for (int64_t d = 0; d < t.dim(); ++d) size << (d ? ", " : "") << t.size(d);
      size << ")";
      suffixes.push_back(size.str());
    }
    // Nothing shows an empty tensor's type, so any non-default dtype is named.
    if (t.dtype() != kDefaultFloat) suffixes.push_back(detail::concat("dtype=", t.dtype()));
    body = "[]";
  } else {
    if (t.dtype() != kDefaultFloat && t.dtype() != DType::Int64 && t.dtype() != DType::Bool)
      suffixes.push_back(detail::concat("dtype=", t.dtype()));
    t.impl()->sync("printing a tensor reads its values");
    Printer p{t, static_cast<const char*>(t.data_ptr()), opt, t.numel() > opt.threshold};
    Shape idx(static_cast<size_t>(t.dim()), 0);
    std::vector<Element> shown;
    p.collect(idx, 0, shown);
    Formatter fmt(t.dtype(), opt.precision, shown);
    body = p.str(fmt, idx, 0, indent);
  }
  if (t.requires_grad()) suffixes.push_back("requires_grad=True");
  return os << add_suffixes(prefix + body, suffixes, indent, opt.linewidth);
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace kiln
