#include "controld/base/private_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace ot::controld {
namespace {

Error failure(ErrorKind kind, const std::string& what, const std::string& path, int error) {
  return Error{kind, what + " " + path + ": " + std::strerror(error)};
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode & 07777);
  return text;
}

}  // namespace

Status makeDirectories(const std::string& path, mode_t mode) {
  if (path.empty()) return Ok{};
  // The missing ones, innermost last.
  std::vector<std::filesystem::path> missing;
  for (std::filesystem::path at(path); !at.empty(); at = at.parent_path()) {
    struct stat info = {};
    if (::stat(at.c_str(), &info) == 0) break;
    if (const int error = errno; error != ENOENT) {
      return failure(ErrorKind::kUnavailable, "cannot inspect", at, error);
    }
    missing.insert(missing.begin(), at);
    if (at == at.parent_path()) break;
  }
  for (const auto& directory : missing) {
    if (::mkdir(directory.c_str(), mode) != 0) {
      const int error = errno;
      if (error == EEXIST) continue;  // made by someone else meanwhile: theirs to set
      return failure(ErrorKind::kUnavailable, "cannot create the directory", directory, error);
    }
    // mkdir's mode went through the umask; this one does not.
    if (::chmod(directory.c_str(), mode) != 0) {
      const int error = errno;
      return failure(ErrorKind::kUnavailable, "cannot set the mode of", directory, error);
    }
  }
  return Ok{};
}

Status checkPrivateFile(const std::string& path) {
  struct stat info = {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT) return Ok{};
    return failure(ErrorKind::kUnavailable, "cannot inspect", path, error);
  }
  if ((info.st_mode & 0077) == 0) return Ok{};
  return Error{ErrorKind::kInvalid,
               path + " has mode " + octal(info.st_mode) +
                   ": other users can read it, and it holds private keys; run: chmod 600 " + path};
}

Status prepareDatabaseFile(const std::string& databasePath) {
  const std::filesystem::path path(databasePath);
  const int fd =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kDatabaseFileMode);
  if (fd >= 0) {
    // A new, empty file: SQLite makes a database of it. The umask may have taken bits off the
    // mode (never added any); fchmod makes it exact.
    const int error = ::fchmod(fd, kDatabaseFileMode) != 0 ? errno : 0;
    ::close(fd);
    if (error != 0) return failure(ErrorKind::kUnavailable, "cannot set the mode of", path, error);
  } else if (const int error = errno; error != EEXIST) {
    return failure(ErrorKind::kUnavailable, "cannot create the database file", path, error);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (Status checked = checkPrivateFile(databasePath + suffix); !checked.ok()) return checked;
  }
  return Ok{};
}

}  // namespace ot::controld
