#include "common/log.h"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <chrono>

namespace ot::log {
namespace {

spdlog::level::level_enum toSpdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kCritical:
      return spdlog::level::critical;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::off;
}

// Immutable once built and shared by every logging thread; init() publishes a new one. The
// trailing Field views point into trailingValues, which never moves after construction.
class State {
 public:
  explicit State(Config config)
      : format_(config.format),
        target_(std::move(config.target)),
        trailingValues_(std::move(config.trailingFields)) {
    for (const auto& [name, value] : trailingValues_) trailing_.push_back({name, value});
    auto sink = config.sink;
    if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    // Lines arrive fully rendered: the formatter adds only the newline.
    sink->set_formatter(
        std::make_unique<spdlog::pattern_formatter>("%v", spdlog::pattern_time_type::utc, "\n"));
    logger_ = std::make_shared<spdlog::logger>("ot", std::move(sink));
    logger_->set_level(toSpdlog(config.level));
    logger_->flush_on(spdlog::level::trace);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  void write(Level level, std::string_view target, std::string_view message,
             std::span<const Field> fields) const {
    const spdlog::level::level_enum spdLevel = toSpdlog(level);
    if (level == Level::kOff || !logger_->should_log(spdLevel)) return;
    const Record record{.time = std::chrono::system_clock::now(),
                        .level = level,
                        .target = target,
                        .message = message,
                        .fields = fields,
                        .trailing = trailing_};
    const std::string line = format_ == Format::kJson ? renderJson(record) : renderText(record);
    logger_->log(spdLevel, spdlog::string_view_t(line.data(), line.size()));
  }

  [[nodiscard]] const std::string& target() const { return target_; }
  [[nodiscard]] spdlog::logger& logger() const { return *logger_; }

 private:
  Format format_;
  std::string target_;
  std::vector<std::pair<std::string, std::string>> trailingValues_;
  std::vector<Field> trailing_;
  std::shared_ptr<spdlog::logger> logger_;
};

// Leaked on purpose: records logged from other static destructors must still find a state.
std::atomic<std::shared_ptr<const State>>& current() {
  static auto* const state =
      new std::atomic<std::shared_ptr<const State>>(std::make_shared<const State>(Config{}));
  return *state;
}

std::shared_ptr<const State> load() {
  return current().load(std::memory_order_acquire);
}

std::span<const Field> asSpan(Fields fields) {
  return {fields.begin(), fields.size()};
}

}  // namespace

void init(Config config) {
  current().store(std::make_shared<const State>(std::move(config)), std::memory_order_release);
}

void setLevel(Level level) {
  load()->logger().set_level(toSpdlog(level));
}

bool enabled(Level level) {
  return level != Level::kOff && load()->logger().should_log(toSpdlog(level));
}

void flush() {
  load()->logger().flush();
}

void write(Level level, std::string_view target, std::string_view message,
           std::span<const Field> fields) {
  load()->write(level, target, message, fields);
}

namespace {
void writeDefault(Level level, std::string_view message, Fields fields) {
  const auto state = load();
  state->write(level, state->target(), message, asSpan(fields));
}
}  // namespace

void trace(std::string_view message, Fields fields) {
  writeDefault(Level::kTrace, message, fields);
}
void debug(std::string_view message, Fields fields) {
  writeDefault(Level::kDebug, message, fields);
}
void info(std::string_view message, Fields fields) {
  writeDefault(Level::kInfo, message, fields);
}
void warn(std::string_view message, Fields fields) {
  writeDefault(Level::kWarn, message, fields);
}
void error(std::string_view message, Fields fields) {
  writeDefault(Level::kError, message, fields);
}
void critical(std::string_view message, Fields fields) {
  writeDefault(Level::kCritical, message, fields);
}

void Logger::trace(std::string_view message, Fields fields) const {
  write(Level::kTrace, target_, message, asSpan(fields));
}
void Logger::debug(std::string_view message, Fields fields) const {
  write(Level::kDebug, target_, message, asSpan(fields));
}
void Logger::info(std::string_view message, Fields fields) const {
  write(Level::kInfo, target_, message, asSpan(fields));
}
void Logger::warn(std::string_view message, Fields fields) const {
  write(Level::kWarn, target_, message, asSpan(fields));
}
void Logger::error(std::string_view message, Fields fields) const {
  write(Level::kError, target_, message, asSpan(fields));
}
void Logger::critical(std::string_view message, Fields fields) const {
  write(Level::kCritical, target_, message, asSpan(fields));
}

}  // namespace ot::log
