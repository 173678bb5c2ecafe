#include "common/curl_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <memory>
#include <mutex>

#include "common/text.h"

namespace ot::http {
namespace {

struct CurlFree {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistFree {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

void initCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Exchange {
  CurlReply reply;
  std::size_t maxBodyBytes = 0;
  bool tooLarge = false;
  const std::atomic<bool>* cancel = nullptr;
};

size_t onBody(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = size * count;
  if (exchange->reply.body.size() + bytes > exchange->maxBodyBytes) {
    exchange->tooLarge = true;
    return 0;  // curl fails the transfer with CURLE_WRITE_ERROR
  }
  exchange->reply.body.append(data, bytes);
  return bytes;
}

size_t onHeader(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const size_t bytes = size * count;
  const std::string_view line(data, bytes);
  // Each answer (a 100 Continue, a redirect, the final one) starts with its status line.
  if (line.starts_with("HTTP/")) {
    exchange->reply.headers.clear();
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    exchange->reply.headers.emplace_back(toLower(trim(line.substr(0, colon))),
                                         std::string(trim(line.substr(colon + 1))));
  }
  return bytes;
}

int onProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* exchange = static_cast<const Exchange*>(user);
  return exchange->cancel != nullptr && exchange->cancel->load() ? 1 : 0;
}

}  // namespace

std::string CurlReply::header(std::string_view lowerCaseName) const {
  for (const auto& [name, value] : headers) {
    if (name == lowerCaseName) return value;
  }
  return {};
}

Result<CurlReply> performCurl(const CurlRequest& request) {
  initCurlOnce();
  const std::unique_ptr<CURL, CurlFree> curl(curl_easy_init());
  if (curl == nullptr) return Error{ErrorKind::kInternal, "cannot create a curl handle"};
  CURL* handle = curl.get();

  std::unique_ptr<curl_slist, SlistFree> headers;
  std::unique_ptr<curl_slist, SlistFree> resolve;
  const auto append = [](std::unique_ptr<curl_slist, SlistFree>& list, const std::string& line) {
    curl_slist* appended = curl_slist_append(list.get(), line.c_str());
    if (appended == nullptr) return false;
    (void)list.release();  // curl_slist_append returned the same list, now one entry longer
    list.reset(appended);
    return true;
  };
  for (const std::string& line : request.headers) {
    if (!append(headers, line)) return Error{ErrorKind::kInternal, "curl_slist_append failed"};
  }
  // No 100-continue round trip: every body we send is small.
  if (!append(headers, "Expect:")) return Error{ErrorKind::kInternal, "curl_slist_append failed"};
  for (const std::string& entry : request.resolve) {
    if (!append(resolve, entry)) return Error{ErrorKind::kInternal, "curl_slist_append failed"};
  }

  Exchange exchange;
  exchange.maxBodyBytes = request.maxBodyBytes;
  exchange.cancel = request.cancel;
  char errorBuffer[CURL_ERROR_SIZE] = {};
  // curl's varargs read a long.
  const long connectMs = static_cast<long>(request.connectTimeoutMs);
  const long totalMs = static_cast<long>(request.totalTimeoutMs);
  curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // worker threads: no SIGALRM for timeouts
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS, connectMs);
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, totalMs);
  curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, errorBuffer);
  if (!request.userAgent.empty()) {
    curl_easy_setopt(handle, CURLOPT_USERAGENT, request.userAgent.c_str());
  }
  if (resolve != nullptr) curl_easy_setopt(handle, CURLOPT_RESOLVE, resolve.get());
  if (!request.caFile.empty()) {
    curl_easy_setopt(handle, CURLOPT_CAINFO, request.caFile.c_str());
    // CAINFO alone replaces the system roots; the system directory brings them back.
    if (request.keepSystemRoots) curl_easy_setopt(handle, CURLOPT_CAPATH, "/etc/ssl/certs");
  }
  if (request.method == "HEAD") {
    curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
  } else {
    if (request.method == "POST") {
      curl_easy_setopt(handle, CURLOPT_POST, 1L);
    } else if (request.method != "GET") {
      curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    if (request.method == "POST" || !request.body.empty()) {
      curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.c_str());
      curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
    }
  }
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
    if (code == CURLE_OPERATION_TIMEDOUT) {
      return Error{ErrorKind::kTimeout,
                   errorBuffer[0] != '\0' ? errorBuffer : curl_easy_strerror(code)};
    }
    if (code == CURLE_ABORTED_BY_CALLBACK) return Error{ErrorKind::kUnavailable, "cancelled"};
    if (exchange.tooLarge) {
      return Error{ErrorKind::kUnavailable,
                   "the answer is larger than " + std::to_string(request.maxBodyBytes) + " bytes"};
    }
    return Error{ErrorKind::kUnavailable,
                 errorBuffer[0] != '\0' ? errorBuffer : curl_easy_strerror(code)};
  }
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  exchange.reply.status = static_cast<int>(status);
  return std::move(exchange.reply);
}

std::optional<int64_t> parseRetryAfterMs(std::string_view value, int64_t nowUnixMs) {
  const std::string text(trim(value));
  if (text.empty()) return std::nullopt;
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    if (text.size() > 9) return int64_t{999'999'999} * 1000;
    return std::stoll(text) * 1000;
  }
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const int64_t atMs = int64_t{timegm(&tm)} * 1000;
  return std::max<int64_t>(0, atMs - nowUnixMs);
}

std::string percentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0x0f]);
    }
  }
  return out;
}

}  // namespace ot::http
