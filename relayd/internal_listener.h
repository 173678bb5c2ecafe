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
// Forwarded visitors (OPENTUNNEL-FORWARD/2) are the next step of the wiring: until relayd
// forwards, they are refused like an unknown line, counted apart.
//
// Every outcome is counted: opentunnel_mesh_internal_connections_total{kind} for what was taken,
// opentunnel_mesh_internal_refused_total{reason} for what was closed (the proof errors by their
// names). Loop thread only; nothing here blocks.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/alive_probe.h"
#include "common/config.h"
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
