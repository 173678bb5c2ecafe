// The tunnel otunnel keeps between runs, one JSON file per server in the state directory: the
// token (shown by the server only once), the private key and CSR, and the last certificate. The
// files hold secrets: the directory is created 0700 and every file written 0600, atomically
// (a temp file, fsync, rename), so a crash never leaves half a file. Blocking file I/O: call it
// at startup or from the renewal thread, never from the event loop.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "client/server_url.h"
#include "common/result.h"

namespace ot::client {

struct TunnelState {
  std::string server;  // the server's base URL, for people reading the file
  std::string id;
  std::string hostname;
  std::string url;
  std::string token;
  std::string keyPem;
  std::string csrPem;
  std::string chainPem;  // "" until the first certificate is ready
};

// $OTUNNEL_STATE_DIR, else $XDG_CONFIG_HOME/otunnel, else $HOME/.config/otunnel; std::nullopt
// when none is set. `getenv` is injected for tests (nullptr or "" means unset).
[[nodiscard]] std::optional<std::string> defaultStateDir(
    const std::function<const char*(const char*)>& getenv);

// "<dir>/<host>_<port>.json", the host sanitized to a-z 0-9 . - (anything else becomes _).
[[nodiscard]] std::string stateFilePath(std::string_view stateDir, const ServerUrl& server);

// std::nullopt when the file does not exist; kInvalid naming the file when it exists but is not
// a state file (it is left alone: the token in it may be the only copy).
[[nodiscard]] Result<std::optional<TunnelState>> loadTunnelState(const std::string& path);

// Creates the directory (0700) if needed and replaces the file atomically, mode 0600.
[[nodiscard]] Status saveTunnelState(const std::string& path, const TunnelState& state);

// Writes `content` to `path` atomically with mode 0600 (the directory must exist).
[[nodiscard]] Status writePrivateFile(const std::string& path, std::string_view content);

// mkdir -p with mode 0700 for the directories it creates.
[[nodiscard]] Status makePrivateDirectory(const std::string& path);

}  // namespace ot::client
