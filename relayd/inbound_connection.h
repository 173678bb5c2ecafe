// A freshly accepted public TLS connection until it is routed: an optional PROXY v1/v2 header
// (required with PROXY_PROTOCOL=true), then TLS records until the ClientHello is complete (64 KiB,
// 10 s from accept), without consuming anything that cannot be replayed. Then the SNI decides:
// the API domain goes to an ApiConnection, a tunnel hostname to the Relay's visitor routing,
// anything else is closed and counted.
//
// Freed by the deferred-delete list once it has handed its socket on. Loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/client_hello.h"
#include "common/proxy_protocol.h"
#include "common/tcp_stream.h"
#include "relayd/relay_context.h"

namespace ot::relayd {

class Relay;

class InboundConnection final : public TcpStream::Handler, public Deferrable {
 public:
  // Adopts an accepted descriptor; the connection runs by itself from here on.
  static void accept(RelayContext& context, Relay& relay, int fd, PeerEndpoint peer);
  // Direct mode: a connection this relay dialed (direct_dialer.h), connected, its peer set to the
  // dialed address. No PROXY header is expected (it is our own connection) and only the API
  // domain is served on it (a bridge, never a visitor); `dialId` follows it to the bridge. The
  // relay is told (Relay::directDialEnded) when it closes unserved.
  static void adoptDialed(RelayContext& context, Relay& relay, TcpStream* stream, uint64_t dialId);

  void onRead(std::span<const uint8_t> bytes) override;
  void onEof() override;
  void onStreamError(int status) override;
  void onWritten(size_t bytes) override;
  void onClosed() override;

 private:
  InboundConnection(RelayContext& context, Relay& relay);
  void feedHello(std::span<const uint8_t> bytes);
  void route();
  void reject(VisitorOutcome outcome);
  void handOff();
  static void onTimer(TimerEntry* entry, void* owner);

  RelayContext& context_;
  Relay& relay_;
  TcpStream* stream_ = nullptr;
  std::optional<ProxyHeaderReader> proxy_;  // present until the PROXY header is read
  ClientHelloReader hello_;
  uint64_t acceptedAtMs_ = 0;
  TimerEntry timer_;
  bool done_ = false;
  uint64_t dialId_ = 0;  // direct mode: the dial this connection came from (0: accepted)
};

}  // namespace ot::relayd
