// One mesh link's connection on the mesh node's loop (docs/mesh.md "How it is wired"): the TCP
// socket (dialed by this machine, or handed over by relayd with the bytes it already read), the
// challenge and response (MeshDialer / MeshAcceptor), then the frames in (FrameReader,
// LinkReceiver) and out (OutboundQueue, one write in flight). What the link does not decide is
// its owner's (the node): whether a proven peer may link, what a frame does to the table, when a
// dead or duplicate link closes. Loop thread only.
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/mesh_handshake.h"
#include "controld/mesh/frame_reader.h"
#include "controld/mesh/link_receiver.h"
#include "controld/mesh/mesh_metrics.h"
#include "controld/mesh/outbound_queue.h"

namespace ot::mesh {

class MeshLink;

class LinkOwner {
 public:
  // The peer proved the secret: the owner sends its hello and snapshot.
  virtual void linkProven(MeshLink& link) = 0;
  // A frame the LinkReceiver passed (a whole snapshot once its last part is in).
  virtual void linkFrame(MeshLink& link, Frame frame) = 0;
  // The socket is closed (closeReason() says why); the owner destroys the link in this call.
  virtual void linkClosed(MeshLink& link) = 0;

 protected:
  ~LinkOwner() = default;
};

struct LinkSetup {
  std::string secret;  // INTERNAL_TOKEN
  std::string selfId;
  bool outbound = false;
  std::string dialTarget;     // outbound: the canonical address dialed
  std::string remoteAddress;  // inbound: the peer's ip:port as relayd's accept saw it
};

class MeshLink {
 public:
  MeshLink(uv_loop_t* loop, LinkOwner& owner, MeshMetrics& metrics, LinkSetup setup);
  ~MeshLink() = default;
  MeshLink(const MeshLink&) = delete;
  MeshLink& operator=(const MeshLink&) = delete;

  // Outbound: connects from `source` (its port 0) to `target`. A failure closes the link.
  void dial(const sockaddr_storage& source, const sockaddr_storage& target);
  // Inbound: takes the handed-over socket and feeds the acceptor what relayd already read.
  void adopt(int fd, std::span<const uint8_t> prefix);

  // Encodes (sent_at now), counts and queues one frame; closes the link when the peer is
  // kMaxFramesBehind frames behind. `type` names already-encoded frames.
  void send(const Frame& frame);
  void sendEncoded(std::string bytes, std::string_view type);

  // The link's timers: the handshake limit, a ping when idle, the dead-peer rule.
  void tick(int64_t nowMs, int64_t pingMs, int64_t deadMs, int64_t handshakeMs);
  void close(std::string_view reason);

  [[nodiscard]] bool proven() const { return proven_; }
  [[nodiscard]] bool closing() const { return closing_; }
  [[nodiscard]] const std::string& closeReason() const { return closeReason_; }
  [[nodiscard]] bool outbound() const { return setup_.outbound; }
  [[nodiscard]] const std::string& dialTarget() const { return setup_.dialTarget; }
  [[nodiscard]] const std::string& remoteAddress() const { return setup_.remoteAddress; }
  [[nodiscard]] const std::string& peerMachine() const { return peerMachine_; }
  [[nodiscard]] const std::optional<Hello>& hello() const;
  [[nodiscard]] bool wasUp() const { return wasUp_; }
  void markUp() { wasUp_ = true; }
  [[nodiscard]] size_t queuedFrames() const { return queue_ ? queue_->frames() : 0; }

 private:
  static void onConnect(uv_connect_t* request, int status);
  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onWritten(uv_write_t* request, int status);
  static void onClosed(uv_handle_t* handle);

  void startReading();
  void receive(std::string_view bytes);
  void handshakeStep(const HandshakeStep& step, HandshakeBase& handshake);
  void readFrames();
  void writeRaw(std::string bytes);
  void pump();
  [[nodiscard]] int64_t now() const { return static_cast<int64_t>(uv_now(loop_)); }
  [[nodiscard]] uv_stream_t* stream() { return reinterpret_cast<uv_stream_t*>(&tcp_); }

  uv_loop_t* loop_;
  LinkOwner& owner_;
  MeshMetrics& metrics_;
  LinkSetup setup_;
  uv_tcp_t tcp_{};
  uv_connect_t connect_{};
  uv_write_t writeReq_{};
  bool writing_ = false;
  bool closing_ = false;
  bool proven_ = false;
  bool wasUp_ = false;
  std::string closeReason_;
  int64_t createdAtMs_;
  std::optional<MeshDialer> dialer_;
  std::optional<MeshAcceptor> acceptor_;
  std::string peerMachine_;
  FrameReader reader_;
  std::optional<LinkReceiver> receiver_;
  std::optional<OutboundQueue> queue_;
  std::array<char, 64 * 1024> readBuffer_{};
};

}  // namespace ot::mesh
