// Forwards one API request to controld's HTTP API on its unix socket and hands the whole response
// back, on the relay's loop. One upstream connection per request (a local unix socket is cheap),
// sent with `Connection: close` and `X-OpenTunnel-Client-Address: <visitor address>` (controld
// believes that header only on this socket). The response is read until controld closes, at most
// 16 MiB, and checked to be one complete HTTP/1.1 response (common/http_parser).
//
// Failures (no socket, refused, reset, timeout of 30 s, oversized or malformed answer, the control
// session going down while the call waits: failAll) give an Error; the caller answers 503 with a
// JSON ServiceUnavailableError body (see unavailableResponse). Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/http_parser.h"
#include "common/result.h"

namespace ot::relayd {

struct ProxiedResponse {
  HttpMessage message;       // controld's final answer (interim 1xx skipped), body collected
  bool headRequest = false;  // it answers HEAD: a head only, its Content-Length kept as sent
};

class ApiProxyCall;  // opaque: one request in flight

class ApiProxy {
 public:
  using Done = std::function<void(Result<ProxiedResponse>)>;

  ApiProxy(uv_loop_t* loop, std::string socketPath, uint64_t timeoutMs = 30'000);
  ~ApiProxy();  // cancels every call in flight (their callbacks are not run)
  ApiProxy(const ApiProxy&) = delete;
  ApiProxy& operator=(const ApiProxy&) = delete;

  // `request` is a complete serialized HTTP/1.1 request (request line, headers, body) that already
  // carries Connection: close and the client-address header. `done` runs on the loop exactly once
  // unless cancel() is called first. The returned id identifies the call for cancel().
  uint64_t send(std::vector<uint8_t> request, Done done);
  // The caller went away (the visitor closed): drop the call, never run its callback.
  void cancel(uint64_t callId);
  // controld is known to be gone (the control session went down): every call in flight ends now
  // with an kUnavailable error instead of waiting out its timeout. Calls sent from inside those
  // callbacks are not touched. Returns how many calls were ended.
  size_t failAll(const std::string& why);

  [[nodiscard]] size_t inFlight() const;

 private:
  friend class ApiProxyCall;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Header fields that describe one hop (Connection and the fields it governs, the framing, the
// client-address field only relayd may set): never forwarded to controld or back.
[[nodiscard]] bool isHopHeader(std::string_view name);

// 503 {"_tag":"ServiceUnavailableError","message":"<message>"} with Content-Type
// application/json, Content-Length, Retry-After: 5, and Connection: close when `close`.
[[nodiscard]] std::vector<uint8_t> unavailableResponse(const std::string& message, bool close);

// Any JSON error answer in the API's shape: {"_tag":tag,"message":message}.
[[nodiscard]] std::vector<uint8_t> jsonErrorResponse(
    int status, const std::string& tag, const std::string& message, bool close,
    const std::vector<std::pair<std::string, std::string>>& extraHeaders = {});

}  // namespace ot::relayd
