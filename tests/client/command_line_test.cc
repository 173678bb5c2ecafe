#include "client/command_line.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "client/server_url.h"
#include "common/bridge_frame.h"

namespace {

using namespace ot::client;

std::variant<CommandLine, int> parseArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "otunnel");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return parseCommandLine(static_cast<int>(argv.size()), argv.data());
}

int exitCodeOf(std::vector<std::string> args) {
  auto parsed = parseArgs(std::move(args));
  const int* code = std::get_if<int>(&parsed);
  return code ? *code : -1;
}

std::string routeError(std::vector<std::string> specs) {
  auto routes = parseRoutes(specs);
  return routes.ok() ? std::string("ok") : routes.error().message;
}

}  // namespace

TEST_CASE("client command line: DNS labels (uppercase refused, not folded)") {
  CHECK(ot::bridge::isDnsLabel("api"));
  CHECK(ot::bridge::isDnsLabel("a"));
  CHECK(ot::bridge::isDnsLabel("a-1"));
  CHECK(ot::bridge::isDnsLabel(std::string(63, 'x')));
  CHECK_FALSE(ot::bridge::isDnsLabel(std::string(64, 'x')));
  CHECK_FALSE(ot::bridge::isDnsLabel(""));
  CHECK_FALSE(ot::bridge::isDnsLabel("-a"));
  CHECK_FALSE(ot::bridge::isDnsLabel("a-"));
  CHECK_FALSE(ot::bridge::isDnsLabel("Api"));
  CHECK_FALSE(ot::bridge::isDnsLabel("a.b"));
  CHECK_FALSE(ot::bridge::isDnsLabel("a_b"));
}

TEST_CASE("client command line: routes are name=port, each name once") {
  auto routes = parseRoutes({"api=4000", "admin=65535", "x=1"});
  REQUIRE(routes.ok());
  CHECK(routes->size() == 3);
  CHECK(routes->at("api") == 4000);
  CHECK(routes->at("admin") == 65535);
  CHECK(routes->at("x") == 1);
  CHECK(parseRoutes({}).ok());

  CHECK(routeError({"api"}) == "--route \"api\" must be name=port");
  CHECK(routeError({"=80"}).starts_with("--route name \"\" must be one lowercase DNS label"));
  CHECK(routeError({"API=80"}).starts_with("--route name \"API\""));
  CHECK(routeError({"a.b=80"}).starts_with("--route name \"a.b\""));
  CHECK(routeError({"api=0"}) == "--route api: port \"0\" must be a number from 1 to 65535");
  CHECK(routeError({"api=65536"}) ==
        "--route api: port \"65536\" must be a number from 1 to 65535");
  CHECK(routeError({"api="}) == "--route api: port \"\" must be a number from 1 to 65535");
  CHECK(routeError({"api=+80"}).starts_with("--route api: port \"+80\""));
  CHECK(routeError({"api=80=1"}).starts_with("--route api: port \"80=1\""));
  CHECK(routeError({"api=80", "api=81"}) == "--route api is given more than once");

  std::vector<std::string> many;
  for (size_t i = 0; i < kMaxNamedRoutes; ++i) many.push_back("r" + std::to_string(i) + "=80");
  CHECK(parseRoutes(many).ok());
  many.push_back("extra=80");
  CHECK(routeError(many) == "at most 127 --route entries; got 128");
}

TEST_CASE("client command line: server URLs") {
  std::string error;
  auto https = parseServerUrl("https://opentunnel.localhost:8443", &error);
  REQUIRE(https.has_value());
  CHECK(https->scheme == "https");
  CHECK(https->host == "opentunnel.localhost");
  CHECK(https->port == 8443);
  CHECK(https->base() == "https://opentunnel.localhost:8443");
  CHECK(https->isLoopbackName());

  auto plain = parseServerUrl("HTTPS://Tunnels.Example/", &error);
  REQUIRE(plain.has_value());
  CHECK(plain->host == "tunnels.example");
  CHECK(plain->port == 443);
  CHECK_FALSE(plain->isLoopbackName());
  CHECK(publicUrl("abc.tunnels.example", *plain) == "https://abc.tunnels.example");
  CHECK(publicUrl("abc.opentunnel.localhost", *https) == "https://abc.opentunnel.localhost:8443");

  auto dev = parseServerUrl("http://127.0.0.1:9000", &error);
  REQUIRE(dev.has_value());
  CHECK(dev->base() == "http://127.0.0.1:9000");
  auto v6 = parseServerUrl("http://[::1]:9000", &error);
  REQUIRE(v6.has_value());
  CHECK(v6->host == "::1");
  CHECK(v6->base() == "http://[::1]:9000");
  CHECK(parseServerUrl("http://localhost", &error)->isLoopbackName());
  CHECK(parseServerUrl("http://localhost", &error)->port == 80);

  for (const char* bad : {"opentunnel.localhost", "ftp://x", "https://", "https://x:0",
                          "https://x:70000", "https://x:", "https://x/path", "https://u@x",
                          "https://x?q", "https://[::1", "https://a b"}) {
    error.clear();
    CHECK_MESSAGE(!parseServerUrl(bad, &error).has_value(), bad);
    CHECK_MESSAGE(!error.empty(), bad);
  }
}

TEST_CASE("client command line: the whole line, and exit 2 on bad input") {
  auto parsed =
      parseArgs({"--server", "http://127.0.0.1:9000", "--state-dir", "/tmp/s", "--id", "myid",
                 "--issue-timeout", "5", "http", "3000", "--route", "api=4000", "--links", "3"});
  REQUIRE(std::holds_alternative<CommandLine>(parsed));
  const CommandLine& line = std::get<CommandLine>(parsed);
  CHECK(line.server.base() == "http://127.0.0.1:9000");
  CHECK(line.stateDir == "/tmp/s");
  CHECK(line.wantedId == std::optional<std::string>("myid"));
  CHECK(line.issueTimeout == std::chrono::seconds(5));
  CHECK(line.terminateTls);
  CHECK(line.port == 3000);
  CHECK(line.links == 3);
  CHECK(line.routes == std::map<std::string, uint16_t>{{"api", 4000}});
  CHECK_FALSE(line.provisionOnly);
  CHECK(line.logLevel == ot::log::Level::kWarn);

  auto tls = parseArgs({"--provision-only", "--log-level", "debug", "tls", "8443"});
  REQUIRE(std::holds_alternative<CommandLine>(tls));
  CHECK_FALSE(std::get<CommandLine>(tls).terminateTls);
  CHECK(std::get<CommandLine>(tls).provisionOnly);
  CHECK(std::get<CommandLine>(tls).logLevel == ot::log::Level::kDebug);
  CHECK(std::get<CommandLine>(tls).issueTimeout == std::chrono::seconds(120));

  CHECK(exitCodeOf({"http", "3000", "--route", "API=1"}) == 2);
  CHECK(exitCodeOf({"http", "3000", "--route", "api=1", "--route", "api=2"}) == 2);
  CHECK(exitCodeOf({"http", "0"}) == 2);
  CHECK(exitCodeOf({"http", "65536"}) == 2);
  CHECK(exitCodeOf({"http", "port"}) == 2);
  CHECK(exitCodeOf({"http"}) == 2);
  CHECK(exitCodeOf({}) == 2);
  CHECK(exitCodeOf({"--server", "ftp://x", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--id", "Bad_Id", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--links", "0", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--issue-timeout", "0", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--log-level", "loud", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--help"}) == 0);
}

TEST_CASE("client command line: origin, credential, profiles and 4 links by default") {
  auto parsed = parseArgs({"--server", "https://tunnels.example", "http", "3000"});
  REQUIRE(std::holds_alternative<CommandLine>(parsed));
  const CommandLine& plain = std::get<CommandLine>(parsed);
  CHECK(plain.links == 4);
  CHECK(plain.origin == localOriginName());
  CHECK(plain.credential.empty());
  REQUIRE(plain.profiles.size() == 1);
  CHECK(plain.profiles[0].name == "default");
  CHECK(plain.profiles[0].host == "tunnels.example");
  CHECK(plain.profiles[0].port == 443);

  parsed = parseArgs({"--origin", "web-2", "--credential", "oc_abc", "--profile",
                      "v4=192.0.2.1:443,links=2", "--profile", "v6=[2001:db8::1]:443,sni=r.example",
                      "--links", "3", "http", "3000"});
  REQUIRE(std::holds_alternative<CommandLine>(parsed));
  const CommandLine& pooled = std::get<CommandLine>(parsed);
  CHECK(pooled.origin == "web-2");
  CHECK(pooled.credential == "oc_abc");
  CHECK(pooled.links == 3);
  REQUIRE(pooled.profiles.size() == 2);
  CHECK(pooled.profiles[0].links == 2);
  CHECK(pooled.profiles[1].host == "2001:db8::1");
  CHECK(pooled.profiles[1].sni == "r.example");

  CHECK(exitCodeOf({"--origin", "bad name", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--profile", "nohost", "http", "80"}) == 2);
  CHECK(exitCodeOf({"--links", "17", "http", "80"}) == 2);
}

TEST_CASE("client command line: status subcommand") {
  auto parsed = parseArgs({"--state-dir", "/tmp/x", "status", "--json"});
  REQUIRE(std::holds_alternative<CommandLine>(parsed));
  CHECK(std::get<CommandLine>(parsed).statusCommand);
  CHECK(std::get<CommandLine>(parsed).statusJson);
}
