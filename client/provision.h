// Getting otunnel ready to connect: a tunnel (the saved one when the server still knows it, else a
// new one), a key and CSR made here, and the certificate the server issues for them. Blocking
// (HTTP, files, polling): runs at startup on the main thread before the event loop starts.
//
// Progress lines for people ("otunnel: issuing certificate...") go through `say`.
//
// No outage of the control plane stops a client that could connect: when the server cannot be
// asked (no answer, 5xx, 429) and the state directory holds a tunnel with its token, key and a
// current certificate for its names, that tunnel is used as it is (Provisioned::unchecked) and
// the CertificateWatcher checks it with the server in the background.
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
  // Taken from the state directory without the server's word (it could not be asked): the
  // server is to be asked in the background until it answers.
  bool unchecked = false;
  std::string uncheckedReason;  // why the server could not be asked
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
