// Getting otunnel ready to connect: a tunnel (the saved one when the server still knows it, else a
// new one), a key and CSR made here, and the certificate the server issues for them. Blocking
// (HTTP, files, polling): runs at startup on the main thread before the event loop starts.
//
// Progress lines for people ("otunnel: issuing certificate...") go through `say`.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "client/api_client.h"
#include "client/tunnel_state.h"
#include "common/result.h"

namespace ot::client {

struct ProvisionOptions {
  std::string stateDir;
  std::optional<std::string> wantedId;  // a new tunnel asks for this ID; a saved one must match
  bool wildcard = false;     // named routes: the certificate must also cover *.<hostname>
  bool passthrough = false;  // `otunnel tls`: also write the key and chain for the local server
  std::chrono::milliseconds issueTimeout{120'000};
  std::function<void(const std::string&)> say;  // one line, without a newline; may be empty
  // Waits between certificate polls; injected by tests. Default: std::this_thread::sleep_for.
  std::function<void(std::chrono::milliseconds)> sleep;
};

struct Provisioned {
  TunnelState state;      // with the ready chain
  std::string statePath;  // the state file
  std::string keyFile;    // passthrough only: <stateDir>/<id>.key.pem
  std::string chainFile;  // passthrough only: <stateDir>/<id>.chain.pem
};

// The whole flow; an error says what failed in one line (the server's message included).
[[nodiscard]] Result<Provisioned> provisionTunnel(const ApiClient& api,
                                                  const ProvisionOptions& options);

// A new chain for a provisioned tunnel (renewal): saves it in the state file and, in passthrough
// mode, rewrites the chain file. Blocking file I/O.
[[nodiscard]] Status saveCertificate(Provisioned& provisioned, const std::string& chainPem);

// The API domain of a tunnel: its hostname without the leading "<id>.".
[[nodiscard]] std::string tunnelDomain(const TunnelState& state);

}  // namespace ot::client
