#include "controld/admin/backup_file.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kKeyText = "\"records\"";

bool isSpace(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

}  // namespace

std::string BackupWriter::begin() {
  return "{\"records\":[\n";
}

void BackupWriter::record(const BackupRow& row, std::string& out) {
  if (!first_) out += ",\n";
  first_ = false;
  out += "{\"id\":";
  out += Json(row.id).dump(-1, ' ', false, Json::error_handler_t::replace);
  out += ",\"revision\":";
  out += std::to_string(row.revision);
  out += ",\"record\":";
  out += row.recordJson;
  out += '}';
}

std::string BackupWriter::end() {
  return "\n]}\n";
}

Status BackupReader::fail(std::string message) {
  state_ = State::kFailed;
  error_ = Error{ErrorKind::kInvalid, "not a backup file: " + std::move(message) + " (at byte " +
                                          std::to_string(offset_) + ")"};
  element_.clear();
  element_.shrink_to_fit();
  return error_;
}

Status BackupReader::feed(std::string_view bytes, std::vector<std::string>& records) {
  for (size_t i = 0; i < bytes.size(); ++i, ++offset_) {
    const char c = bytes[i];
    switch (state_) {
      case State::kFailed:
        return error_;
      case State::kOpenBrace:
        if (isSpace(c)) break;
        if (c != '{') return fail("expected '{'");
        state_ = State::kKey;
        keyPos_ = 0;
        break;
      case State::kKey:
        if (keyPos_ == 0 && isSpace(c)) break;
        if (c != kKeyText[keyPos_]) return fail("expected the key \"records\"");
        if (++keyPos_ == kKeyText.size()) state_ = State::kColon;
        break;
      case State::kColon:
        if (isSpace(c)) break;
        if (c != ':') return fail("expected ':'");
        state_ = State::kOpenBracket;
        break;
      case State::kOpenBracket:
        if (isSpace(c)) break;
        if (c != '[') return fail("expected '['");
        state_ = State::kElementOrEnd;
        break;
      case State::kElementOrEnd:
      case State::kElementStart:
        if (isSpace(c)) break;
        if (c == ']' && state_ == State::kElementOrEnd) {
          state_ = State::kCloseBrace;
          break;
        }
        if (c != '{') return fail("a record is not a JSON object");
        element_.assign(1, '{');
        depth_ = 1;
        inString_ = false;
        escaped_ = false;
        state_ = State::kElement;
        break;
      case State::kElement: {
        if (element_.size() >= kMaxBackupRecordBytes) {
          return fail("record " + std::to_string(recordsSeen_ + 1) + " is longer than " +
                      std::to_string(kMaxBackupRecordBytes) + " bytes");
        }
        element_ += c;
        if (inString_) {
          if (escaped_) {
            escaped_ = false;
          } else if (c == '\\') {
            escaped_ = true;
          } else if (c == '"') {
            inString_ = false;
          }
          break;
        }
        if (c == '"') {
          inString_ = true;
        } else if (c == '{' || c == '[') {
          ++depth_;
        } else if (c == '}' || c == ']') {
          if (--depth_ == 0) {
            records.push_back(std::move(element_));
            element_.clear();
            ++recordsSeen_;
            state_ = State::kCommaOrEnd;
          }
        }
        break;
      }
      case State::kCommaOrEnd:
        if (isSpace(c)) break;
        if (c == ',') {
          state_ = State::kElementStart;
        } else if (c == ']') {
          state_ = State::kCloseBrace;
        } else {
          return fail("expected ',' or ']' after a record");
        }
        break;
      case State::kCloseBrace:
        if (isSpace(c)) break;
        if (c != '}') return fail("expected '}' after the records");
        state_ = State::kTrailing;
        break;
      case State::kTrailing:
        if (!isSpace(c)) return fail("text after the end of the file's JSON");
        break;
    }
  }
  if (state_ == State::kFailed) return error_;
  return Ok{};
}

Status BackupReader::finish() const {
  if (state_ == State::kFailed) return error_;
  if (state_ != State::kTrailing) {
    return Error{ErrorKind::kInvalid, "not a backup file: it ends early (cut short?) after " +
                                          std::to_string(recordsSeen_) + " records"};
  }
  return Ok{};
}

ParsedBackupRecord parseBackupRecord(std::string_view text) {
  ParsedBackupRecord parsed;
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    parsed.error = "unparseable JSON";
    return parsed;
  }
  const auto id = json.find("id");
  if (id != json.end() && id->is_string()) parsed.row.id = id->get<std::string>();
  if (id == json.end() || !id->is_string()) {
    parsed.error = "no string id";
    return parsed;
  }
  const auto revision = json.find("revision");
  if (revision == json.end() || !revision->is_number_integer() || revision->get<int64_t>() < 1) {
    parsed.error = "no positive integer revision";
    return parsed;
  }
  parsed.row.revision = revision->get<int64_t>();
  const auto record = json.find("record");
  if (record == json.end() || !record->is_object()) {
    parsed.error = "no record object";
    return parsed;
  }
  parsed.row.recordJson = record->dump(-1, ' ', false, Json::error_handler_t::replace);
  return parsed;
}

}  // namespace ot::controld
