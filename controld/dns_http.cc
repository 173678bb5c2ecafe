#include "controld/dns_http.h"

#include <curl/curl.h>

#include <cctype>
#include <memory>
#include <mutex>
#include <string_view>

namespace ot::controld {
namespace {

// Bodies from the DNS APIs are small; a runaway answer fails the request instead of the process.
constexpr size_t kMaxBodyBytes = 16 * 1024 * 1024;

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

size_t onBody(char* data, size_t size, size_t count, void* user) {
  auto* reply = static_cast<DnsHttpReply*>(user);
  const size_t bytes = size * count;
  if (reply->body.size() + bytes > kMaxBodyBytes) return 0;  // curl fails with a write error
  reply->body.append(data, bytes);
  return bytes;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) {
    text.remove_suffix(1);
  }
  return text;
}

size_t onHeader(char* data, size_t size, size_t count, void* user) {
  auto* reply = static_cast<DnsHttpReply*>(user);
  const size_t bytes = size * count;
  const std::string_view line(data, bytes);
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == "retry-after") reply->retry_after = std::string(trim(line.substr(colon + 1)));
  }
  return bytes;
}

}  // namespace

Result<DnsHttpReply> performDnsHttp(const DnsHttpRequest& request) {
  initCurlOnce();
  std::unique_ptr<CURL, CurlFree> curl(curl_easy_init());
  if (curl == nullptr) return Error{ErrorKind::kInternal, "curl_easy_init failed"};
  CURL* handle = curl.get();
  std::unique_ptr<curl_slist, SlistFree> headers;
  for (const std::string& line : request.headers) {
    curl_slist* appended = curl_slist_append(headers.get(), line.c_str());
    if (appended == nullptr) return Error{ErrorKind::kInternal, "curl_slist_append failed"};
    (void)headers.release();
    headers.reset(appended);
  }
  DnsHttpReply reply;
  curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(request.connect_timeout_ms));
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(request.total_timeout_ms));
  curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (request.method == "POST" || !request.body.empty()) {
    curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  }
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &reply);
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &reply);
  const CURLcode code = curl_easy_perform(handle);
  if (code != CURLE_OK) {
    const ErrorKind kind =
        code == CURLE_OPERATION_TIMEDOUT ? ErrorKind::kTimeout : ErrorKind::kUnavailable;
    return Error{kind, std::string("HTTP request failed: ") + curl_easy_strerror(code)};
  }
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

std::string urlEncode(const std::string& text) {
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

}  // namespace ot::controld
