#include "common/config.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>

using ot::config::ListenAddress;
using ot::config::parseBool;
using ot::config::parseListenAddress;
using ot::config::parseUnsigned;

TEST_CASE("listen addresses: tcp, ipv6, unix, off") {
  auto v4 = parseListenAddress("0.0.0.0:8443");
  REQUIRE(v4);
  CHECK(v4->kind == ListenAddress::Kind::kTcp);
  CHECK(v4->host == "0.0.0.0");
  CHECK(v4->port == 8443);
  CHECK(v4->toString() == "0.0.0.0:8443");

  auto v6 = parseListenAddress("[::1]:0");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 0);
  CHECK(v6->toString() == "[::1]:0");

  auto named = parseListenAddress("localhost:80");
  REQUIRE(named);
  CHECK(named->host == "localhost");

  auto unixSocket = parseListenAddress("unix:/run/ot/api.sock");
  REQUIRE(unixSocket);
  CHECK(unixSocket->kind == ListenAddress::Kind::kUnix);
  CHECK(unixSocket->path == "/run/ot/api.sock");
  CHECK(unixSocket->toString() == "unix:/run/ot/api.sock");

  auto off = parseListenAddress("OFF");
  REQUIRE(off);
  CHECK_FALSE(off->enabled());
}

TEST_CASE("listen addresses: malformed input is refused") {
  for (const char* bad :
       {"", "8443", "host", "host:", ":80", "1.2.3.4:65536", "1.2.3.4:-1", "1.2.3.4:80x", "[::1]",
        "[::1]80", "[zz]:80", "::1:80", "a b:80", "unix:", "host/x:80"}) {
    CAPTURE(bad);
    CHECK_FALSE(parseListenAddress(bad));
  }
  std::string longPath = "unix:/" + std::string(107, 'a');
  CHECK_FALSE(parseListenAddress(longPath));
}

TEST_CASE("booleans and unsigned integers") {
  CHECK(parseBool("TRUE") == true);
  CHECK(parseBool("on") == true);
  CHECK(parseBool("0") == false);
  CHECK(parseBool("No") == false);
  CHECK_FALSE(parseBool("maybe"));
  CHECK_FALSE(parseBool(""));

  CHECK(parseUnsigned("0") == 0u);
  CHECK(parseUnsigned("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(parseUnsigned("18446744073709551616"));
  CHECK_FALSE(parseUnsigned("-1"));
  CHECK_FALSE(parseUnsigned("+1"));
  CHECK_FALSE(parseUnsigned("1k"));
  CHECK_FALSE(parseUnsigned(""));
}

TEST_CASE("flags fall back to the environment, and the command line wins") {
  ListenAddress listen;
  bool proxy = false;
  {
    CLI::App app;
    ot::config::addListenOption(app, "--tls-listen", "OT_TEST_TLS_LISTEN", listen, "");
    ot::config::addBoolOption(app, "--proxy-protocol", "OT_TEST_PROXY", proxy, "");
    setenv("OT_TEST_TLS_LISTEN", "127.0.0.2:9443", 1);
    setenv("OT_TEST_PROXY", "true", 1);
    char name[] = "test";
    char* argv[] = {name};
    CHECK_FALSE(ot::config::parseCommandLine(app, 1, argv));
    CHECK(listen.toString() == "127.0.0.2:9443");
    CHECK(proxy);
  }
  {
    CLI::App app;
    ot::config::addListenOption(app, "--tls-listen", "OT_TEST_TLS_LISTEN", listen, "");
    char name[] = "test";
    char flag[] = "--tls-listen=[::]:1";
    char* argv[] = {name, flag};
    CHECK_FALSE(ot::config::parseCommandLine(app, 2, argv));
    CHECK(listen.toString() == "[::]:1");
  }
  {
    CLI::App app;
    ot::config::addBoolOption(app, "--proxy-protocol", "OT_TEST_PROXY", proxy, "");
    setenv("OT_TEST_PROXY", "perhaps", 1);
    char name[] = "test";
    char* argv[] = {name};
    CHECK(ot::config::parseCommandLine(app, 1, argv) == 2);
  }
  unsetenv("OT_TEST_TLS_LISTEN");
  unsetenv("OT_TEST_PROXY");
}
