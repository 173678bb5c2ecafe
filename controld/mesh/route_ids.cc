#include "controld/mesh/route_ids.h"

#include <algorithm>
#include <utility>

namespace ot::mesh {

RouteIds::RouteIds(std::span<const uint32_t> ids) : size_(static_cast<uint32_t>(ids.size())) {
  uint32_t* target = inline_;
  if (size_ > kInline) {
    heap_ = new uint32_t[size_];
    target = heap_;
  }
  std::copy(ids.begin(), ids.end(), target);
}

RouteIds::RouteIds(RouteIds&& other) noexcept : size_(other.size_) {
  if (size_ > kInline) {
    heap_ = std::exchange(other.heap_, nullptr);
  } else {
    std::copy(other.inline_, other.inline_ + size_, inline_);
  }
  other.size_ = 0;
}

RouteIds& RouteIds::operator=(const RouteIds& other) {
  if (this != &other) *this = RouteIds(other);
  return *this;
}

RouteIds& RouteIds::operator=(RouteIds&& other) noexcept {
  if (this == &other) return *this;
  release();
  size_ = other.size_;
  if (size_ > kInline) {
    heap_ = std::exchange(other.heap_, nullptr);
  } else {
    std::copy(other.inline_, other.inline_ + size_, inline_);
  }
  other.size_ = 0;
  return *this;
}

RouteIds::~RouteIds() {
  release();
}

void RouteIds::release() {
  if (size_ > kInline) delete[] heap_;
  size_ = 0;
}

bool RouteIds::contains(uint32_t id) const {
  const std::span<const uint32_t> all = ids();
  return std::find(all.begin(), all.end(), id) != all.end();
}

}  // namespace ot::mesh
