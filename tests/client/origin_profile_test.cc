#include "client/origin_profile.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using namespace ot::client;

std::string specError(const std::string& text) {
  auto spec = parseProfileSpec(text);
  return spec.ok() ? std::string("ok") : spec.error().message;
}

ServerUrl server() {
  std::string error;
  return *parseServerUrl("https://tunnels.example:8443", &error);
}

}  // namespace

TEST_CASE("client origin: the default origin name is the host name made safe, cut to 64") {
  CHECK(defaultOriginName("web-1.example.com") == "web-1.example.com");
  CHECK(defaultOriginName("my host/with:odd chars") == "my-host-with-odd-chars");
  CHECK(defaultOriginName(std::string(80, 'a')) == std::string(64, 'a'));
  CHECK(defaultOriginName("") == "origin");
  CHECK(isOriginName(localOriginName()));
  CHECK(isOriginName("A.b_c-9"));
  CHECK_FALSE(isOriginName(""));
  CHECK_FALSE(isOriginName("a b"));
  CHECK_FALSE(isOriginName(std::string(65, 'a')));
}

TEST_CASE("client origin: profile specs: host, port, sni, links, bracketed IPv6") {
  auto spec = parseProfileSpec("main=relay.example:443");
  REQUIRE(spec.ok());
  CHECK(spec->name == "main");
  CHECK(spec->host == "relay.example");
  CHECK(spec->port == 443);
  CHECK(spec->sni.empty());
  CHECK(spec->links == 0);

  spec = parseProfileSpec("v6=[2001:db8::1]:8443,sni=front.example,links=6");
  REQUIRE(spec.ok());
  CHECK(spec->host == "2001:db8::1");
  CHECK(spec->port == 8443);
  CHECK(spec->sni == "front.example");
  CHECK(spec->links == 6);

  spec = parseProfileSpec("b=127.0.9.1:1,links=16");
  REQUIRE(spec.ok());
  CHECK(spec->host == "127.0.9.1");
  CHECK(spec->links == 16);
}

TEST_CASE("client origin: bad profile specs say what is wrong") {
  CHECK(specError("relay.example:443").find("must be NAME=HOST:PORT") != std::string::npos);
  CHECK(specError("bad name=relay:443").find("1-64 of A-Za-z0-9._-") != std::string::npos);
  CHECK(specError("a=relay").find("missing the port") != std::string::npos);
  CHECK(specError("a=relay:0").find("from 1 to 65535") != std::string::npos);
  CHECK(specError("a=relay:70000").find("from 1 to 65535") != std::string::npos);
  CHECK(specError("a=:443").find("not a host name") != std::string::npos);
  CHECK(specError("a=[2001:db8::1:443").find("[ADDRESS]:PORT") != std::string::npos);
  CHECK(specError("a=[zz]:443").find("not a host name") != std::string::npos);
  CHECK(specError("a=relay:443,links=0").find("links must be") != std::string::npos);
  CHECK(specError("a=relay:443,links=17").find("links must be") != std::string::npos);
  CHECK(specError("a=relay:443,sni=").find("sni") != std::string::npos);
  CHECK(specError("a=relay:443,weight=2").find("unknown option") != std::string::npos);
}

TEST_CASE("client origin: profiles: default from --server, at most 8, unique names, order kept") {
  auto profiles = parseProfiles({}, server());
  REQUIRE(profiles.ok());
  REQUIRE(profiles->size() == 1);
  CHECK(profiles->at(0).name == "default");
  CHECK(profiles->at(0).host == "tunnels.example");
  CHECK(profiles->at(0).port == 8443);

  profiles = parseProfiles({"b=h1:1", "a=h2:2"}, server());
  REQUIRE(profiles.ok());
  CHECK(profiles->at(0).name == "b");
  CHECK(profiles->at(1).name == "a");

  auto twice = parseProfiles({"a=h1:1", "a=h2:2"}, server());
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error().message.find("more than once") != std::string::npos);

  std::vector<std::string> nine;
  for (int i = 0; i < 9; ++i) nine.push_back("p" + std::to_string(i) + "=h:1");
  auto tooMany = parseProfiles(nine, server());
  REQUIRE_FALSE(tooMany.ok());
  CHECK(tooMany.error().message.find("at most 8") != std::string::npos);
  nine.pop_back();
  CHECK(parseProfiles(nine, server()).ok());
}

TEST_CASE("client origin: a listening profile (direct mode): listen:HOST:PORT[,links=N]") {
  auto spec = parseProfileSpec("direct=listen:0.0.0.0:7443,links=6");
  REQUIRE(spec.ok());
  CHECK(spec->listen);
  CHECK(spec->name == "direct");
  CHECK(spec->host == "0.0.0.0");
  CHECK(spec->port == 7443);
  CHECK(spec->links == 6);

  spec = parseProfileSpec("d6=listen:[::]:7443");
  REQUIRE(spec.ok());
  CHECK(spec->listen);
  CHECK(spec->host == "::");
  CHECK(spec->links == 0);

  CHECK_FALSE(parseProfileSpec("main=relay.example:443")->listen);
  // Mixed with dialing profiles in one origin; the order is still the profile index.
  auto profiles =
      parseProfiles({"main=relay.example:443", "direct=listen:127.0.27.1:7443"}, server());
  REQUIRE(profiles.ok());
  CHECK_FALSE(profiles->at(0).listen);
  CHECK(profiles->at(1).listen);
}

TEST_CASE("client origin: bad listening profiles say what is wrong") {
  CHECK(specError("d=listen:7443").find("listen:HOST:PORT is missing the port") !=
        std::string::npos);
  CHECK(specError("d=listen:").find("listen:HOST:PORT is missing the port") != std::string::npos);
  CHECK(specError("d=listen:0.0.0.0:0").find("from 1 to 65535") != std::string::npos);
  CHECK(specError("d=listen::7443").find("not a host name or address to listen on") !=
        std::string::npos);
  CHECK(specError("d=listen:[::1:7443").find("listen:[ADDRESS]:PORT") != std::string::npos);
  CHECK(specError("d=listen:0.0.0.0:7443,links=17").find("links must be") != std::string::npos);
  CHECK(specError("d=listen:0.0.0.0:7443,weight=1")
            .find("unknown option \"weight=1\" (a listening profile takes links=N") !=
        std::string::npos);
  CHECK(specError("listen:0.0.0.0:7443").find("NAME=listen:HOST:PORT[,links=N]") !=
        std::string::npos);
}
