// DNS-01 challenge records behind one interface, so the ACME client does not care whether they go
// to Pebble's test DNS (challtestsrv) or a real zone (Cloudflare). Implementations block (HTTP
// through libcurl) and are called from job worker threads; they must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace ot::controld {

struct TxtRecord {
  std::string id;     // the provider's record ID ("" when the provider has none, e.g. challtestsrv)
  std::string name;   // e.g. "_acme-challenge.abc.example.com" (no trailing dot)
  std::string value;  // the key authorization digest (base64url)
  int64_t createdUnixMs = 0;  // 0 when the provider does not say
};

class DnsProvider {
 public:
  virtual ~DnsProvider() = default;

  // Adds one TXT record (several values may exist under one name: the host and its wildcard).
  virtual Result<TxtRecord> createTxt(const std::string& name, const std::string& value) = 0;
  // Deletes the record. A record that is already gone counts as deleted (Ok). Rate limits (429)
  // and server errors (5xx) are retried a few times inside before giving up with kUnavailable.
  virtual Status deleteTxt(const TxtRecord& record) = 0;
  // Every _acme-challenge TXT record under `domain` (for the sweep of leftovers).
  virtual Result<std::vector<TxtRecord>> listChallengeRecords(const std::string& domain) = 0;
  [[nodiscard]] virtual const char* name() const = 0;
};

}  // namespace ot::controld
