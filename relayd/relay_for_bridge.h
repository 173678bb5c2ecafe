// What a bridge session may ask of the relay (implemented by Relay): its key and id, the attach
// decision, the tunnel table's and controld's bookkeeping of attaches, detaches, drains and
// finished streams. BridgeSession names only this, so its unit tests run it against a fake relay
// (tests/relayd/bridge_session_test.cc). Loop thread only.
#pragma once

#include <cstdint>
#include <string>

#include "common/bridge_control.h"
#include "relayd/relay_metrics.h"

namespace ot::relayd {

class BridgeSession;

class RelayForBridge {
 public:
  // A key for a new session; the session gives it back when it is destroyed.
  virtual uint64_t registerBridge(BridgeSession* bridge) = 0;
  virtual void unregisterBridge(uint64_t key) = 0;
  [[nodiscard]] virtual std::string newBridgeId(uint64_t key) const = 0;
  // Decides the attach; answers through bridge->attachAllowed / attachRefused (maybe later, and
  // not at all if the bridge has gone by then).
  virtual void authorizeAttach(BridgeSession* bridge) = 0;
  // The bridge's attach was refused with bad_token: counts against its source address.
  virtual void attachFailed(const BridgeSession& bridge) = 0;
  virtual void bridgeAttached(BridgeSession* bridge) = 0;
  virtual void bridgeDetached(BridgeSession* bridge, DetachOutcome reason) = 0;
  // The bridge drains: no new visitors for it.
  virtual void bridgeDraining(const std::string& tunnelId, uint64_t bridgeKey) = 0;
  // The attached bridge's otunnel sent a text message: a `status` report (docs/pools-status.md)
  // is kept, anything else ignored (protocol.md 4.5).
  virtual void bridgeStatus(BridgeSession* /*bridge*/, std::string_view /*text*/) {}
  // One of the bridge's streams ended, with its bytes in each direction and the origin the
  // bridge attached as ("" unnamed), for usage per origin.
  virtual void streamClosed(const std::string& tunnelId, uint64_t bridgeKey,
                            const std::string& origin, uint64_t bytesIn, uint64_t bytesOut) = 0;

 protected:
  ~RelayForBridge() = default;
};

}  // namespace ot::relayd
