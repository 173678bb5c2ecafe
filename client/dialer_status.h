// What the running otunnel reports about its dialing (docs/pools-dialer.md "Status"): the origin,
// and per profile and per address the links wanted and attached, open streams, the wait until
// the next try and the last error. Written to <state dir>/<tunnel id>.status.json by the running
// otunnel and printed by `otunnel status`. Pure: JSON in and out, the table, staleness.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace ot::client {

// The writer refreshes the file this often even when nothing changed; a reader that finds it
// older than kStatusStaleMs says otunnel is not running.
inline constexpr uint64_t kStatusRefreshMs = 5'000;
inline constexpr uint64_t kStatusStaleMs = 15'000;
// Changes are written at most this often.
inline constexpr uint64_t kStatusMinIntervalMs = 1'000;

struct AddressStatus {
  std::string address;
  int wanted = 0;
  int attached = 0;
  int streams = 0;
  uint64_t nextTryMs = 0;  // 0: no retry waiting
  std::string lastError;

  bool operator==(const AddressStatus&) const = default;
};

struct ProfileStatus {
  std::string name;
  uint32_t index = 0;
  std::string host;
  uint16_t port = 0;
  std::string sni;
  std::string resolveError;  // the last failed lookup of host, "" when it resolved
  std::vector<AddressStatus> addresses;
  bool listen = false;   // direct mode: host:port is where otunnel listens for the relay
  uint64_t refused = 0;  // listening: connections closed at accept (over the cap)

  bool operator==(const ProfileStatus&) const = default;
};

struct DialerStatus {
  std::string tunnelId;
  std::string origin;
  bool credential = false;  // attaching with a derived credential
  std::vector<ProfileStatus> profiles;

  bool operator==(const DialerStatus&) const = default;
};

// "<state dir>/<tunnel id>.status.json".
[[nodiscard]] std::string statusFilePath(const std::string& stateDir, const std::string& tunnelId);

// The file's JSON, with the wall-clock time of writing and the writer's process id.
[[nodiscard]] std::string statusToJson(const DialerStatus& status, uint64_t updatedUnixMs, int pid);

struct StatusFile {
  DialerStatus status;
  uint64_t updatedUnixMs = 0;
  int pid = 0;
};

[[nodiscard]] Result<StatusFile> parseStatusJson(const std::string& text);

[[nodiscard]] bool statusStale(uint64_t updatedUnixMs, uint64_t nowUnixMs);

// The table `otunnel status` prints (stale files say "not running" in the first line).
[[nodiscard]] std::string renderStatusTable(const StatusFile& file, uint64_t nowUnixMs);

}  // namespace ot::client
