// SmallVector<T, N>: a vector that keeps up to N trivially-copyable elements inline, so that
// shapes and strides of ordinary tensors never touch the heap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iosfwd>
#include <iterator>
#include <span>
#include <type_traits>
#include <vector>

// Sanitizer builds check every index of a SmallVector or IntList (KILN_CHECK_BOUNDS, defined
// with KILN_SANITIZE): an element read past the end of the inline storage stays inside the
// object, where AddressSanitizer cannot see it (a 0-d tensor's size(0) did, until stop 38).
#ifdef KILN_CHECK_BOUNDS
#define KILN_BOUNDS(i, n) \
  (static_cast<size_t>(i) < static_cast<size_t>(n) ? void() : ::kiln::detail::bounds_failure(i, n))
#else
#define KILN_BOUNDS(i, n) void()
#endif

namespace kiln {

namespace detail {
[[noreturn]] inline void bounds_failure(size_t i, size_t n) {
  std::fprintf(stderr, "kiln: index %zu out of range of a list of %zu elements\n", i, n);
  std::abort();
}
}  // namespace detail

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable types");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVector() = default;
  explicit SmallVector(size_t n, T value = T()) { assign(n, value); }
  SmallVector(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
  // (Constrained so that SmallVector(n, value) with two ints is the count form.)
  template <std::input_iterator It>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(std::span<const T> s) { assign(s.begin(), s.end()); }
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }
  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept { move_from(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      move_from(o);
    }
    return *this;
  }
  ~SmallVector() { release(); }

  template <std::input_iterator It>
  void assign(It first, It last) {
    size_t n = static_cast<size_t>(std::distance(first, last));
    clear();
    reserve(n);
    std::copy(first, last, data_);
    size_ = n;
  }
  void assign(size_t n, T value) {
    clear();
    reserve(n);
    std::fill(data_, data_ + n, value);
    size_ = n;
  }

  size_t size() const { return size_; }
  int64_t ssize() const { return static_cast<int64_t>(size_); }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) {
    KILN_BOUNDS(i, size_);
    return data_[i];
  }
  const T& operator[](size_t i) const {
    KILN_BOUNDS(i, size_);
    return data_[i];
  }
  T& back() {
    KILN_BOUNDS(size_ - 1, size_);
    return data_[size_ - 1];
  }
  const T& back() const {
    KILN_BOUNDS(size_ - 1, size_);
    return data_[size_ - 1];
  }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t cap = std::max(n, capacity_ * 2);
    T* p = new T[cap];
    std::copy(data_, data_ + size_, p);
    if (data_ != inline_) delete[] data_;
    data_ = p;
    capacity_ = cap;
  }
  void resize(size_t n, T value = T()) {
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, value);
    size_ = n;
  }
  void push_back(T v) {
    if (size_ == capacity_) reserve(size_ + 1);
    data_[size_++] = v;
  }
  void pop_back() { --size_; }
  void insert(size_t pos, T v) {
    push_back(v);
    std::rotate(data_ + pos, data_ + size_ - 1, data_ + size_);
  }
  void erase(size_t pos) {
    std::copy(data_ + pos + 1, data_ + size_, data_ + pos);
    --size_;
  }

  operator std::span<const T>() const { return {data_, size_}; }
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void release() {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    capacity_ = N;
    size_ = 0;
  }
  void move_from(SmallVector& o) {
    if (o.data_ == o.inline_) {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
      data_ = inline_;
      capacity_ = N;
    } else {
      data_ = o.data_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_;
      o.capacity_ = N;
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  T inline_[N];
  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

// Sizes and strides of a tensor (strides are in elements, as in PyTorch).
using Shape = SmallVector<int64_t, 6>;
// A borrowed list of ints (sizes, dims) as op arguments take them: built from a braced list
// `{2, 3}`, a std::vector, a Shape or a span. Like any view it must not outlive its source; a
// braced list lives until the end of the full expression, which is all a call needs.
class IntList {
 public:
  IntList() = default;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  IntList(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}
#pragma GCC diagnostic pop
  IntList(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}
  template <size_t N>
  IntList(const SmallVector<int64_t, N>& v) : data_(v.data()), size_(v.size()) {}
  IntList(std::span<const int64_t> s) : data_(s.data()), size_(s.size()) {}
  IntList(const int64_t* data, size_t size) : data_(data), size_(size) {}

  const int64_t* data() const { return data_; }
  size_t size() const { return size_; }
  int64_t ssize() const { return static_cast<int64_t>(size_); }
  bool empty() const { return size_ == 0; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }
  int64_t operator[](size_t i) const {
    KILN_BOUNDS(i, size_);
    return data_[i];
  }
  Shape shape() const { return Shape(begin(), end()); }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

std::ostream& operator<<(std::ostream& os, IntList l);

}  // namespace kiln
