// CloudflareDns against a local fake of the v4 API (dns_fake_cloudflare.h): the requests it makes,
// pagination, deletes of missing records, retries of 429 and 5xx, and its pure helpers.
#include "controld/acme/dns_cloudflare.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/controld/dns_fake_cloudflare.h"

namespace ot::controld {
namespace {

using testing::FakeCloudflare;

constexpr const char* kZone = "0123456789abcdef0123456789abcdef";
constexpr const char* kToken = "test-token-must-stay-secret";
// 43 characters of base64url, like a real key authorization digest.
constexpr const char* kValue = "dGhpcyBpcyBhIGNoYWxsZW5nZSB2YWx1ZSBvZiA0Mw_";
constexpr const char* kValue2 = "c2Vjb25kIGNoYWxsZW5nZSB2YWx1ZSBvZiA0MyBjaC-";

struct Harness {
  FakeCloudflare fake{kZone, kToken};
  std::vector<int64_t> sleeps;
  CloudflareDns dns{options()};

  CloudflareOptions options(const std::string& token = kToken) {
    CloudflareOptions o;
    o.zoneId = kZone;
    o.apiToken = token;
    o.apiUrl = fake.baseUrl();
    o.sleepMs = [this](int64_t ms) { sleeps.push_back(ms); };
    return o;
  }

  size_t countRequests(const std::string& prefix) {
    const auto all = fake.requests();
    return static_cast<size_t>(std::count_if(
        all.begin(), all.end(), [&](const std::string& r) { return r.rfind(prefix, 0) == 0; }));
  }
};

TEST_CASE("dns cloudflare: creates a TXT record with name, value and TTL 60") {
  Harness h;
  h.fake.setNow(1'750'000'000'123);
  auto created = h.dns.createTxt("_acme-challenge.abc.tunnel.test.", kValue);
  REQUIRE_MESSAGE(created.ok(), (created.ok() ? "" : created.error().message));
  CHECK(created->id.size() == 32);
  CHECK(created->name == "_acme-challenge.abc.tunnel.test");
  CHECK(created->value == kValue);
  CHECK(created->createdUnixMs == 1'750'000'000'123);

  REQUIRE(h.fake.bodies().size() == 1);
  const auto body = nlohmann::json::parse(h.fake.bodies()[0]);
  CHECK(body == nlohmann::json{{"type", "TXT"},
                               {"name", "_acme-challenge.abc.tunnel.test"},
                               {"content", kValue},
                               {"ttl", 60}});
  const auto records = h.fake.records();
  REQUIRE(records.size() == 1);
  CHECK(records.begin()->first == created->id);
  CHECK(records.begin()->second.name == "_acme-challenge.abc.tunnel.test");
  CHECK(records.begin()->second.content == kValue);
  CHECK(h.fake.requests() ==
        std::vector<std::string>{"POST /client/v4/zones/" + std::string(kZone) + "/dns_records"});
}

TEST_CASE("dns cloudflare: the host and its wildcard share a name; an identical record is reused") {
  Harness h;
  auto first = h.dns.createTxt("_acme-challenge.abc.tunnel.test", kValue);
  auto second = h.dns.createTxt("_acme-challenge.abc.tunnel.test", kValue2);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first->id != second->id);
  // A retried attempt creating the same value again gets the record that exists (81058).
  auto again = h.dns.createTxt("_acme-challenge.abc.tunnel.test", kValue);
  REQUIRE_MESSAGE(again.ok(), (again.ok() ? "" : again.error().message));
  CHECK(again->id == first->id);
  CHECK(again->value == kValue);
  CHECK(h.fake.records().size() == 2);
}

TEST_CASE("dns cloudflare: lists challenge records under the domain across pages") {
  Harness h;
  CloudflareOptions options = h.options();
  options.pageSize = 3;
  CloudflareDns dns(options);
  std::set<std::string> expected;
  for (int i = 0; i < 7; ++i) {
    const std::string name = "_acme-challenge.t" + std::to_string(i) + ".tunnel.test";
    h.fake.addRecord(name, kValue, 1'700'000'000'000 + i * 1000);
    expected.insert(name);
  }
  h.fake.addRecord("_acme-challenge.x.other.test", kValue, 1'700'000'000'000);
  h.fake.addRecord("www.tunnel.test", "v=spf1 -all", 1'700'000'000'000);
  h.fake.addRecord("_acme-challenge.nottunnel.test", kValue, 1'700'000'000'000);

  auto listed = dns.listChallengeRecords("tunnel.test");
  REQUIRE_MESSAGE(listed.ok(), (listed.ok() ? "" : listed.error().message));
  std::set<std::string> names;
  for (const TxtRecord& record : *listed) {
    names.insert(record.name);
    CHECK(record.value == kValue);  // quoted content is unquoted
    CHECK(record.id.size() == 32);
    const int index = record.name[17] - '0';  // the digit after "_acme-challenge.t"
    CHECK(record.createdUnixMs == 1'700'000'000'000 + index * 1000);
  }
  CHECK(listed->size() == 7);
  CHECK(names == expected);
  const auto requests = h.fake.requests();
  REQUIRE(requests.size() == 3);
  for (int page = 1; page <= 3; ++page) {
    const std::string& request = requests[static_cast<size_t>(page - 1)];
    CHECK(request.find("type=TXT") != std::string::npos);
    CHECK(request.find("name.startswith=_acme-challenge.") != std::string::npos);
    CHECK(request.find("name.endswith=.tunnel.test") != std::string::npos);
    CHECK(request.find("per_page=3&page=" + std::to_string(page)) != std::string::npos);
  }
}

TEST_CASE("dns cloudflare: deletes a record; a record already gone counts as deleted") {
  Harness h;
  const std::string id = h.fake.addRecord("_acme-challenge.abc.tunnel.test", kValue, 1);
  TxtRecord record{id, "_acme-challenge.abc.tunnel.test", kValue, 1};
  CHECK(h.dns.deleteTxt(record).ok());
  CHECK(h.fake.records().empty());
  CHECK(h.fake.requests().back() ==
        "DELETE /client/v4/zones/" + std::string(kZone) + "/dns_records/" + id);
  // Cloudflare's 404 with 81044, then the same code on a 400.
  CHECK(h.dns.deleteTxt(record).ok());
  h.fake.setMissingStatus(400);
  CHECK(h.dns.deleteTxt(record).ok());
  CHECK(h.countRequests("DELETE") == 3);
  CHECK(h.sleeps.empty());
}

TEST_CASE("dns cloudflare: 429 then success is retried after Retry-After") {
  Harness h;
  const std::string id = h.fake.addRecord("_acme-challenge.abc.tunnel.test", kValue, 1);
  h.fake.failNext(429, "2", 1);
  CHECK(h.dns.deleteTxt({id, "_acme-challenge.abc.tunnel.test", kValue, 1}).ok());
  CHECK(h.fake.records().empty());
  CHECK(h.countRequests("DELETE") == 2);
  CHECK(h.sleeps == std::vector<int64_t>{2000});
}

TEST_CASE("dns cloudflare: a 5xx three times in a row gives up as unavailable") {
  Harness h;
  const std::string id = h.fake.addRecord("_acme-challenge.abc.tunnel.test", kValue, 1);
  h.fake.failNext(503, "", 3);
  const Status deleted = h.dns.deleteTxt({id, "_acme-challenge.abc.tunnel.test", kValue, 1});
  REQUIRE_FALSE(deleted.ok());
  CHECK(deleted.error().kind == ErrorKind::kUnavailable);
  CHECK(deleted.error().message.find("503") != std::string::npos);
  CHECK(h.countRequests("DELETE") == 3);
  CHECK(h.sleeps == std::vector<int64_t>{500, 1000});
  CHECK(h.fake.records().size() == 1);
  // Two failures and then success is within the budget.
  h.sleeps.clear();
  h.fake.failNext(502, "", 2);
  CHECK(h.dns.deleteTxt({id, "_acme-challenge.abc.tunnel.test", kValue, 1}).ok());
  CHECK(h.fake.records().empty());
}

TEST_CASE("dns cloudflare: a refused token fails at once and is not in the error") {
  Harness h;
  CloudflareDns dns(h.options("wrong-token-value"));
  auto created = dns.createTxt("_acme-challenge.abc.tunnel.test", kValue);
  REQUIRE_FALSE(created.ok());
  CHECK(created.error().kind == ErrorKind::kInvalid);
  CHECK(created.error().message.find("403") != std::string::npos);
  CHECK(created.error().message.find("10000") != std::string::npos);
  CHECK(created.error().message.find("wrong-token-value") == std::string::npos);
  CHECK(h.fake.requests().size() == 1);
  CHECK(h.fake.records().empty());
}

TEST_CASE("dns cloudflare: an API nobody answers is unavailable") {
  // A port that was just free: bind, read it back, close.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  std::vector<int64_t> sleeps;
  CloudflareOptions options;
  options.zoneId = kZone;
  options.apiToken = kToken;
  options.apiUrl = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/client/v4";
  options.sleepMs = [&](int64_t ms) { sleeps.push_back(ms); };
  CloudflareDns dns(options);
  auto listed = dns.listChallengeRecords("tunnel.test");
  REQUIRE_FALSE(listed.ok());
  CHECK(listed.error().kind == ErrorKind::kUnavailable);
  CHECK(sleeps.size() == 2);
}

TEST_CASE("dns cloudflare: retry delays honour Retry-After up to the cap") {
  CHECK(cloudflareRetryDelayMs(1, std::nullopt, 500, 5000) == 500);
  CHECK(cloudflareRetryDelayMs(2, std::nullopt, 500, 5000) == 1000);
  CHECK(cloudflareRetryDelayMs(5, std::nullopt, 500, 5000) == 5000);
  CHECK(cloudflareRetryDelayMs(1, 3000, 500, 5000) == 3000);
  CHECK(cloudflareRetryDelayMs(1, 0, 500, 5000) == 0);
  CHECK(cloudflareRetryDelayMs(1, 120'000, 500, 5000) == 5000);
  CHECK(cloudflareRetryDelayMs(1, int64_t{999'999'999} * 1000, 500, 5000) == 5000);
}

TEST_CASE("dns cloudflare: created_on timestamps parse to Unix milliseconds") {
  CHECK(parseRfc3339Ms("1970-01-01T00:00:00Z") == 0);
  CHECK(parseRfc3339Ms("2014-01-01T05:20:00.12345Z") == 1'388'553'600'123);
  CHECK(parseRfc3339Ms("2023-11-14T22:13:20Z") == 1'700'000'000'000);
  CHECK(parseRfc3339Ms("2023-11-14T23:13:20.5+01:00") == 1'700'000'000'500);
  CHECK(parseRfc3339Ms("2024-02-29T00:00:00Z") == 1'709'164'800'000);
  CHECK(parseRfc3339Ms(FakeCloudflare::rfc3339(1'750'000'000'123)) == 1'750'000'000'123);
  CHECK(parseRfc3339Ms("") == 0);
  CHECK(parseRfc3339Ms("2024-02-29") == 0);
  CHECK(parseRfc3339Ms("2024-13-01T00:00:00Z") == 0);
  CHECK(parseRfc3339Ms("2024-01-01T00:00:00") == 0);
  CHECK(parseRfc3339Ms("2024-01-01T00:00:00Zjunk") == 0);
}

}  // namespace
}  // namespace ot::controld
