#include "client/tunnel_state.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

using namespace ot::client;

struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/ot-state-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

unsigned modeOf(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ServerUrl server(const std::string& text) {
  std::string error;
  auto url = parseServerUrl(text, &error);
  REQUIRE_MESSAGE(url.has_value(), error);
  return *url;
}

TunnelState sample() {
  return TunnelState{"https://opentunnel.localhost:8443",
                     "k3x9q2",
                     "k3x9q2.opentunnel.localhost",
                     "https://k3x9q2.opentunnel.localhost",
                     "tk_secret",
                     "-----BEGIN PRIVATE KEY-----\nAAA\n-----END PRIVATE KEY-----\n",
                     "-----BEGIN CERTIFICATE REQUEST-----\nBBB\n",
                     "chain \"quoted\"\n"};
}

}  // namespace

TEST_CASE("client tunnel state: one file per server, the host sanitized") {
  CHECK(stateFilePath("/s", server("https://opentunnel.localhost:8443")) ==
        "/s/opentunnel.localhost_8443.json");
  CHECK(stateFilePath("/s/", server("https://Example.COM")) == "/s/example.com_443.json");
  CHECK(stateFilePath("/s", server("http://[::1]:9000")) == "/s/__1_9000.json");
  CHECK(stateFilePath("/s", server("http://127.0.0.1:80")) == "/s/127.0.0.1_80.json");
}

TEST_CASE("client tunnel state: the default directory follows the environment") {
  std::map<std::string, std::string> env;
  const auto getenv = [&](const char* name) -> const char* {
    auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  };
  CHECK_FALSE(defaultStateDir(getenv).has_value());
  env["HOME"] = "/home/u";
  CHECK(defaultStateDir(getenv) == "/home/u/.config/otunnel");
  env["XDG_CONFIG_HOME"] = "/xdg";
  CHECK(defaultStateDir(getenv) == "/xdg/otunnel");
  env["OTUNNEL_STATE_DIR"] = "";
  CHECK(defaultStateDir(getenv) == "/xdg/otunnel");  // empty means unset
  env["OTUNNEL_STATE_DIR"] = "/state";
  CHECK(defaultStateDir(getenv) == "/state");
}

TEST_CASE("client tunnel state: round trip, 0600 file in a new 0700 directory") {
  TempDir dir;
  const std::string stateDir = dir.path + "/a/b";
  const std::string path = stateFilePath(stateDir, server("https://opentunnel.localhost:8443"));

  auto absent = loadTunnelState(path);
  REQUIRE(absent.ok());
  CHECK_FALSE(absent->has_value());

  const TunnelState state = sample();
  REQUIRE(saveTunnelState(path, state).ok());
  CHECK(modeOf(stateDir) == 0700);
  CHECK(modeOf(dir.path + "/a") == 0700);
  CHECK(modeOf(path) == 0600);

  auto loaded = loadTunnelState(path);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->has_value());
  const TunnelState& got = **loaded;
  CHECK(got.server == state.server);
  CHECK(got.id == state.id);
  CHECK(got.hostname == state.hostname);
  CHECK(got.url == state.url);
  CHECK(got.token == state.token);
  CHECK(got.keyPem == state.keyPem);
  CHECK(got.csrPem == state.csrPem);
  CHECK(got.chainPem == state.chainPem);

  // Replacing keeps the mode and leaves no temporary file behind.
  TunnelState changed = state;
  changed.chainPem = "new chain";
  REQUIRE(saveTunnelState(path, changed).ok());
  CHECK(modeOf(path) == 0600);
  CHECK((*loadTunnelState(path))->chainPem == "new chain");
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(stateDir)) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("client tunnel state: a corrupt file is an error and is left alone") {
  TempDir dir;
  const std::string path = dir.path + "/x_443.json";
  for (const std::string& content :
       {std::string("{not json"), std::string("[1,2]"), std::string("{\"id\":5}"),
        std::string("{\"id\":\"a\",\"hostname\":\"a.b\"}")}) {
    {
      std::ofstream out(path, std::ios::trunc);
      out << content;
    }
    auto loaded = loadTunnelState(path);
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().kind == ot::ErrorKind::kInvalid);
    CHECK(loaded.error().message.find(path) != std::string::npos);
    CHECK(loaded.error().message.find("corrupt") != std::string::npos);
    CHECK(readAll(path) == content);
  }
}

TEST_CASE("client tunnel state: private files are written whole with mode 0600") {
  TempDir dir;
  const std::string path = dir.path + "/k.key.pem";
  {
    std::ofstream out(path);
    out << "old contents that are longer";
  }
  ::chmod(path.c_str(), 0644);
  REQUIRE(writePrivateFile(path, "new").ok());
  CHECK(readAll(path) == "new");
  CHECK(modeOf(path) == 0600);
  CHECK_FALSE(writePrivateFile(dir.path + "/missing/dir/file", "x").ok());
}
