// The backup file (docs/backup.md): `{"records":[`, one record per line, `]}`. A record is
// {"id":..., "revision":N, "record":<the tunnels.record column exactly as stored>}, so a restore
// keeps the record byte for byte and knows the revision it had.
//
// BackupWriter makes the text, BackupReader splits a file fed in pieces of any size into its
// records. Pure: no I/O, no shared state. Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::controld {

// A record longer than this (one line of the file) ends an import: the server's records are a few
// KiB (a CSR is at most 16 KiB, a chain a few), so this bounds a reader's memory, not real data.
inline constexpr size_t kMaxBackupRecordBytes = 256 * 1024;

// One row as the file carries it.
struct BackupRow {
  std::string id;
  std::string recordJson;  // the record column, verbatim (a JSON object)
  int64_t revision = 0;
};

class BackupWriter {
 public:
  // The file's opening, then one record() per row, then end(). Nothing before end() makes a valid
  // file, so output cut short by a failure never reads as a whole backup.
  [[nodiscard]] static std::string begin();
  // Appends the row's line (with the separator the previous row needs) to `out`. The record JSON
  // must be a JSON object (the column always is); it is copied verbatim.
  void record(const BackupRow& row, std::string& out);
  [[nodiscard]] static std::string end();

 private:
  bool first_ = true;
};

// Splits the file into its records. The array's elements are found by tracking JSON strings and
// nesting, so line breaks and whitespace are free (a file pretty-printed by jq reads too); each
// element is handed back as its text, for BackupRecord parsing.
class BackupReader {
 public:
  // Feeds the next bytes; complete records are appended to `records`. An error (not a backup
  // file, a record over kMaxBackupRecordBytes) is final: later calls return it again.
  Status feed(std::string_view bytes, std::vector<std::string>& records);
  // The input ended: an error unless the file ended where a backup file ends.
  [[nodiscard]] Status finish() const;
  [[nodiscard]] uint64_t recordsSeen() const { return recordsSeen_; }

 private:
  enum class State : uint8_t {
    kOpenBrace,     // before '{'
    kKey,           // reading "records" (keyPos_ characters matched)
    kColon,         // before ':'
    kOpenBracket,   // before '['
    kElementOrEnd,  // before the first element, or ']'
    kElement,       // inside an element
    kCommaOrEnd,    // after an element: ',' or ']'
    kElementStart,  // after ',': an element must follow
    kCloseBrace,    // after ']': '}'
    kTrailing,      // after the final '}': only whitespace
    kFailed,
  };

  Status fail(std::string message);

  State state_ = State::kOpenBrace;
  size_t keyPos_ = 0;
  std::string element_;
  int depth_ = 0;
  bool inString_ = false;
  bool escaped_ = false;
  uint64_t recordsSeen_ = 0;
  uint64_t offset_ = 0;  // bytes consumed, for messages
  Error error_;
};

// A record's text parsed: its ID (when it has one) and what the file said.
struct ParsedBackupRecord {
  BackupRow row;
  std::string error;  // why it is not a record ("" when it is one)
};

// Parses one element of the array. Never fails as a whole: a record that is not a well-formed
// {"id","revision","record"} object comes back with `error` set (and the ID if one was readable)
// so the import can list it as rejected and go on.
[[nodiscard]] ParsedBackupRecord parseBackupRecord(std::string_view text);

}  // namespace ot::controld
