// A bridge's routes in the mesh table, as interned route numbers: up to three held inline (nearly
// every bridge has one or two routes), more on the heap. 16 bytes, against 24 for an empty
// std::vector plus its allocation; the table keeps 20,000+ of them. Pure; no thread of its own.
#pragma once

#include <cstdint>
#include <span>

namespace ot::mesh {

class RouteIds {
 public:
  RouteIds() = default;
  explicit RouteIds(std::span<const uint32_t> ids);
  RouteIds(const RouteIds& other) : RouteIds(other.ids()) {}
  RouteIds(RouteIds&& other) noexcept;
  RouteIds& operator=(const RouteIds& other);
  RouteIds& operator=(RouteIds&& other) noexcept;
  ~RouteIds();

  [[nodiscard]] std::span<const uint32_t> ids() const {
    return {size_ > kInline ? heap_ : inline_, size_};
  }
  [[nodiscard]] bool contains(uint32_t id) const;

 private:
  static constexpr uint32_t kInline = 3;
  void release();

  union {
    uint32_t inline_[kInline];
    uint32_t* heap_;
  };
  uint32_t size_ = 0;
};

}  // namespace ot::mesh
