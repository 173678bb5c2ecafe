// Challenge records in pebble-challtestsrv, Pebble's test DNS, through its management API (for
// tests and local development with DNS_PROVIDER=challtestsrv). Blocking; any thread may call it.
//
// What the server does (checked against pebble-challtestsrv 2.4): /set-txt adds a value to the
// host, so a hostname and its wildcard can both be answered under one name; /clear-txt drops every
// value of the host; hosts are matched as fully qualified names, so the trailing dot is added
// here. Since a clear drops all values, deleteTxt re-adds the values this provider created under
// that name and has not deleted yet. The server cannot list its records, so listChallengeRecords
// answers an empty list (there is nothing for a sweep to do in a test DNS that forgets on restart).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "controld/acme/dns_provider.h"

namespace ot::controld {

class ChalltestsrvDns final : public DnsProvider {
 public:
  // management_url: e.g. "http://127.0.0.1:8055".
  explicit ChalltestsrvDns(std::string managementUrl, int64_t timeoutMs = 10'000);

  Result<TxtRecord> createTxt(const std::string& name, const std::string& value) override;
  Status deleteTxt(const TxtRecord& record) override;
  Result<std::vector<TxtRecord>> listChallengeRecords(const std::string& domain) override;
  [[nodiscard]] const char* name() const override { return "challtestsrv"; }

 private:
  Status post(const std::string& path, const std::string& body);

  std::string url_;
  int64_t timeoutMs_;
  // Values created and not yet deleted, by fully qualified host; one mutex around each change so
  // a clear and its re-adds are not interleaved with another call for the same host.
  std::mutex mutex_;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace ot::controld
