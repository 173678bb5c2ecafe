// The receiving half of forwarding (docs/mesh.md "Forwarding in relayd"): an internal connection
// whose signed header checked out (relayd/internal_listener.h) carries a visitor another machine
// forwarded here. This reads the visitor's ClientHello after the header (64 KiB, 10 s from the
// header, as a public visitor's), requires its SNI to name the header's tunnel and route, and
// hands it to the router, which routes it like a local visitor (the header's visitor address as
// its peer: per-source limits, the bridge's `open` message) but never forwards it again. The
// sender hears `1\n` just before the stream's bytes when a bridge here took it, and `0\n` when no
// bridge here holds the route; other refusals (max_conns, the source's share, a bad hello) just
// close.
//
// Freed once it has handed its socket on, or after the socket closed. Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/client_hello.h"
#include "common/forward_header.h"
#include "common/tcp_stream.h"
#include "relayd/relay_context.h"
#include "relayd/sni_route.h"
#include "relayd/timer_wheel.h"

namespace ot::relayd {

enum class ForwardedRoute : uint8_t {
  kServed,    // a bridge here took it (accept() was called and answered true)
  kNoBridge,  // no bridge here holds the route: the caller answers 0 and closes
  kRejected,  // refused like a local visitor (the router counted it and closed the socket)
};

// Who routes a forwarded visitor: the Relay (Relay::routeForwarded). `accept` writes the `1`
// answer; the router calls it once it has picked a bridge and before the stream starts, and
// gives up (an error) when it answers false.
class ForwardedVisitorRouter {
 public:
  // `origin`: the one the sending machine chose ("" when it named none).
  virtual ForwardedRoute routeForwarded(TcpStream* stream, const SniTarget& target,
                                        std::vector<uint8_t> hello,
                                        const std::function<bool()>& accept,
                                        std::string_view origin) = 0;

 protected:
  ~ForwardedVisitorRouter() = default;
};

// opentunnel_mesh_internal_refused_total{reason} for a forward whose ClientHello names another
// tunnel or route than its header.
inline constexpr std::string_view kForwardHelloMismatch = "forward_hello_mismatch";

class ForwardedVisitor final : public TcpStream::Handler, public Deferrable {
 public:
  // Adopts `fd` (the internal connection, its header consumed); `rest` are the bytes read after
  // the header. The connection runs by itself from here on.
  static void start(RelayContext& context, ForwardedVisitorRouter& router, int fd,
                    const mesh::ForwardHeader& header, std::span<const uint8_t> rest);

  void onRead(std::span<const uint8_t> bytes) override;
  void onEof() override;
  void onStreamError(int status) override;
  void onWritten(size_t bytes) override;
  void onClosed() override;

 private:
  ForwardedVisitor(RelayContext& context, ForwardedVisitorRouter& router,
                   const mesh::ForwardHeader& header);
  void route();
  void close(VisitorOutcome outcome, bool reset);
  void answerNoBridge();
  static void onTimer(TimerEntry* entry, void* owner);

  RelayContext& context_;
  ForwardedVisitorRouter& router_;
  mesh::ForwardHeader header_;
  TcpStream* stream_ = nullptr;
  ClientHelloReader hello_;
  TimerEntry timer_;
  bool done_ = false;  // routed or closing: bytes read now are not ours
};

}  // namespace ot::relayd
