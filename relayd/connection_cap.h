// The public connection cap: how many accepted sockets (bridges, visitors, API calls) relayd holds
// at once before it closes new ones unserved (opentunnel_connections_shed_total{reason=
// "connections"}). It is an overload protection derived from what the machine has, not a fixed
// count: the smaller of what memory and what descriptors allow (docs/relayd.md, Limits).
//
// Pure: the inputs are read by relay_server.cc (physical memory or the cgroup's memory.max,
// RLIMIT_NOFILE after main raised it, BUFFERED_BYTES_LIMIT) and logged with the result.
#pragma once

#include <cstdint>
#include <string_view>

namespace ot::relayd {

// What one connection may cost: ~16 KiB for an idle bridge (relayd's RSS from empty, 16.7 KiB per
// bridge measured, docs/capacity.md) plus 32 KiB for OpenSSL's record buffers (16.6 KiB each
// way), which an active TLS connection holds while records pass and an idle one releases
// (SSL_MODE_RELEASE_BUFFERS). Connection data beyond that is bounded apart, by
// BUFFERED_BYTES_LIMIT. Visitors are not TLS-terminated here and cost less.
inline constexpr uint64_t kBytesPerConnection = 48 * 1024;
// Descriptors relayd needs besides its public sockets: stdio, the loop's epoll, eventfd and
// signal pipe, the listeners, the control session, log files.
inline constexpr uint64_t kOwnDescriptors = 64;
// Plus one descriptor per API request being proxied to controld (one unix socket each): 1 % of
// the limit, at most 1,024.
inline constexpr uint64_t kApiProxyDescriptorShare = 100;
inline constexpr uint64_t kApiProxyDescriptorsMax = 1024;
// A small limit (a test's 96, a shell's 1,024) keeps back at most an eighth of it.
inline constexpr uint64_t kSmallLimitReserveShare = 8;

struct ConnectionCapInputs {
  uint64_t memoryBytes = 0;         // what this process may use (0: unknown)
  uint64_t openFileLimit = 0;       // RLIMIT_NOFILE soft limit (0: unknown)
  uint64_t bufferedBytesLimit = 0;  // BUFFERED_BYTES_LIMIT
  uint64_t bytesPerConnection = kBytesPerConnection;
};

struct ConnectionCap {
  uint64_t limit = 0;          // min(byMemory, byDescriptors), at least 1
  uint64_t byMemory = 0;       // 3/4 of memory, less BUFFERED_BYTES_LIMIT, / bytesPerConnection
  uint64_t byDescriptors = 0;  // the open-file limit less reservedDescriptors
  uint64_t reservedDescriptors = 0;
  std::string_view boundBy;  // "memory" or "descriptors"
};

// An unknown input (0) does not bound the cap; with both unknown it is kFallbackConnectionCap.
inline constexpr uint64_t kFallbackConnectionCap = 60'000;
ConnectionCap deriveConnectionCap(const ConnectionCapInputs& inputs);

}  // namespace ot::relayd
