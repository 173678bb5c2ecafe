#include "common/fd_handoff.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ot::mesh {
namespace {

constexpr std::string_view kMagic = "OTH1";

void putU16(std::vector<uint8_t>& out, size_t value) {
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

void putU32(std::vector<uint8_t>& out, size_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(value >> shift));
}

// Reads big-endian lengths and byte runs off the front of a message, remembering the first
// failure so the decoder reads straight through.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  [[nodiscard]] bool take(size_t count, std::span<const uint8_t>& out) {
    if (bytes_.size() - offset_ < count) return false;
    out = bytes_.subspan(offset_, count);
    offset_ += count;
    return true;
  }
  [[nodiscard]] bool number(size_t width, size_t& out) {
    std::span<const uint8_t> raw;
    if (!take(width, raw)) return false;
    out = 0;
    for (const uint8_t byte : raw) out = (out << 8) | byte;
    return true;
  }
  [[nodiscard]] bool atEnd() const { return offset_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
};

Result<std::string, HandoffError> takeAddress(Cursor& cursor) {
  size_t length = 0;
  std::span<const uint8_t> raw;
  if (!cursor.number(2, length)) return HandoffError::kTruncated;
  if (length > kMaxHandoffAddress) return HandoffError::kTooLong;
  if (!cursor.take(length, raw)) return HandoffError::kTruncated;
  return std::string(raw.begin(), raw.end());
}

void closeDescriptors(const msghdr& message) {
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(const_cast<msghdr*>(&message), header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (fd >= 0) ::close(fd);
    }
  }
}

}  // namespace

const char* handoffErrorName(HandoffError error) {
  switch (error) {
    case HandoffError::kTruncated:
      return "truncated";
    case HandoffError::kBadMagic:
      return "bad_magic";
    case HandoffError::kBadKind:
      return "bad_kind";
    case HandoffError::kTooLong:
      return "too_long";
    case HandoffError::kTrailing:
      return "trailing_bytes";
    case HandoffError::kNoDescriptor:
      return "no_descriptor";
  }
  return "unknown";
}

Result<std::vector<uint8_t>, HandoffError> encodeHandoff(const Handoff& handoff) {
  if (handoff.peerAddress.size() > kMaxHandoffAddress ||
      handoff.localAddress.size() > kMaxHandoffAddress ||
      handoff.prefix.size() > kMaxHandoffPrefix) {
    return HandoffError::kTooLong;
  }
  std::vector<uint8_t> out;
  out.reserve(kMagic.size() + 9 + handoff.peerAddress.size() + handoff.localAddress.size() +
              handoff.prefix.size());
  out.insert(out.end(), kMagic.begin(), kMagic.end());
  out.push_back(static_cast<uint8_t>(handoff.kind));
  putU16(out, handoff.peerAddress.size());
  out.insert(out.end(), handoff.peerAddress.begin(), handoff.peerAddress.end());
  putU16(out, handoff.localAddress.size());
  out.insert(out.end(), handoff.localAddress.begin(), handoff.localAddress.end());
  putU32(out, handoff.prefix.size());
  out.insert(out.end(), handoff.prefix.begin(), handoff.prefix.end());
  return out;
}

Result<Handoff, HandoffError> decodeHandoff(std::span<const uint8_t> message) {
  Cursor cursor(message);
  std::span<const uint8_t> magic;
  if (!cursor.take(kMagic.size(), magic)) return HandoffError::kTruncated;
  if (std::memcmp(magic.data(), kMagic.data(), kMagic.size()) != 0) return HandoffError::kBadMagic;
  size_t kind = 0;
  if (!cursor.number(1, kind)) return HandoffError::kTruncated;
  Handoff handoff;
  switch (kind) {
    case static_cast<size_t>(HandoffKind::kMeshLink):
      handoff.kind = HandoffKind::kMeshLink;
      break;
    case static_cast<size_t>(HandoffKind::kInternalHttp):
      handoff.kind = HandoffKind::kInternalHttp;
      break;
    default:
      return HandoffError::kBadKind;
  }
  auto peer = takeAddress(cursor);
  if (!peer) return peer.error();
  handoff.peerAddress = std::move(peer).value();
  auto local = takeAddress(cursor);
  if (!local) return local.error();
  handoff.localAddress = std::move(local).value();
  size_t length = 0;
  std::span<const uint8_t> prefix;
  if (!cursor.number(4, length)) return HandoffError::kTruncated;
  if (length > kMaxHandoffPrefix) return HandoffError::kTooLong;
  if (!cursor.take(length, prefix)) return HandoffError::kTruncated;
  if (!cursor.atEnd()) return HandoffError::kTrailing;
  handoff.prefix.assign(prefix.begin(), prefix.end());
  return handoff;
}

std::string defaultHandoffSocketPath(std::string_view controlSocket) {
  const size_t slash = controlSocket.rfind('/');
  if (slash == std::string_view::npos) return "mesh-handoff.sock";
  return std::string(controlSocket.substr(0, slash + 1)) + "mesh-handoff.sock";
}

Status sendHandoff(int channelFd, int connectionFd, const Handoff& handoff) {
  auto encoded = encodeHandoff(handoff);
  if (!encoded) {
    return Error{ErrorKind::kInvalid,
                 std::string("handoff not encodable: ") + handoffErrorName(encoded.error())};
  }
  std::vector<uint8_t>& bytes = encoded.value();
  iovec vector{bytes.data(), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &connectionFd, sizeof(int));
  for (;;) {
    const ssize_t sent = ::sendmsg(channelFd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes.size())) return Ok{};
    if (sent >= 0) {
      // A sequenced packet goes whole or not at all; a short count means the socket is not one.
      return Error{ErrorKind::kInternal, "handoff channel is not SOCK_SEQPACKET"};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {  // EWOULDBLOCK is EAGAIN on Linux
      return Error{ErrorKind::kUnavailable, "handoff channel full"};
    }
    return Error{ErrorKind::kUnavailable, std::string("handoff channel: ") + std::strerror(errno)};
  }
}

Result<std::optional<ReceivedHandoff>> receiveHandoff(int channelFd) {
  std::vector<uint8_t> buffer(kMaxHandoffMessage + 1);
  iovec vector{buffer.data(), buffer.size()};
  // Room for a few descriptors, so a message carrying more than one is seen (and refused) rather
  // than having the kernel drop the extra ones with MSG_CTRUNC.
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t got = -1;
  for (;;) {
    got = ::recvmsg(channelFd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got >= 0 || errno != EINTR) break;
  }
  if (got < 0) {
    if (errno == EAGAIN) return std::optional<ReceivedHandoff>{};  // EWOULDBLOCK is EAGAIN here
    return Error{ErrorKind::kUnavailable, std::string("handoff channel: ") + std::strerror(errno)};
  }
  if (got == 0 && message.msg_controllen == 0) {
    return Error{ErrorKind::kUnavailable, "handoff channel closed"};
  }
  int fd = -1;
  size_t descriptors = 0;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    if (count > 0 && descriptors == 0) std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
    descriptors += count;
  }
  const bool truncated = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  if (descriptors != 1 || truncated) {
    closeDescriptors(message);
    return Error{ErrorKind::kInvalid,
                 truncated
                     ? std::string("handoff message truncated")
                     : std::string("handoff: ") + handoffErrorName(HandoffError::kNoDescriptor)};
  }
  auto decoded = decodeHandoff(std::span<const uint8_t>(buffer.data(), static_cast<size_t>(got)));
  if (!decoded) {
    ::close(fd);
    return Error{ErrorKind::kInvalid, std::string("handoff: ") + handoffErrorName(decoded.error())};
  }
  return std::optional<ReceivedHandoff>(ReceivedHandoff{std::move(decoded).value(), fd});
}

}  // namespace ot::mesh
