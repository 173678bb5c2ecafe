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
  request.userAgent = "opentunnel-controld";
  if (!accept.empty()) request.headers.push_back("Accept: " + accept);
  if (method == "POST") {
    request.headers.emplace_back("Content-Type: application/jose+json");
    request.body = body;
  }
  request.caFile = options.caBundle;
  request.keepSystemRoots = true;
  request.connectTimeoutMs = options.connectTimeoutMs;
  request.totalTimeoutMs = options.totalTimeoutMs;
  request.maxBodyBytes = kMaxBodyBytes;
  request.cancel = &cancel;
  Result<http::CurlReply> reply = http::performCurl(request);
  if (!reply) {
    const AcmeReason reason =
        reply.error().kind == ErrorKind::kTimeout ? AcmeReason::kTimeout : AcmeReason::kNetwork;
    return acmeError(reason, std::string(method) + " " + url + ": " + reply.error().message);
  }
  AcmeHttpResponse response;
  response.status = reply->status;
  response.contentType = reply->header("content-type");
  response.location = reply->header("location");
  response.replayNonce = reply->header("replay-nonce");
  const std::string retryAfter = reply->header("retry-after");
  if (!retryAfter.empty()) response.retryAfterMs = http::parseRetryAfterMs(retryAfter, unixNowMs());
  response.body = std::move(reply->body);
  return response;
}

}  // namespace ot::controld
