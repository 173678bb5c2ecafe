// The client half of the bridge's WebSocket opening handshake (docs/protocol.md section 1), as
// pure logic: the request for GET /api/tunnel/<id>/bridge, then the relay's answer parsed and
// checked (101 with the right accept key, or a refusal with its status and JSON `_tag`). Used by
// RelayTransport on the loop thread; no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "client/backoff.h"
#include "common/http_parser.h"

namespace ot::client {

// Why an attempt failed before the upgrade succeeded.
struct TransportFailure {
  int httpStatus = 0;      // the relay's answer to the upgrade when it was not 101, else 0
  std::string tag;         // `_tag` of its JSON body, when it had one
  std::string text;        // for people
  bool permanent = false;  // our own configuration cannot work (e.g. a tunnel id unfit for a path)
  RetryHint retry;         // busy (restarting, shedding) or broken: how soon to try again
};

class RelayUpgrade {
 public:
  // nullopt when the domain, path or user agent cannot go into a request head.
  [[nodiscard]] static std::optional<RelayUpgrade> create(std::string_view domain,
                                                          std::string_view path,
                                                          std::string_view userAgent,
                                                          std::span<const uint8_t, 16> nonce);

  // The request head, to write once.
  [[nodiscard]] const std::string& request() const { return request_; }

  enum class Outcome : uint8_t { kNeedMore, kUpgraded, kFailed };
  struct Step {
    Outcome outcome = Outcome::kNeedMore;
    size_t consumed = 0;       // kUpgraded: bytes after this offset are the WebSocket stream
    TransportFailure failure;  // kFailed
  };

  // The relay's bytes, in any pieces. kUpgraded and kFailed are final.
  [[nodiscard]] Step feed(std::span<const uint8_t> bytes);
  // The relay closed the connection: a refusal whose body ran to the end completes here.
  [[nodiscard]] Step finish();

 private:
  RelayUpgrade(std::string request, std::string key);
  [[nodiscard]] Step refused() const;

  std::string request_;
  std::string key_;
  HttpParser parser_;
};

}  // namespace ot::client
