// abi_attrs.hpp — a call's attributes as the ABI's strata_attr pointer array.
#pragma once

#include "runtime/dispatch/op.hpp"

#include <array>
#include <vector>

namespace strata::detail {

/// The strata_attr views of a call's attributes (any number; eight inline,
/// more on the heap). Valid while `attrs` is.
class AttrViews {
 public:
  explicit AttrViews(const Attrs* attrs) {
    if (attrs == nullptr) return;
    size_t n = attrs->size();
    if (n > inline_.size()) {
      heap_.resize(n);
      heap_pointers_.resize(n);
    }
    strata_attr* items = n > inline_.size() ? heap_.data() : inline_.data();
    const strata_attr** pointers = n > inline_.size() ? heap_pointers_.data() : inline_pointers_.data();
    for (size_t k = 0; k < n; ++k) {
      const Attr& a = (*attrs)[k];
      strata_attr& v = items[k];
      v.struct_size = sizeof(strata_attr);
      v.name = a.name;
      v.kind = a.kind;
      v.scalar_dtype = a.scalar_dtype;
      v.i = a.i;
      v.f = a.f;
      v.ints = a.ints.data();
      v.floats = a.floats.data();
      v.string = a.kind == STRATA_ATTR_STRING ? a.text.c_str() : nullptr;
      v.count = a.kind == STRATA_ATTR_INTS     ? static_cast<int64_t>(a.ints.size())
                : a.kind == STRATA_ATTR_FLOATS ? static_cast<int64_t>(a.floats.size())
                : a.kind == STRATA_ATTR_STRING ? static_cast<int64_t>(a.text.size())
                                               : 0;
      pointers[k] = &v;
    }
    data_ = pointers;
    count_ = static_cast<int32_t>(n);
  }
  const strata_attr* const* data() const { return data_; }
  int32_t count() const { return count_; }

 private:
  std::array<strata_attr, 8> inline_;  // not value-initialised: filled per use
  std::array<const strata_attr*, 8> inline_pointers_;
  std::vector<strata_attr> heap_;
  std::vector<const strata_attr*> heap_pointers_;
  const strata_attr* const* data_ = nullptr;
  int32_t count_ = 0;
};

}  // namespace strata::detail
