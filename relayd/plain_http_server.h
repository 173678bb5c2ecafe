// A small plain-HTTP/1.1 server on the relay's loop for HTTP_LISTEN (/health, otherwise a 301 to
// https://<domain><path>) and METRICS_LISTEN (/metrics). Requests are parsed with
// common/http_parser (limits: 8 KiB of headers, no bodies accepted beyond 64 KiB), answered by a
// synchronous handler, keep-alive honoured, idle connections closed after 30 s, at most 1024
// connections at once (more are closed at accept). Loop thread only.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/result.h"

namespace ot::relayd {

class RelayMetrics;

struct PlainRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string host;    // the Host header, "" when absent
};

struct PlainResponse {
  int status = 200;
  std::string contentType = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (e.g. Location)
};

class PlainHttpServer {
 public:
  using Handler = std::function<PlainResponse(const PlainRequest&)>;

  [[nodiscard]] static Result<std::unique_ptr<PlainHttpServer>> open(
      uv_loop_t* loop, const config::ListenAddress& address, std::string name, Handler handler,
      RelayMetrics* metrics);
  ~PlainHttpServer();  // closes the listener and every connection
  PlainHttpServer(const PlainHttpServer&) = delete;
  PlainHttpServer& operator=(const PlainHttpServer&) = delete;

  [[nodiscard]] uint16_t port() const;
  // Stops listening; open connections finish their current request and close.
  void close();

 private:
  struct Impl;
  explicit PlainHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The HTTP_LISTEN handler: GET/HEAD /health -> what `health` answers (relayd: relay_health.h; 200
// "ok" when it is empty); anything else -> 301 to https://<domain>[:httpsPort]<target> (the port
// only when it is not 443).
[[nodiscard]] PlainHttpServer::Handler redirectHandler(std::string domain, uint16_t httpsPort,
                                                       std::function<PlainResponse()> health);

}  // namespace ot::relayd
