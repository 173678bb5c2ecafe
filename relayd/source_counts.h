// Per-source accounting for limits that one peer address must not exhaust alone (API handshakes
// in progress, one tunnel's connection slots): a count per source key (common/ip_address.h
// sourceKey: an IPv4 address, an IPv6 /64). Entries exist only while their count is above zero,
// so memory is bounded by what is held, never by how many sources came and went.
//
// SourceSlot is one held unit: it gives its unit back when released or destroyed. Pure logic,
// loop thread only; the counts must outlive every slot taken from them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace ot::relayd {

class SourceCounts {
 public:
  // One more unit for `key` unless it already holds `limit`; false (and nothing counted) then.
  [[nodiscard]] bool tryAcquire(const std::string& key, uint64_t limit);
  // Gives one unit of `key` back; the entry goes when its count reaches zero. A key that holds
  // nothing is ignored.
  void release(const std::string& key);
  [[nodiscard]] uint64_t count(const std::string& key) const;
  // Sources holding at least one unit.
  [[nodiscard]] size_t sources() const { return counts_.size(); }

 private:
  std::unordered_map<std::string, uint64_t> counts_;
};

class SourceSlot {
 public:
  SourceSlot() = default;
  SourceSlot(SourceCounts* counts, std::string key) : counts_(counts), key_(std::move(key)) {}
  SourceSlot(SourceSlot&& other) noexcept
      : counts_(std::exchange(other.counts_, nullptr)), key_(std::move(other.key_)) {}
  SourceSlot& operator=(SourceSlot&& other) noexcept {
    if (this != &other) {
      release();
      counts_ = std::exchange(other.counts_, nullptr);
      key_ = std::move(other.key_);
    }
    return *this;
  }
  SourceSlot(const SourceSlot&) = delete;
  SourceSlot& operator=(const SourceSlot&) = delete;
  ~SourceSlot() { release(); }

  // Takes one unit of `key` from `counts`; an empty slot (held() false) when it is at `limit`.
  [[nodiscard]] static SourceSlot acquire(SourceCounts& counts, std::string key, uint64_t limit) {
    if (!counts.tryAcquire(key, limit)) return {};
    return {&counts, std::move(key)};
  }
  [[nodiscard]] bool held() const { return counts_ != nullptr; }
  void release() {
    if (counts_ == nullptr) return;
    counts_->release(key_);
    counts_ = nullptr;
  }

 private:
  SourceCounts* counts_ = nullptr;
  std::string key_;
};

// The source key of a peer's address (TcpStream::peerAddress: "192.0.2.1", "2001:db8::1"), as
// common/ip_address.h sourceKey makes it. Empty when the peer has no IP address (a unix-socket
// listener without a PROXY header): such peers all come from the one proxy in front, and are not
// limited per source.
[[nodiscard]] std::string peerSourceKey(std::string_view peer);

}  // namespace ot::relayd
