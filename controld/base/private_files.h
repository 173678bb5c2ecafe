// File modes of controld's state. The SQLite database holds the local CA's private key, the API
// domain's private key and every tunnel's token hash, so it and its -wal/-shm files are for
// controld's user alone (0600, in a 0700 directory when controld creates it), whatever the umask.
// The unix sockets are for controld's user and group (0660, in a 0750 directory when controld
// creates it): relayd connects to them, as the same user or as a member of that group.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace ot::controld {

inline constexpr mode_t kStateDirectoryMode = 0700;
inline constexpr mode_t kDatabaseFileMode = 0600;
inline constexpr mode_t kSocketDirectoryMode = 0750;
inline constexpr mode_t kSocketMode = 0660;

// Creates the directory and its missing parents with exactly `mode` (set explicitly, so the umask
// does not matter). Directories that already exist are left as they are.
[[nodiscard]] Status makeDirectories(const std::string& path, mode_t mode);

// Before SQLite opens `database_path`: creates the file (kDatabaseFileMode) when missing, in a
// directory that must exist; SQLite gives the -wal and -shm files it creates the mode of the
// database file. Then refuses (kInvalid, naming the file and the chmod that fixes it) when the
// database, its -wal or its -shm file can be read or written by group or others. A missing
// directory or another failure is kUnavailable (start-up keeps waiting, as for any storage).
[[nodiscard]] Status prepareDatabaseFile(const std::string& databasePath);

// kInvalid when `path` exists and grants group or others any access; Ok when it is private or
// missing.
[[nodiscard]] Status checkPrivateFile(const std::string& path);

}  // namespace ot::controld
