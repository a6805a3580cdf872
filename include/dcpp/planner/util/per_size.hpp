// A table of one value per CP size, made only for the sizes that ask for one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace dcpp::detail {

//! Per CP size index, a `T` made the first time a size asks for one: a world of many legal sizes
//! (every size from 1 to 2^24 in a contiguous world) pays only for the sizes it uses. `reset`
//! forgets every `T` and sets the number of sizes; `find(size)` is the size's `T` or null;
//! `make(size, args...)` is the size's `T`, made from `args` if it has none; `each(f)` calls
//! `f(size, t)` for every `T` made, in the order made, and `made_sizes()` lists their sizes. A `T&`
//! or `T*` lasts until the next `make` of a new size or `reset`.
template <class T>
class per_size {
public:
  void reset(std::size_t sizes) {
    made_.clear();
    size_of_.clear();
    slot_.assign(sizes, none);
  }
  [[nodiscard]] T* find(std::size_t size) {
    return slot_[size] == none ? nullptr : &made_[static_cast<std::size_t>(slot_[size])];
  }
  [[nodiscard]] const T* find(std::size_t size) const {
    return slot_[size] == none ? nullptr : &made_[static_cast<std::size_t>(slot_[size])];
  }
  template <class... Args>
  T& make(std::size_t size, Args&&... args) {
    if (slot_[size] == none) {
      slot_[size] = static_cast<std::int32_t>(made_.size());
      made_.emplace_back(std::forward<Args>(args)...);
      size_of_.push_back(size);
    }
    return made_[static_cast<std::size_t>(slot_[size])];
  }
  template <class F>
  void each(F&& f) {
    for (std::size_t k = 0; k < made_.size(); ++k)
      f(size_of_[k], made_[k]);
  }
  [[nodiscard]] const std::vector<std::size_t>& made_sizes() const { return size_of_; }

private:
  static constexpr std::int32_t none = -1;
  std::vector<T> made_;
  std::vector<std::size_t> size_of_; // per T made: its size index
  std::vector<std::int32_t> slot_;   // per size index: its T in made_, or `none`
};

} // namespace dcpp::detail
