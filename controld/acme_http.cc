#include "controld/acme_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>

namespace ot::controld {
namespace {

struct Exchange {
  AcmeHttpResponse response;
  const std::atomic<bool>* cancel = nullptr;
};

std::string trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return std::string(text);
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

size_t onBody(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  exchange->response.body.append(data, size * count);
  return size * count;
}

int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

size_t onHeader(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const std::string_view line(data, size * count);
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    // A new status line (after a redirect or a 100 Continue) starts a new header set.
    if (line.substr(0, 5) == "HTTP/") exchange->response = AcmeHttpResponse{};
    return size * count;
  }
  const std::string_view name = line.substr(0, colon);
  const std::string value = trim(line.substr(colon + 1));
  if (equalsIgnoreCase(name, "Replay-Nonce")) {
    exchange->response.replay_nonce = value;
  } else if (equalsIgnoreCase(name, "Location")) {
    exchange->response.location = value;
  } else if (equalsIgnoreCase(name, "Content-Type")) {
    exchange->response.content_type = value;
  } else if (equalsIgnoreCase(name, "Retry-After")) {
    exchange->response.retry_after_ms = parseRetryAfterMs(value, nowUnixMs());
  }
  return size * count;
}

int onProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* exchange = static_cast<Exchange*>(user);
  return exchange->cancel->load() ? 1 : 0;
}

struct CurlFree {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistFree {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

std::optional<int64_t> parseRetryAfterMs(std::string_view value, int64_t now_unix_ms) {
  const std::string text = trim(value);
  if (text.empty()) return std::nullopt;
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    if (text.size() > 9) return int64_t{999'999'999} * 1000;
    return std::stoll(text) * 1000;
  }
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const int64_t at_ms = int64_t{timegm(&tm)} * 1000;
  return std::max<int64_t>(0, at_ms - now_unix_ms);
}

AcmeResult<AcmeHttpResponse> acmeHttp(const AcmeHttpOptions& options, std::string_view method,
                                      const std::string& url, const std::string& body,
                                      const std::string& accept,
                                      const std::atomic<bool>& cancel) {
  static std::once_flag global_init;
  std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  const std::unique_ptr<CURL, CurlFree> curl(curl_easy_init());
  if (!curl) return acmeError(AcmeReason::kNetwork, "cannot create a curl handle");
  Exchange exchange;
  exchange.cancel = &cancel;
  std::unique_ptr<curl_slist, SlistFree> headers;
  auto addHeader = [&headers](const std::string& header) {
    headers.reset(curl_slist_append(headers.release(), header.c_str()));
  };
  addHeader("User-Agent: opentunnel-controld");
  if (!accept.empty()) addHeader("Accept: " + accept);
  CURL* handle = curl.get();
  curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout_ms));
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(options.total_timeout_ms));
  if (!options.ca_bundle.empty()) {
    // CAINFO alone would replace the system roots; the system directory keeps them.
    curl_easy_setopt(handle, CURLOPT_CAINFO, options.ca_bundle.c_str());
    curl_easy_setopt(handle, CURLOPT_CAPATH, "/etc/ssl/certs");
  }
  if (method == "HEAD") {
    curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
  } else if (method == "POST") {
    addHeader("Content-Type: application/jose+json");
    curl_easy_setopt(handle, CURLOPT_POST, 1L);
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  addHeader("Expect:");
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &exchange);
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &exchange);
  curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, onProgress);
  curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &exchange);
  const CURLcode code = curl_easy_perform(handle);
  if (code != CURLE_OK) {
    const AcmeReason reason =
        code == CURLE_OPERATION_TIMEDOUT ? AcmeReason::kTimeout : AcmeReason::kNetwork;
    return acmeError(reason, std::string(method) + " " + url + ": " + curl_easy_strerror(code));
  }
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  exchange.response.status = static_cast<int>(status);
  return std::move(exchange.response);
}

}  // namespace ot::controld
