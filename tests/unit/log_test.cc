#include "common/log.h"

#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ot::log::Field;
using ot::log::Level;
using ot::log::Record;

namespace {

const std::chrono::system_clock::time_point kTime =
    std::chrono::sys_days{std::chrono::year{2026} / 11 / 30} + 1h + 2min + 3s + 456ms;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Routes the process logger into a string stream for one test, and back to stderr after.
class CapturedLog {
 public:
  explicit CapturedLog(ot::log::Format format, Level level = Level::kTrace,
                       std::vector<std::pair<std::string, std::string>> trailing = {}) {
    ot::log::Config config;
    config.format = format;
    config.level = level;
    config.target = "test";
    config.trailingFields = std::move(trailing);
    config.sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    ot::log::init(std::move(config));
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  ~CapturedLog() { ot::log::init(ot::log::Config{}); }

  [[nodiscard]] std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
};

}  // namespace

TEST_CASE("log: timestamps are RFC 3339 UTC with milliseconds") {
  using std::chrono::sys_days;
  using std::chrono::year;
  CHECK(ot::log::formatTimestamp(kTime) == "2026-11-30T01:02:03.456Z");
  CHECK(ot::log::formatTimestamp(std::chrono::system_clock::time_point{}) ==
        "1970-01-01T00:00:00.000Z");
  CHECK(ot::log::formatTimestamp(sys_days{year{2024} / 2 / 29} + 23h + 59min + 59s + 999ms +
                                 999us) == "2024-02-29T23:59:59.999Z");
  // Before the epoch the milliseconds still count up within the second.
  CHECK(ot::log::formatTimestamp(std::chrono::system_clock::time_point{} - 1ms) ==
        "1969-12-31T23:59:59.999Z");
}

TEST_CASE("log: text format shape") {
  const std::vector<Field> fields = {
      {"tunnel", "abc"}, {"bridge", 7},         {"routes", uint64_t{3}}, {"ok", true},
      {"ratio", 0.25},   {"note", "two words"}, {"empty", ""},           {"neg", int64_t{-12}},
  };
  const std::vector<Field> trailing = {{"machine", "m1"}};
  const Record record{.time = kTime,
                      .level = Level::kInfo,
                      .target = "relayd.bridge",
                      .message = "bridge attached",
                      .fields = fields,
                      .trailing = trailing};
  CHECK(ot::log::renderText(record) ==
        "2026-11-30T01:02:03.456Z INFO relayd.bridge: bridge attached tunnel=abc bridge=7 "
        "routes=3 ok=true ratio=0.25 note=\"two words\" empty=\"\" neg=-12 machine=m1");

  const Record bare{.time = kTime, .level = Level::kWarn, .message = "no target"};
  CHECK(ot::log::renderText(bare) == "2026-11-30T01:02:03.456Z WARN no target");
}

TEST_CASE("log: text format escapes so a record stays on one line") {
  const std::vector<Field> fields = {
      {"q", "say \"hi\""},     {"eq", "a=b"},     {"nl", "x\ny"},
      {"bs", "C:\\dir"},       {"bad", "\xff"},   {"ctl", "\x01"},
      {"utf8", "caf\xC3\xA9"}, {"bad name", "v"}, {"", "v"},
  };
  const Record record{.time = kTime,
                      .level = Level::kError,
                      .target = "t",
                      .message = "line1\nline2\ttab \x01 \"q\" back\\slash \xC3",
                      .fields = fields};
  const std::string text = ot::log::renderText(record);
  CHECK(text.find('\n') == std::string::npos);
  CHECK(text ==
        "2026-11-30T01:02:03.456Z ERROR t: line1\\nline2\\ttab \\x01 \"q\" back\\slash \xEF\xBF\xBD"
        " q=\"say \\\"hi\\\"\" eq=\"a=b\" nl=\"x\\ny\" bs=\"C:\\\\dir\" bad=\xEF\xBF\xBD"
        " ctl=\"\\x01\" utf8=caf\xC3\xA9 bad_name=v _=v");
}

TEST_CASE("log: JSON record has the fixed keys, then the fields with their types") {
  const std::vector<Field> fields = {
      {"tunnel", "abc"},
      {"bridge", 7},
      {"big", std::numeric_limits<uint64_t>::max()},
      {"neg", std::numeric_limits<int64_t>::min()},
      {"ratio", 0.1},
      {"ok", false},
      {"nan", std::nan("")},
      {"inf", -std::numeric_limits<double>::infinity()},
      {"message", "clash"},
  };
  const std::vector<Field> trailing = {{"machine", "m1"}, {"region", "ams"}};
  const Record record{.time = kTime,
                      .level = Level::kWarn,
                      .target = "relayd.bridge",
                      .message = "bridge attached",
                      .fields = fields,
                      .trailing = trailing};
  const std::string line = ot::log::renderJson(record);
  CHECK(line.rfind("{\"timestamp\":\"2026-11-30T01:02:03.456Z\",\"level\":\"warn\","
                   "\"message\":\"bridge attached\",\"target\":\"relayd.bridge\",\"tunnel\":",
                   0) == 0);
  const auto json = nlohmann::json::parse(line);
  CHECK(json.size() == 4 + fields.size() + trailing.size());
  CHECK(json["timestamp"] == "2026-11-30T01:02:03.456Z");
  CHECK(json["level"] == "warn");
  CHECK(json["message"] == "bridge attached");
  CHECK(json["target"] == "relayd.bridge");
  CHECK(json["tunnel"] == "abc");
  CHECK(json["bridge"].is_number_integer());
  CHECK(json["bridge"] == 7);
  CHECK(json["big"].get<uint64_t>() == std::numeric_limits<uint64_t>::max());
  CHECK(json["neg"].get<int64_t>() == std::numeric_limits<int64_t>::min());
  CHECK(json["ratio"].is_number_float());
  CHECK(json["ratio"].get<double>() == 0.1);
  CHECK(json["ok"] == false);
  CHECK(json["nan"] == "NaN");
  CHECK(json["inf"] == "-Infinity");
  CHECK(json["field_message"] == "clash");
  CHECK(json["machine"] == "m1");
  CHECK(json["region"] == "ams");
}

TEST_CASE("log: JSON escapes quotes, backslashes, control characters and invalid UTF-8") {
  const std::string message = "say \"hi\"\nnext\tline \x01 back\\slash \xff\xfe end \x1f\x7f";
  const std::vector<Field> fields = {{"value", message}, {"key \"q\"\n", "v"}};
  const Record record{
      .time = kTime, .level = Level::kInfo, .target = "a\"b", .message = message, .fields = fields};
  const std::string line = ot::log::renderJson(record);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find("\\u0001") != std::string::npos);
  CHECK(line.find("\\u001f") != std::string::npos);
  const std::string expected =
      "say \"hi\"\nnext\tline \x01 back\\slash \xEF\xBF\xBD\xEF\xBF\xBD end \x1f\x7f";
  const auto json = nlohmann::json::parse(line);
  CHECK(json["message"] == expected);
  CHECK(json["value"] == expected);
  CHECK(json["target"] == "a\"b");
  CHECK(json["key \"q\"\n"] == "v");
}

TEST_CASE("log: invalid UTF-8 becomes one U+FFFD per maximal ill-formed subpart") {
  struct Case {
    std::string input;
    std::string expected;
  };
  const std::string r = "\xEF\xBF\xBD";
  const Case cases[] = {
      {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
      {"a\xE2\x82", "a" + r},               // truncated three-byte sequence
      {"\xE2\x82z", r + "z"},               // interrupted sequence
      {"\xC0\xAF", r + r},                  // overlong '/': C0 is never a lead byte
      {"\xE0\x80\xAF", r + r + r},          // overlong three-byte form
      {"\xED\xA0\x80", r + r + r},          // UTF-16 surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},  // above U+10FFFF
      {"\xF8\x88\x80\x80\x80", r + r + r + r + r},
      {"\x80", r},
      {std::string("nul\0byte", 8), "nul\\u0000byte"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.input);
    const Record record{.time = kTime, .level = Level::kInfo, .message = c.input};
    const std::string line = ot::log::renderJson(record);
    const auto json = nlohmann::json::parse(line);
    if (c.input.find('\0') != std::string::npos) {
      CHECK(line.find(c.expected) != std::string::npos);
      CHECK(json["message"] == std::string("nul\0byte", 8));
    } else {
      CHECK(json["message"] == c.expected);
    }
  }
}

TEST_CASE("log: lines through spdlog are one JSON object each, filtered by level") {
  CapturedLog capture(ot::log::Format::kJson, Level::kInfo, {{"machine", "m1"}});
  const ot::log::Logger bridgeLog("relayd.bridge");
  const std::string id = "abc123";
  bridgeLog.debug("hidden", {{"tunnel", id}});
  bridgeLog.info("bridge attached", {{"tunnel", id}, {"bridge", 7}, {"routes", 3}});
  ot::log::warn("default target", {{"attempt", 2}});
  ot::log::trace("hidden too");
  CHECK_FALSE(ot::log::enabled(Level::kDebug));
  CHECK(ot::log::enabled(Level::kInfo));
  CHECK_FALSE(ot::log::enabled(Level::kOff));
  ot::log::setLevel(Level::kError);
  bridgeLog.warn("now hidden");
  bridgeLog.error("multi\nline \"message\"", {{"error", "bad\\thing"}});
  ot::log::critical("last");

  const auto all = lines(capture.text());
  REQUIRE(all.size() == 4);
  std::vector<nlohmann::json> parsed;
  for (const auto& line : all) {
    CAPTURE(line);
    REQUIRE(nlohmann::json::accept(line));
    parsed.push_back(nlohmann::json::parse(line));
  }
  const std::regex timestamp(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
  for (const auto& json : parsed) {
    CHECK(std::regex_match(json["timestamp"].get<std::string>(), timestamp));
    CHECK(json["machine"] == "m1");
  }
  CHECK(parsed[0]["level"] == "info");
  CHECK(parsed[0]["target"] == "relayd.bridge");
  CHECK(parsed[0]["message"] == "bridge attached");
  CHECK(parsed[0]["tunnel"] == "abc123");
  CHECK(parsed[0]["bridge"] == 7);
  CHECK(parsed[0]["routes"] == 3);
  CHECK(parsed[1]["level"] == "warn");
  CHECK(parsed[1]["target"] == "test");
  CHECK(parsed[1]["attempt"] == 2);
  CHECK(parsed[2]["level"] == "error");
  CHECK(parsed[2]["message"] == "multi\nline \"message\"");
  CHECK(parsed[2]["error"] == "bad\\thing");
  CHECK(parsed[3]["level"] == "critical");
  CHECK(parsed[3]["message"] == "last");
}

TEST_CASE("log: text lines through spdlog") {
  CapturedLog capture(ot::log::Format::kText, Level::kWarn);
  ot::log::info("hidden");
  ot::log::Logger("controld.jobs").warn("lease lost", {{"job", "j 1"}, {"attempt", 3}});
  const auto all = lines(capture.text());
  REQUIRE(all.size() == 1);
  CHECK(std::regex_match(all[0],
                         std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z )"
                                    R"(WARN controld\.jobs: lease lost job="j 1" attempt=3)")));
}

TEST_CASE("log: concurrent writers never interleave within a line") {
  CapturedLog capture(ot::log::Format::kJson);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      const ot::log::Logger logger("worker");
      for (int i = 0; i < 200; ++i) logger.info("tick", {{"thread", t}, {"i", i}});
    });
  }
  for (auto& thread : threads) thread.join();
  const auto all = lines(capture.text());
  REQUIRE(all.size() == 800);
  for (const auto& line : all) REQUIRE(nlohmann::json::accept(line));
}

TEST_CASE("log: init swaps the configuration while other threads log") {
  std::ostringstream first;
  std::ostringstream second;
  const auto configFor = [](std::ostringstream& stream) {
    ot::log::Config config;
    config.format = ot::log::Format::kJson;
    config.sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream);
    return config;
  };
  ot::log::init(configFor(first));
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 300; ++i) ot::log::info("tick", {{"thread", t}, {"i", i}});
    });
  }
  for (int round = 0; round < 50; ++round) {
    ot::log::setLevel(Level::kInfo);
    std::this_thread::yield();
  }
  ot::log::init(configFor(second));
  for (auto& thread : threads) thread.join();
  ot::log::init(ot::log::Config{});
  // Every record went to exactly one of the two sinks, whole.
  auto all = lines(first.str());
  const auto later = lines(second.str());
  all.insert(all.end(), later.begin(), later.end());
  CHECK(all.size() == 900);
  for (const auto& line : all) REQUIRE(nlohmann::json::accept(line));
}

TEST_CASE("log: LOG_FORMAT and LOG_LEVEL values") {
  CHECK(ot::log::parseFormat("text") == ot::log::Format::kText);
  CHECK(ot::log::parseFormat("JSON") == ot::log::Format::kJson);
  CHECK_FALSE(ot::log::parseFormat("").has_value());
  CHECK_FALSE(ot::log::parseFormat("jsonl").has_value());
  CHECK(ot::log::parseLevel("trace") == Level::kTrace);
  CHECK(ot::log::parseLevel("Debug") == Level::kDebug);
  CHECK(ot::log::parseLevel("INFO") == Level::kInfo);
  CHECK(ot::log::parseLevel("warn") == Level::kWarn);
  CHECK(ot::log::parseLevel("warning") == Level::kWarn);
  CHECK(ot::log::parseLevel("error") == Level::kError);
  CHECK(ot::log::parseLevel("critical") == Level::kCritical);
  CHECK(ot::log::parseLevel("off") == Level::kOff);
  CHECK_FALSE(ot::log::parseLevel("").has_value());
  CHECK_FALSE(ot::log::parseLevel("verbose").has_value());
  CHECK_FALSE(ot::log::parseLevel("info ").has_value());
  CHECK(ot::log::levelName(Level::kWarn) == "warn");
}

TEST_CASE("log: redactUrl removes credentials") {
  using ot::log::redactUrl;
  CHECK(redactUrl("mysql://ot:s3cret@db.internal:3306/opentunnel") ==
        "mysql://db.internal:3306/opentunnel");
  CHECK(redactUrl("mysql://ot@db.internal/opentunnel") == "mysql://db.internal/opentunnel");
  CHECK(redactUrl("mysql://db.internal/opentunnel") == "mysql://db.internal/opentunnel");
  CHECK(redactUrl("sqlite:///var/lib/opentunnel/db.sqlite") ==
        "sqlite:///var/lib/opentunnel/db.sqlite");
  // Unescaped '@' and '/' in the password must not leave part of it behind.
  CHECK(redactUrl("mysql://ot:p@ss/w@rd@db:3306/ot") == "mysql://db:3306/ot");
  CHECK(redactUrl("mysql://ot:pw@db/ot?sslmode=required&password=x&token=y#frag") ==
        "mysql://db/ot?sslmode=required&password=***&token=***#frag");
  CHECK(redactUrl("postgres://db/ot?user=ot&Password=hunter2") ==
        "postgres://db/ot?user=ot&Password=***");
  CHECK(redactUrl("db=ot user=ot password=hunter2 host=127.0.0.1") ==
        "db=ot user=ot password=*** host=127.0.0.1");
  CHECK(redactUrl("db=ot pass='a b c' host=h") == "db=ot pass=*** host=h");
  CHECK(redactUrl("db=ot;pwd=x;secret_key=y") == "db=ot;pwd=***;secret_key=***");
  CHECK(redactUrl("ot:pw@db/ot") == "db/ot");
  CHECK(redactUrl("") == "");
}
