// relayd's internal listener (INTERNAL_LISTEN): the port other machines of the region mesh reach
// this one at (docs/mesh.md "How it is wired"). Nothing on it trusts the network. Each connection
// gets 10 s to send its first line (at most 1 KiB), and at most 256 connections wait for theirs at
// once; then the line decides:
//
//   OPENTUNNEL-ALIVE/2 ...  a peer asking whether this machine's data plane is up: answered here,
//                           signed (common/alive_probe.h), then closed;
//   OPENTUNNEL-MESH/2 ...   a mesh link, and an HTTP request line (a route check): controld's,
//   <METHOD> <path> HTTP/1.x  handed to it with the bytes read so far (common/fd_handoff.h) over
//                           MESH_HANDOFF_SOCKET; closed when controld does not take it;
//   anything else           closed.
//
//   OPENTUNNEL-FORWARD/2 ...  a visitor forwarded by another machine (docs/mesh.md "Forwarding in
//                           relayd"): the
//                           signed header is checked (common/forward_header.h: addressed to this
//                           machine, signed within 30 s, nonce never seen, from a machine linked
//                           now at the address the connection comes from), then the connection and
//                           the bytes after the header go to `acceptForward`
//                           (relayd/forwarded_visitor.h). Without acceptForward they are refused
//                           (forward_not_wired).
//
// Every outcome is counted: opentunnel_mesh_internal_connections_total{kind} for what was taken,
// opentunnel_mesh_internal_refused_total{reason} for what was closed (the proof errors by their
// names). Loop thread only; nothing here blocks.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/alive_probe.h"
#include "common/config.h"
#include "common/forward_header.h"
#include "common/result.h"

namespace ot::relayd {

struct RelayContext;

struct InternalListenerOptions {
  config::ListenAddress address;
  std::string secret;             // INTERNAL_TOKEN
  std::string machineId;          // this machine's
  std::string handoffSocketPath;  // controld's MESH_HANDOFF_SOCKET
  // This machine's answer to a liveness question, asked when one arrives.
  std::function<mesh::AliveState()> aliveState;
  // Whether `machineId` is linked now and `peerHost` (the connection's source IP) is its linked
  // address (MeshRouteTable::linkedFrom). Unset: no sender is believed.
  std::function<bool(std::string_view machineId, std::string_view peerHost)> linkedSender;
  // Takes a forwarded visitor whose header checked out: its descriptor (the callee's from now
  // on), the header, and the bytes read after the header's line.
  std::function<void(int fd, const mesh::ForwardHeader& header, std::span<const uint8_t> rest)>
      acceptForward;
  // The wall clock signed headers are checked against (Unix ms); unixNowMs when unset.
  std::function<int64_t()> wallClock;
};

class InternalListener {
 public:
  [[nodiscard]] static Result<std::unique_ptr<InternalListener>> open(
      RelayContext& context, InternalListenerOptions options);
  ~InternalListener();  // closes the listener and every connection still waiting for its line
  InternalListener(const InternalListener&) = delete;
  InternalListener& operator=(const InternalListener&) = delete;

  [[nodiscard]] uint16_t port() const;
  // Stops accepting; connections already reading their first line finish it.
  void close();

  struct Impl;

 private:
  explicit InternalListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ot::relayd
