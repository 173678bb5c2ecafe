#include "common/machine_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/crypto.h"

namespace ot {

namespace {

Error unavailable(const std::string& what, const std::string& path, int error) {
  return Error{ErrorKind::kUnavailable, what + " " + path + ": " + std::strerror(error) +
                                            " (set MACHINE_ID, or a writable STATE_DIR)"};
}

Result<std::string> readIdFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return unavailable("cannot read", path, errno);
  std::ostringstream text;
  text << in.rdbuf();
  std::string id = text.str();
  while (!id.empty() && (id.back() == '\n' || id.back() == '\r' || id.back() == ' ')) id.pop_back();
  if (!validMachineName(id)) {
    return Error{ErrorKind::kInvalid,
                 path +
                     " does not hold a machine ID (1 to 64 of A-Z a-z 0-9 . _ -); fix or "
                     "remove it, or set MACHINE_ID"};
  }
  return id;
}

// Writes `id` to a private temporary file beside `path` and links it into place: the file appears
// whole or not at all, and a concurrent first start loses the link race and reads the winner's.
Status createIdFile(const std::string& path, const std::string& id) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid()) + "." + id;
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return unavailable("cannot create", temporary, errno);
  const std::string line = id + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  const int writeError = errno;
  ::close(fd);
  if (!written) {
    ::unlink(temporary.c_str());
    return unavailable("cannot write", temporary, writeError);
  }
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int linkError = errno;
  ::unlink(temporary.c_str());
  if (linked != 0 && linkError != EEXIST) return unavailable("cannot create", path, linkError);
  return Ok{};
}

}  // namespace

bool validMachineName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void addMachineIdentityOptions(CLI::App& app, MachineIdentitySettings& settings,
                               const std::string& stateDirHelp) {
  const auto check = CLI::Validator(
      [](std::string& value) {
        return validMachineName(value) ? std::string()
                                       : std::string("1 to 64 of A-Z a-z 0-9 . _ -");
      },
      "NAME");
  app.add_option("--machine-id", settings.machineId,
                 "this machine's ID (logs, job leases, the control session); empty: the one kept "
                 "in STATE_DIR/machine-id, made on the first start")
      ->envname("MACHINE_ID")
      ->check(CLI::Validator(
          [](std::string& value) {
            return value.empty() || validMachineName(value)
                       ? std::string()
                       : std::string("1 to 64 of A-Z a-z 0-9 . _ -");
          },
          "NAME"));
  app.add_option("--region", settings.region, "this machine's region, on every log line")
      ->envname("REGION")
      ->check(check)
      ->capture_default_str();
  app.add_option("--state-dir", settings.stateDir, stateDirHelp)
      ->envname("STATE_DIR")
      ->capture_default_str();
}

Result<std::string> resolveMachineId(const MachineIdentitySettings& settings) {
  if (!settings.machineId.empty()) return settings.machineId;
  const std::filesystem::path directory =
      std::filesystem::path(settings.stateDir.empty() ? std::string(".") : settings.stateDir);
  const std::string path = (directory / kMachineIdFile).string();
  if (::access(path.c_str(), F_OK) != 0) {
    std::error_code error;
    if (!std::filesystem::exists(directory, error)) {
      std::filesystem::create_directories(directory, error);
      if (error) return unavailable("cannot create", directory.string(), error.value());
      std::filesystem::permissions(directory, std::filesystem::perms::owner_all, error);
    }
    auto bytes = crypto::randomBytes(6);
    if (!bytes) return Error{ErrorKind::kInternal, "no random bytes for a machine ID"};
    if (Status made = createIdFile(path, "m-" + crypto::toHex(*bytes)); !made.ok()) {
      return made.error();
    }
  }
  return readIdFile(path);
}

}  // namespace ot
