#include "controld/acme/acme_dns_check.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>

namespace ot::controld {
namespace {

constexpr size_t kHeaderSize = 12;
constexpr uint16_t kTypeTxt = 16;

uint16_t read16(std::span<const uint8_t> message, size_t at) {
  return static_cast<uint16_t>((message[at] << 8) | message[at + 1]);
}

// Skips a (possibly compressed) name; false when it runs past the end.
bool skipName(std::span<const uint8_t> message, size_t& at) {
  while (at < message.size()) {
    const uint8_t length = message[at];
    if ((length & 0xC0) == 0xC0) {
      at += 2;
      return at <= message.size();
    }
    at += 1;
    if (length == 0) return true;
    at += length;
  }
  return false;
}

}  // namespace

Result<std::vector<std::string>> parseTxtAnswer(std::span<const uint8_t> message) {
  const Error malformed{ErrorKind::kInvalid, "malformed DNS answer"};
  if (message.size() < kHeaderSize) return malformed;
  const uint16_t questions = read16(message, 4);
  const uint16_t answers = read16(message, 6);
  size_t at = kHeaderSize;
  for (uint16_t i = 0; i < questions; ++i) {
    if (!skipName(message, at) || at + 4 > message.size()) return malformed;
    at += 4;
  }
  std::vector<std::string> texts;
  for (uint16_t i = 0; i < answers; ++i) {
    if (!skipName(message, at) || at + 10 > message.size()) return malformed;
    const uint16_t type = read16(message, at);
    const uint16_t length = read16(message, at + 8);
    at += 10;
    if (at + length > message.size()) return malformed;
    if (type == kTypeTxt) {
      std::string text;
      size_t inner = at;
      while (inner < at + length) {
        const uint8_t piece = message[inner++];
        if (inner + piece > at + length) return malformed;
        text.append(reinterpret_cast<const char*>(message.data() + inner), piece);
        inner += piece;
      }
      texts.push_back(std::move(text));
    }
    at += length;
  }
  return texts;
}

Result<std::vector<std::string>> lookupTxt(const std::string& resolver, const std::string& name) {
  struct __res_state state {};
  if (res_ninit(&state) != 0) return Error{ErrorKind::kUnavailable, "res_ninit failed"};
  if (!resolver.empty()) {
    const size_t colon = resolver.rfind(':');
    uint16_t port = 53;
    std::string host = resolver;
    if (colon != std::string::npos) {
      host = resolver.substr(0, colon);
      const char* first = resolver.data() + colon + 1;
      const char* last = resolver.data() + resolver.size();
      if (std::from_chars(first, last, port).ptr != last || port == 0) {
        res_nclose(&state);
        return Error{ErrorKind::kInvalid, "ACME_DNS_RESOLVER needs an IPv4 host:port"};
      }
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
      res_nclose(&state);
      return Error{ErrorKind::kInvalid, "ACME_DNS_RESOLVER needs an IPv4 host:port"};
    }
    state.nscount = 1;
    state.nsaddr_list[0] = address;
  }
  state.retrans = 1;  // seconds per try; the caller polls again anyway
  state.retry = 2;
  std::array<uint8_t, 4096> answer{};
  const int length = res_nquery(&state, name.c_str(), ns_c_in, ns_t_txt, answer.data(),
                                static_cast<int>(answer.size()));
  const int failure = state.res_h_errno;
  res_nclose(&state);
  if (length < 0) {
    if (failure == HOST_NOT_FOUND || failure == NO_DATA) return std::vector<std::string>{};
    return Error{ErrorKind::kUnavailable, "no answer for the TXT lookup of " + name};
  }
  const size_t size = std::min(answer.size(), static_cast<size_t>(length));
  return parseTxtAnswer(std::span<const uint8_t>(answer.data(), size));
}

}  // namespace ot::controld
