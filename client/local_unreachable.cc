#include "client/local_unreachable.h"

namespace ot::client {

std::string badGatewayResponse(const LocalTarget& target, std::string_view error) {
  const bool v6 = target.host.find(':') != std::string::npos;
  const std::string address =
      (v6 ? "[" + target.host + "]" : target.host) + ":" + std::to_string(target.port);
  std::string body = "502 Bad Gateway: the tunnel is up, but otunnel could not reach the local ";
  body += "service at " + address + " (" + std::string(error) + ").\n";
  std::string response = "HTTP/1.1 502 Bad Gateway\r\n";
  response += "Content-Type: text/plain; charset=utf-8\r\n";
  response += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  response += "Cache-Control: no-store\r\n";
  response += "Connection: close\r\n\r\n";
  return response + body;
}

}  // namespace ot::client
