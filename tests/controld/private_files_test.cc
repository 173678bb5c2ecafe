// The modes of controld's state (private_files.h), under a umask that would leave everything
// open (000): exact modes on what it creates, and a refusal that names the file and the fix.
#include "controld/base/private_files.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ot::controld {
namespace {

mode_t modeOf(const std::string& path) {
  struct stat info = {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

struct OpenUmask {
  OpenUmask() : before(::umask(0)) {}
  ~OpenUmask() { ::umask(before); }
  mode_t before;
};

std::string tempDirectory() {
  std::string pattern = "/tmp/ot-private-files-XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

void touch(const std::string& path, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  REQUIRE(::fchmod(fd, mode) == 0);
  ::close(fd);
}

TEST_CASE("private files: directories and the database are made with exact modes") {
  const OpenUmask openUmask;
  const std::string root = tempDirectory();
  REQUIRE(makeDirectories(root + "/a/b", kStateDirectoryMode).ok());
  CHECK(modeOf(root + "/a") == 0700);
  CHECK(modeOf(root + "/a/b") == 0700);
  REQUIRE(::chmod((root + "/a").c_str(), 0755) == 0);
  REQUIRE(makeDirectories(root + "/a/c", kSocketDirectoryMode).ok());
  CHECK(modeOf(root + "/a") == 0755);  // an existing directory is left as it is
  CHECK(modeOf(root + "/a/c") == 0750);

  const std::string db = root + "/a/b/store.db";
  REQUIRE(prepareDatabaseFile(db).ok());
  CHECK(modeOf(db) == 0600);
  REQUIRE(prepareDatabaseFile(db).ok());  // again: the same file, still fine
  std::filesystem::remove_all(root);
}

TEST_CASE("private files: a database, -wal or -shm others can access is refused with the fix") {
  const std::string root = tempDirectory();
  const std::string db = root + "/store.db";
  touch(db, 0600);
  for (const std::string suffix : {"", "-wal", "-shm"}) {
    CAPTURE(suffix);
    for (const mode_t open_mode : {0644u, 0640u, 0604u, 0620u, 0660u}) {
      CAPTURE(open_mode);
      touch(db + suffix, open_mode);
      const Status refused = prepareDatabaseFile(db);
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.error().kind == ErrorKind::kInvalid);
      CHECK(refused.error().message.find(db + suffix + " has mode 0") == 0);
      CHECK(refused.error().message.find("run: chmod 600 " + db + suffix) != std::string::npos);
      CHECK(modeOf(db + suffix) == open_mode);  // reported, never changed
      REQUIRE(::chmod((db + suffix).c_str(), 0600) == 0);
    }
  }
  CHECK(prepareDatabaseFile(db).ok());
  // No directory: an unavailable store (start-up keeps waiting), not a refusal.
  const Status missing = prepareDatabaseFile(root + "/missing/store.db");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().kind == ErrorKind::kUnavailable);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ot::controld
