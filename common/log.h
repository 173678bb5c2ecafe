// Process logging on spdlog: one line per record, text for people or JSON for collectors, on
// stderr unless a sink is given. The configuration is process-wide and swapped atomically, so any
// thread may log at any time, including while init() runs. Rendering lives in log_format.h.
//
//   ot::log::init({.format = ot::log::Format::kJson, .level = ot::log::Level::kInfo,
//                  .target = "relayd"});
//   const ot::log::Logger log("relayd.bridge");
//   log.info("bridge attached", {{"tunnel", id}, {"bridge", bridgeId}, {"routes", 3}});
//
// Never pass secrets as fields: tokens, keys and database URLs (use redactUrl) stay out of logs.
// Not for per-packet paths: check enabled() first where a line would be built in a loop.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/log_format.h"
#include "common/log_redact.h"

namespace spdlog::sinks {
class sink;
}

namespace ot::log {

using Fields = std::initializer_list<Field>;

struct Config {
  Format format = Format::kText;
  Level level = Level::kInfo;
  // The target of records logged through the free functions below.
  std::string target = "opentunnel";
  // Written after every record's own fields, e.g. {{"machine", id}, {"region", region}}.
  std::vector<std::pair<std::string, std::string>> trailingFields{};
  // Where lines go; nullptr means stderr. Must be thread-safe (an spdlog *_mt sink). Its
  // formatter is replaced: lines arrive rendered and only get a newline.
  std::shared_ptr<spdlog::sinks::sink> sink{};
};

// Replaces the process configuration. Before the first call, records go to stderr as text at
// info level with target "opentunnel".
void init(Config config);
void setLevel(Level level);
[[nodiscard]] bool enabled(Level level);
void flush();

// The one entry point everything else goes through.
void write(Level level, std::string_view target, std::string_view message,
           std::span<const Field> fields);

// Records under the configured default target.
void trace(std::string_view message, Fields fields = {});
void debug(std::string_view message, Fields fields = {});
void info(std::string_view message, Fields fields = {});
void warn(std::string_view message, Fields fields = {});
void error(std::string_view message, Fields fields = {});
void critical(std::string_view message, Fields fields = {});

// A component's logger: the same as the free functions with its own target ("relayd.bridge").
// Cheap to copy; holds no reference to the process configuration.
class Logger {
 public:
  explicit Logger(std::string target) : target_(std::move(target)) {}

  void trace(std::string_view message, Fields fields = {}) const;
  void debug(std::string_view message, Fields fields = {}) const;
  void info(std::string_view message, Fields fields = {}) const;
  void warn(std::string_view message, Fields fields = {}) const;
  void error(std::string_view message, Fields fields = {}) const;
  void critical(std::string_view message, Fields fields = {}) const;
  void log(Level level, std::string_view message, std::span<const Field> fields) const {
    write(level, target_, message, fields);
  }

  [[nodiscard]] const std::string& target() const { return target_; }

 private:
  std::string target_;
};

}  // namespace ot::log
