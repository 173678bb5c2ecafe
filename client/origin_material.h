// What a second origin of a tunnel needs to serve it in `http` mode without ever holding the
// tunnel's token or sending the key anywhere (docs/pools-dialer.md "A second machine"): the
// owner's state file, copied to the origin's state directory with its "token" member deleted.
// With --credential, otunnel reads that file (id, hostname, key, certificate) instead of
// provisioning through the API, and re-reads it every few minutes so a renewed certificate that
// the owner's otunnel saved, and the user copied over again, is picked up without a restart.
#pragma once

#include <uv.h>

#include <chrono>
#include <functional>
#include <string>

#include "client/provision.h"
#include "common/result.h"

namespace ot::client {

inline constexpr std::chrono::minutes kOriginReloadInterval{10};

// Parses a state file's text as an origin copy: id, hostname, key and (in http mode) a chain are
// required, the token is neither needed nor used. Pure.
[[nodiscard]] Result<TunnelState> parseOriginState(const std::string& text, bool needChain);

// Reads `path` (blocking: at startup only) into what TunnelClient runs with.
[[nodiscard]] Result<Provisioned> loadOriginMaterial(const std::string& path, bool needChain);

// Re-reads the file on libuv's thread pool every `interval`; a changed chain for the same key
// goes to `onRenewed` on the loop thread. Loop thread only.
class OriginReloader {
 public:
  using OnRenewed = std::function<void(const std::string& chainPem)>;

  OriginReloader(uv_loop_t* loop, std::string path, std::string keyPem, std::string chainPem,
                 std::chrono::milliseconds interval, OnRenewed onRenewed);
  OriginReloader(const OriginReloader&) = delete;
  OriginReloader& operator=(const OriginReloader&) = delete;

  void start();
  void close();  // a read in flight finishes; the loop waits for it

 private:
  static void onTick(uv_timer_t* timer);

  uv_loop_t* loop_;
  std::string path_;
  std::string keyPem_;
  std::string chainPem_;
  std::chrono::milliseconds interval_;
  OnRenewed onRenewed_;
  uv_timer_t timer_{};
  bool reading_ = false;
  bool closed_ = false;
};

}  // namespace ot::client
