// The mesh node's settings (docs/mesh.md "Settings"), checked once at start-up from controld's
// flags: INTERNAL_LISTEN (off: no mesh at all), INTERNAL_TOKEN, INTERNAL_ADDRESS, MESH_PEERS,
// MESH_DNS, MESH_DISCOVERY_MS, MESH_PING_MS, MESH_DEAD_MS, MESH_HOLD_MS, MESH_VERIFY_ADDRESS and
// MESH_HANDOFF_SOCKET, with MACHINE_ID and REGION from the machine identity. Pure: no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/internal_settings.h"
#include "common/result.h"

namespace ot::mesh {

// A peer or internal address: an IP literal (no name: the node binds its source address to it and
// compares addresses) or, for MESH_PEERS, a name resolved when dialed.
struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;

  [[nodiscard]] std::string toString() const;  // "1.2.3.4:5", "[::1]:5"
  friend bool operator==(const HostPort&, const HostPort&) = default;
  friend auto operator<=>(const HostPort&, const HostPort&) = default;
};

// "host:port" or "[v6]:port", port 1-65535.
[[nodiscard]] std::optional<HostPort> parseHostPort(std::string_view text);
// The same address in one spelling (IP literals normalised), for comparing hello addresses.
[[nodiscard]] std::optional<std::string> canonicalAddress(std::string_view text);
// Orders addresses as the tie-breaks need it (IP bytes, then port; both sides compute the same).
// Unparsable ones compare as text after every address.
[[nodiscard]] bool addressLess(std::string_view a, std::string_view b);

// What controld's flags give (ControldConfig's mesh fields), before checking.
struct MeshFlags {
  config::ListenAddress internalListen{};  // off: single machine
  std::string internalToken;
  std::string internalAddress;  // empty: INTERNAL_LISTEN's
  std::string peers;            // comma-separated host:port
  std::string dns;              // a name; empty or "off": none
  int64_t discoveryMs = 5'000;
  int64_t pingMs = 1'000;
  int64_t deadMs = 5'000;
  int64_t holdMs = 120'000;  // MESH_HOLD_MS
  bool verifyAddress = true;
  std::string handoffSocket;  // empty: mesh-handoff.sock beside CONTROL_SOCKET
};

struct MeshSettings {
  std::string machineId;
  std::string region;
  std::string token;  // never logged
  HostPort internalAddress;
  std::vector<HostPort> peers;
  std::string dnsName;   // empty: no DNS discovery
  uint16_t dnsPort = 0;  // the port DNS peers are dialed at: INTERNAL_ADDRESS's
  int64_t discoveryMs = 5'000;
  int64_t pingMs = 1'000;
  int64_t deadMs = 5'000;
  // MESH_HOLD_MS: a peer whose link ended keeps its entries at most this long while its relayd
  // answers (docs/mesh.md "A controld restart drops no tunnel").
  int64_t holdMs = 120'000;
  bool verifyAddress = true;
  std::string handoffSocket;
  // Fixed by the spec; fields so tests can name them.
  int64_t handshakeTimeoutMs = 10'000;
  int64_t dialBackoffMinMs = 200;
  int64_t dialBackoffMaxMs = 5'000;
  int64_t higherAddressDelayMs = 2'000;
  int64_t goneFromDnsGraceMs = 30'000;
  // A new life links once its relayd's session snapshot came, or after this long without one.
  int64_t relayWaitMs = 10'000;
};

// nullopt with ok status: INTERNAL_LISTEN is off (no mesh). kInvalid with a message naming the
// setting otherwise. The message never contains the token.
[[nodiscard]] Result<std::optional<MeshSettings>> checkMeshFlags(const MeshFlags& flags,
                                                                 std::string_view machineId,
                                                                 std::string_view region,
                                                                 std::string_view controlSocket);

}  // namespace ot::mesh
