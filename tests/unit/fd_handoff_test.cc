#include "common/fd_handoff.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>

namespace ot::mesh {
namespace {

Handoff sampleHandoff() {
  Handoff handoff;
  handoff.kind = HandoffKind::kInternalHttp;
  handoff.peerAddress = "127.0.0.12:40512";
  handoff.localAddress = "[::1]:9000";
  const std::string line = "GET /internal/tunnel/abc/routes HTTP/1.1\r\n";
  handoff.prefix.assign(line.begin(), line.end());
  return handoff;
}

// A connected SOCK_SEQPACKET pair, closed at the end of the test.
struct Channel {
  std::array<int, 2> fds{-1, -1};
  Channel() { REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds.data()) == 0); }
  ~Channel() {
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
};

bool isOpen(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

// Sends a raw message with `descriptors` attached (0, 1 or 2 copies of `fd`).
void sendRaw(int channel, const std::vector<uint8_t>& bytes, int fd, int descriptors) {
  iovec vector{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  if (descriptors > 0) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(static_cast<size_t>(descriptors) * sizeof(int));
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(static_cast<size_t>(descriptors) * sizeof(int));
    for (int i = 0; i < descriptors; ++i) {
      std::memcpy(CMSG_DATA(header) + static_cast<size_t>(i) * sizeof(int), &fd, sizeof(int));
    }
  }
  REQUIRE(::sendmsg(channel, &message, 0) == static_cast<ssize_t>(bytes.size()));
}

TEST_CASE("fd handoff: the codec round-trips every field") {
  const Handoff handoff = sampleHandoff();
  auto encoded = encodeHandoff(handoff);
  REQUIRE(encoded);
  auto decoded = decodeHandoff(encoded.value());
  REQUIRE(decoded);
  CHECK(decoded->kind == HandoffKind::kInternalHttp);
  CHECK(decoded->peerAddress == handoff.peerAddress);
  CHECK(decoded->localAddress == handoff.localAddress);
  CHECK(decoded->prefix == handoff.prefix);
}

TEST_CASE("fd handoff: malformed messages are refused with their reason") {
  auto encoded = encodeHandoff(sampleHandoff());
  REQUIRE(encoded);
  const std::vector<uint8_t> good = encoded.value();

  for (size_t cut = 0; cut < good.size(); ++cut) {
    auto decoded = decodeHandoff(std::span<const uint8_t>(good.data(), cut));
    REQUIRE_FALSE(decoded);
    CHECK(decoded.error() == HandoffError::kTruncated);
  }
  std::vector<uint8_t> bytes = good;
  bytes.push_back(0);
  CHECK(decodeHandoff(bytes).error() == HandoffError::kTrailing);
  bytes = good;
  bytes[3] = '2';
  CHECK(decodeHandoff(bytes).error() == HandoffError::kBadMagic);
  bytes = good;
  bytes[4] = 9;
  CHECK(decodeHandoff(bytes).error() == HandoffError::kBadKind);
  bytes = good;
  bytes[5] = 0xff;  // the peer address's length: 65,280 and more
  CHECK(decodeHandoff(bytes).error() == HandoffError::kTooLong);

  Handoff tooLong = sampleHandoff();
  tooLong.prefix.assign(kMaxHandoffPrefix + 1, 'x');
  CHECK(encodeHandoff(tooLong).error() == HandoffError::kTooLong);
  tooLong = sampleHandoff();
  tooLong.peerAddress.assign(kMaxHandoffAddress + 1, '1');
  CHECK(encodeHandoff(tooLong).error() == HandoffError::kTooLong);
}

TEST_CASE("fd handoff: a descriptor and its bytes arrive together") {
  Channel channel;
  std::array<int, 2> pipeFds{};
  REQUIRE(::pipe(pipeFds.data()) == 0);
  Handoff handoff = sampleHandoff();
  handoff.kind = HandoffKind::kMeshLink;
  handoff.prefix.assign(kMaxHandoffPrefix, 'p');  // the largest message fits in one packet
  REQUIRE(sendHandoff(channel.fds[0], pipeFds[1], handoff));
  ::close(pipeFds[1]);  // the sender's copy; the receiver's keeps the pipe open

  auto received = receiveHandoff(channel.fds[1]);
  REQUIRE(received);
  REQUIRE(received->has_value());
  const ReceivedHandoff& got = **received;
  CHECK(got.handoff.kind == HandoffKind::kMeshLink);
  CHECK(got.handoff.prefix.size() == kMaxHandoffPrefix);
  CHECK((::fcntl(got.connectionFd, F_GETFD) & FD_CLOEXEC) != 0);
  // The descriptor is the pipe's write end: what goes in comes out of the read end.
  REQUIRE(::write(got.connectionFd, "x", 1) == 1);
  char byte = 0;
  CHECK(::read(pipeFds[0], &byte, 1) == 1);
  CHECK(byte == 'x');
  ::close(got.connectionFd);
  ::close(pipeFds[0]);

  // Nothing more: "nothing now", not an error.
  auto empty = receiveHandoff(channel.fds[1]);
  REQUIRE(empty);
  CHECK_FALSE(empty->has_value());
}

TEST_CASE("fd handoff: a message without exactly one descriptor is refused and closes them") {
  Channel channel;
  auto encoded = encodeHandoff(sampleHandoff());
  REQUIRE(encoded);
  sendRaw(channel.fds[0], encoded.value(), -1, 0);
  auto none = receiveHandoff(channel.fds[1]);
  REQUIRE_FALSE(none);
  CHECK(none.error().kind == ErrorKind::kInvalid);

  std::array<int, 2> pipeFds{};
  REQUIRE(::pipe(pipeFds.data()) == 0);
  sendRaw(channel.fds[0], encoded.value(), pipeFds[1], 2);
  ::close(pipeFds[1]);
  auto two = receiveHandoff(channel.fds[1]);
  REQUIRE_FALSE(two);
  CHECK(two.error().kind == ErrorKind::kInvalid);
  // Both received copies were closed: the read end sees end of file.
  char byte = 0;
  CHECK(::read(pipeFds[0], &byte, 1) == 0);

  // A bad message with a descriptor: the descriptor is closed too, and the channel still works.
  REQUIRE(::pipe(pipeFds.data()) == 0);
  std::vector<uint8_t> bad = encoded.value();
  bad[0] = 'X';
  sendRaw(channel.fds[0], bad, pipeFds[1], 1);
  ::close(pipeFds[1]);
  auto refused = receiveHandoff(channel.fds[1]);
  REQUIRE_FALSE(refused);
  CHECK(::read(pipeFds[0], &byte, 1) == 0);
  ::close(pipeFds[0]);

  REQUIRE(::pipe(pipeFds.data()) == 0);
  REQUIRE(sendHandoff(channel.fds[0], pipeFds[1], sampleHandoff()));
  auto fine = receiveHandoff(channel.fds[1]);
  REQUIRE(fine);
  REQUIRE(fine->has_value());
  CHECK(isOpen((*fine)->connectionFd));
  ::close((*fine)->connectionFd);
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
}

TEST_CASE("fd handoff: a closed channel is unavailable on both sides") {
  Channel channel;
  ::close(channel.fds[0]);
  channel.fds[0] = -1;
  auto received = receiveHandoff(channel.fds[1]);
  REQUIRE_FALSE(received);
  CHECK(received.error().kind == ErrorKind::kUnavailable);

  Channel other;
  ::close(other.fds[1]);
  other.fds[1] = -1;
  std::array<int, 2> pipeFds{};
  REQUIRE(::pipe(pipeFds.data()) == 0);
  auto sent = sendHandoff(other.fds[0], pipeFds[1], sampleHandoff());
  REQUIRE_FALSE(sent);
  CHECK(sent.error().kind == ErrorKind::kUnavailable);
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
}

}  // namespace
}  // namespace ot::mesh

namespace ot::mesh {
namespace {

TEST_CASE("fd handoff: the default socket sits beside the control socket") {
  CHECK(defaultHandoffSocketPath("/run/opentunnel/control.sock") ==
        "/run/opentunnel/mesh-handoff.sock");
  CHECK(defaultHandoffSocketPath("control.sock") == "mesh-handoff.sock");
  CHECK(defaultHandoffSocketPath("/control.sock") == "/mesh-handoff.sock");
}

}  // namespace
}  // namespace ot::mesh
