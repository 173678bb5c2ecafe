// Handing an accepted connection from relayd to controld (the region mesh, docs/mesh.md).
//
// relayd owns the internal listener (INTERNAL_LISTEN) because it is the process that stays up:
// forwarded visitors must keep arriving while controld restarts. The listener reads each
// connection's first line and keeps the forwards; mesh links and internal HTTP requests (route
// checks) belong to controld, so relayd passes the socket itself to controld, together with the
// bytes it has already read and the two addresses, over a local SOCK_SEQPACKET unix socket: one
// message per connection, the descriptor in SCM_RIGHTS. Sequenced packets keep each handoff whole
// (no framing across reads) and a descriptor can never be split from its message.
//
// The codec (encodeHandoff / decodeHandoff) is pure; sendHandoff / receiveHandoff are the two
// non-blocking system calls around it. Neither throws; both are safe on any loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::mesh {

// What the connection turned out to be from its first line.
enum class HandoffKind : uint8_t {
  kMeshLink = 1,      // "OPENTUNNEL-MESH/2 ..."
  kInternalHttp = 2,  // an HTTP request line (route checks: GET /internal/...)
};

// The bytes relayd read before it knew whose connection this is: the first line and whatever
// came with it. An HTTP request may arrive whole; nothing legitimate sends more before an answer.
inline constexpr size_t kMaxHandoffPrefix = 64 * 1024;
// "ip:port" of either end, IPv6 in brackets.
inline constexpr size_t kMaxHandoffAddress = 64;
// The largest message: header, both addresses and the prefix.
inline constexpr size_t kMaxHandoffMessage = 16 + 2 * kMaxHandoffAddress + kMaxHandoffPrefix;

struct Handoff {
  HandoffKind kind = HandoffKind::kMeshLink;
  std::string peerAddress;   // the remote end, as relayd's accept saw it
  std::string localAddress;  // the address it was accepted on (which of the machine's addresses)
  std::vector<uint8_t> prefix;
};

enum class HandoffError : uint8_t {
  kTruncated,     // shorter than its own lengths say
  kBadMagic,      // not a handoff message (or another version)
  kBadKind,       // a kind this build does not know
  kTooLong,       // an address or the prefix over its limit
  kTrailing,      // bytes after the prefix
  kNoDescriptor,  // the message came without exactly one descriptor
};

[[nodiscard]] const char* handoffErrorName(HandoffError error);

// "OTH1", kind (1 byte), peer (u16 length + bytes), local (u16 + bytes), prefix (u32 + bytes);
// lengths big-endian. Fails with kTooLong when a field is over its limit.
[[nodiscard]] Result<std::vector<uint8_t>, HandoffError> encodeHandoff(const Handoff& handoff);
[[nodiscard]] Result<Handoff, HandoffError> decodeHandoff(std::span<const uint8_t> message);

// The default MESH_HANDOFF_SOCKET: mesh-handoff.sock in the directory of CONTROL_SOCKET, which
// both daemons are given, so they agree on it without a setting of its own.
[[nodiscard]] std::string defaultHandoffSocketPath(std::string_view controlSocket);

// Sends `connectionFd` and its handoff on the connected SOCK_SEQPACKET `channelFd` (non-blocking:
// kUnavailable when the channel is full or controld has gone, which the caller treats as "controld
// is not taking connections now"). The caller still owns `connectionFd` and closes its copy.
[[nodiscard]] Status sendHandoff(int channelFd, int connectionFd, const Handoff& handoff);

struct ReceivedHandoff {
  Handoff handoff;
  int connectionFd = -1;  // owned by the caller from here (close-on-exec set)
};

// One message from the SOCK_SEQPACKET `channelFd`. std::nullopt with ok status: nothing to read
// now (EAGAIN); kUnavailable: the peer closed the channel; kInvalid: a malformed message (any
// descriptor it carried is closed here, the channel stays usable).
[[nodiscard]] Result<std::optional<ReceivedHandoff>> receiveHandoff(int channelFd);

}  // namespace ot::mesh
