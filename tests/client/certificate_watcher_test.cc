#include "client/certificate_watcher.h"

#include <doctest/doctest.h>
#include <uv.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "client/key_material.h"
#include "tests/client/test_certificate.h"
#include "tests/unit/canned_http_server.h"

namespace {

using namespace ot::client;
using ot::testing::answer;
using ot::testing::CannedServer;

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string certificateBody(const std::string& chain) {
  return nlohmann::json{
      {"state", "ready"}, {"chain", chain}, {"notAfter", nullptr}, {"error", nullptr}}
      .dump();
}

}  // namespace

TEST_CASE("client certificate watcher: a renewed chain is saved and handed to the loop") {
  char pattern[] = "/tmp/ot-watcher-test-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const std::string dir = pattern;

  auto key = generatePrivateKeyPem();
  auto otherKey = generatePrivateKeyPem();
  REQUIRE(key.ok());
  REQUIRE(otherKey.ok());
  const std::string current = ot::client::testing::selfSigned(*key);
  const std::string renewed = ot::client::testing::selfSigned(*key, 7200);
  const std::string foreign = ot::client::testing::selfSigned(*otherKey);
  REQUIRE(renewed != current);

  // Unchanged, then a chain for another key (refused), then the renewal.
  CannedServer server({answer(200, certificateBody(current)), answer(200, certificateBody(foreign)),
                       answer(200, certificateBody(renewed))});

  Provisioned provisioned;
  provisioned.state = TunnelState{"", "myid", "myid.tunnels.test", "", "tk_x", *key, "", current};
  provisioned.statePath = dir + "/state.json";
  provisioned.chainFile = dir + "/myid.chain.pem";

  ApiClientOptions options;
  std::string error;
  options.server = *parseServerUrl("http://127.0.0.1:" + std::to_string(server.port()), &error);

  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::vector<std::string> chains;
  std::vector<std::string> messages;
  std::unique_ptr<CertificateWatcher> watcher;
  watcher = std::make_unique<CertificateWatcher>(
      &loop, options, provisioned, std::chrono::milliseconds(1),
      [&](const std::string& chain) {
        chains.push_back(chain);
        watcher->close();
      },
      [&](const std::string& message) { messages.push_back(message); });
  watcher->start();
  uv_run(&loop, UV_RUN_DEFAULT);  // ends when close() has closed the async handle
  watcher.reset();                // joins the thread
  CHECK(uv_loop_close(&loop) == 0);

  REQUIRE(chains.size() == 1);
  CHECK(chains[0] == renewed);
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].find("not for this client's key") != std::string::npos);
  CHECK(readAll(provisioned.chainFile) == renewed);
  auto saved = loadTunnelState(provisioned.statePath);
  REQUIRE(saved.ok());
  REQUIRE(saved->has_value());
  CHECK((*saved)->chainPem == renewed);
  CHECK((*saved)->token == "tk_x");
  std::filesystem::remove_all(dir);
}
