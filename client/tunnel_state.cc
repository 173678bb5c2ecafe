#include "client/tunnel_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace ot::client {
namespace {

using Json = nlohmann::json;

// The file format's version: a later otunnel may add members and must still read this one.
constexpr int kStateVersion = 1;
// A key, a CSR and a chain are a few KiB; anything much larger is not a state file.
constexpr size_t kMaxStateSize = 1024 * 1024;

Error ioError(const std::string& what, const std::string& path, int error) {
  return Error{ErrorKind::kUnavailable, what + " " + path + ": " + std::strerror(error)};
}

std::string parentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Returns false when the member is present but not a string.
bool readString(const Json& object, const char* name, std::string& target) {
  const auto found = object.find(name);
  if (found == object.end() || found->is_null()) return true;
  if (!found->is_string()) return false;
  target = found->get<std::string>();
  return true;
}

}  // namespace

std::optional<std::string> defaultStateDir(const std::function<const char*(const char*)>& getenv) {
  const auto value = [&](const char* name) -> std::optional<std::string> {
    const char* text = getenv(name);
    if (text == nullptr || *text == '\0') return std::nullopt;
    return std::string(text);
  };
  if (auto dir = value("OTUNNEL_STATE_DIR")) return dir;
  if (auto config = value("XDG_CONFIG_HOME")) return *config + "/otunnel";
  if (auto home = value("HOME")) return *home + "/.config/otunnel";
  return std::nullopt;
}

std::string stateFilePath(std::string_view stateDir, const ServerUrl& server) {
  std::string name;
  for (char c : server.host) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    name += keep ? c : '_';
  }
  // A leading dot would hide the file and ".." would be a directory: neither can be a host here,
  // but the name is made safe whatever the host.
  if (name.empty() || name.front() == '.') name.insert(0, "_");
  std::string dir(stateDir);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + name + "_" + std::to_string(server.port) + ".json";
}

Result<std::optional<TunnelState>> loadTunnelState(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<TunnelState>();
    return ioError("cannot read", path, errno);
  }
  std::string text;
  int error = 0;
  char buffer[16384];
  while (text.size() <= kMaxStateSize) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (error != 0) return ioError("cannot read", path, error);
  const auto corrupt = [&](const std::string& why) {
    return Error{ErrorKind::kInvalid, "the saved tunnel " + path + " is corrupt (" + why +
                                          "); move it away to start with a new tunnel"};
  };
  if (text.size() > kMaxStateSize) return corrupt("larger than 1 MiB");
  const Json document = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return corrupt("not JSON");
  if (!document.is_object()) return corrupt("not a JSON object");
  TunnelState state;
  if (!readString(document, "server", state.server) || !readString(document, "id", state.id) ||
      !readString(document, "hostname", state.hostname) ||
      !readString(document, "url", state.url) || !readString(document, "token", state.token) ||
      !readString(document, "key", state.keyPem) || !readString(document, "csr", state.csrPem) ||
      !readString(document, "chain", state.chainPem)) {
    return corrupt("a member is not a string");
  }
  if (state.id.empty() || state.hostname.empty() || state.token.empty()) {
    return corrupt("id, hostname or token missing");
  }
  return std::optional<TunnelState>(std::move(state));
}

Status makePrivateDirectory(const std::string& path) {
  if (path.empty()) return Error{ErrorKind::kInvalid, "the state directory is empty"};
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) {
      return Error{ErrorKind::kInvalid, path + " exists and is not a directory"};
    }
    return Ok{};
  }
  const std::string parent = parentOf(path);
  if (parent != path) {
    if (Status made = makePrivateDirectory(parent); !made.ok()) return made;
  }
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ioError("cannot create", path, errno);
  }
  return Ok{};
}

Status writePrivateFile(const std::string& path, std::string_view content) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ioError("cannot create", temporary, errno);
  // O_CREAT's mode only applies to a new file; a leftover temp file keeps its own.
  int error = ::fchmod(fd, 0600) == 0 ? 0 : errno;
  size_t written = 0;
  while (error == 0 && written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
    } else {
      written += static_cast<size_t>(n);
    }
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    return ioError("cannot write", path, error);
  }
  // The rename itself must survive a crash too.
  const int dir = ::open(parentOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Ok{};
}

Status saveTunnelState(const std::string& path, const TunnelState& state) {
  if (Status made = makePrivateDirectory(parentOf(path)); !made.ok()) return made;
  const Json document = {
      {"version", kStateVersion},   {"server", state.server}, {"id", state.id},
      {"hostname", state.hostname}, {"url", state.url},       {"token", state.token},
      {"key", state.keyPem},        {"csr", state.csrPem},    {"chain", state.chainPem}};
  return writePrivateFile(path, document.dump(2) + "\n");
}

}  // namespace ot::client
