#include "client/address_list.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/client/test_support.h"

namespace {

using namespace ot::client;

struct Entry {
  sockaddr_storage address{};
  addrinfo info{};
};

// A getaddrinfo-shaped list: v4, v6, a duplicate v4 and a non-IP family.
std::vector<Entry> entries() {
  std::vector<Entry> list(4);
  auto v4 = [](Entry& e, const char* ip) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &in.sin_addr);
    std::memcpy(&e.address, &in, sizeof in);
    e.info.ai_family = AF_INET;
    e.info.ai_addrlen = sizeof in;
  };
  v4(list[0], "192.0.2.1");
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", &in6.sin6_addr);
  std::memcpy(&list[1].address, &in6, sizeof in6);
  list[1].info.ai_family = AF_INET6;
  list[1].info.ai_addrlen = sizeof in6;
  v4(list[2], "192.0.2.1");
  list[3].info.ai_family = AF_UNIX;
  list[3].info.ai_addrlen = 2;
  for (size_t i = 0; i < list.size(); ++i) {
    list[i].info.ai_addr = reinterpret_cast<sockaddr*>(&list[i].address);
    list[i].info.ai_next = i + 1 < list.size() ? &list[i + 1].info : nullptr;
  }
  return list;
}

}  // namespace

TEST_CASE("client address list: every distinct IPv4 and IPv6 address, in order") {
  auto list = entries();
  CHECK(distinctAddresses(&list[0].info) == std::vector<std::string>{"192.0.2.1", "2001:db8::1"});
  CHECK(distinctAddresses(nullptr).empty());
}

TEST_CASE("client address list: literals and .localhost need no lookup") {
  ot::client_test::TestLoop loop;
  std::vector<std::vector<std::string>> seen;
  for (const char* host : {"relay.localhost", "127.0.9.3", "::1", "[2001:db8::2]"}) {
    AddressListQuery* query =
        AddressListQuery::resolve(loop.get(), host, [&](int status, std::vector<std::string> a) {
          CHECK(status == 0);
          seen.push_back(std::move(a));
        });
    CHECK(query == nullptr);  // answered at once
  }
  REQUIRE(seen.size() == 4);
  CHECK(seen[0] == std::vector<std::string>{"127.0.0.1"});
  CHECK(seen[1] == std::vector<std::string>{"127.0.9.3"});
  CHECK(seen[2] == std::vector<std::string>{"::1"});
  CHECK(seen[3] == std::vector<std::string>{"2001:db8::2"});
}
