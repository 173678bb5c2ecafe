#include "controld/acme/acme_http.h"

#include "common/clock.h"
#include "common/curl_http.h"

namespace ot::controld {
namespace {

// ACME answers are JSON documents and certificate chains of a few KiB.
constexpr std::size_t kMaxBodyBytes = 4 * 1024 * 1024;

}  // namespace

AcmeResult<AcmeHttpResponse> acmeHttp(const AcmeHttpOptions& options, std::string_view method,
                                      const std::string& url, const std::string& body,
                                      const std::string& accept, const std::atomic<bool>& cancel) {
  http::CurlRequest request;
  request.method = std::string(method);
  request.url = url;
  request.user_agent = "opentunnel-controld";
  if (!accept.empty()) request.headers.push_back("Accept: " + accept);
  if (method == "POST") {
    request.headers.emplace_back("Content-Type: application/jose+json");
    request.body = body;
  }
  request.ca_file = options.ca_bundle;
  request.keep_system_roots = true;
  request.connect_timeout_ms = options.connect_timeout_ms;
  request.total_timeout_ms = options.total_timeout_ms;
  request.max_body_bytes = kMaxBodyBytes;
  request.cancel = &cancel;
  Result<http::CurlReply> reply = http::performCurl(request);
  if (!reply) {
    const AcmeReason reason =
        reply.error().kind == ErrorKind::kTimeout ? AcmeReason::kTimeout : AcmeReason::kNetwork;
    return acmeError(reason, std::string(method) + " " + url + ": " + reply.error().message);
  }
  AcmeHttpResponse response;
  response.status = reply->status;
  response.content_type = reply->header("content-type");
  response.location = reply->header("location");
  response.replay_nonce = reply->header("replay-nonce");
  const std::string retry_after = reply->header("retry-after");
  if (!retry_after.empty())
    response.retry_after_ms = http::parseRetryAfterMs(retry_after, unixNowMs());
  response.body = std::move(reply->body);
  return response;
}

}  // namespace ot::controld
