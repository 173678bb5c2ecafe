#include "controld/http/stream_exchange.h"

namespace ot::controld {

void StreamExchange::pokeLoop() {
  std::function<void()> poke;
  {
    const std::lock_guard lock(mutex_);
    poke = poke_;
  }
  if (poke) poke();
}

StreamExchange::Read StreamExchange::readBody(std::string& piece) {
  bool wake = false;
  Read read = Read::kEnd;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock,
                  [&] { return cancelled_ || bodyAbandoned_ || !body_.empty() || bodyEnded_; });
    if (cancelled_ || bodyAbandoned_) {
      read = Read::kGone;
    } else if (!body_.empty()) {
      piece = std::move(body_.front());
      body_.pop_front();
      bodyBytes_ -= piece.size();
      read = Read::kPiece;
      wake = readingPaused_ && bodyBytes_ < kStreamLowWater;
    }
  }
  if (wake) pokeLoop();
  return read;
}

void StreamExchange::respond(ApiResponse response) {
  {
    const std::lock_guard lock(mutex_);
    if (answered_) return;
    answered_ = true;
    output_.whole = std::move(response);
  }
  pokeLoop();
}

void StreamExchange::beginResponse(int status,
                                   std::vector<std::pair<std::string, std::string>> headers) {
  {
    const std::lock_guard lock(mutex_);
    if (answered_) return;
    answered_ = true;
    streamed_ = true;
    output_.head.emplace(status, std::move(headers));
  }
  pokeLoop();
}

bool StreamExchange::write(std::string_view bytes) {
  if (bytes.empty()) return true;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return cancelled_ || outputBytes_ < kStreamHighWater; });
    if (cancelled_ || !streamed_ || finished_) return false;
    output_.chunks.emplace_back(bytes);
    outputBytes_ += bytes.size();
  }
  pokeLoop();
  return true;
}

void StreamExchange::endResponse() {
  {
    const std::lock_guard lock(mutex_);
    if (!streamed_ || finished_) return;
    finished_ = true;
    output_.ended = true;
  }
  pokeLoop();
}

void StreamExchange::abortResponse() {
  {
    const std::lock_guard lock(mutex_);
    if (!streamed_ || finished_) return;
    finished_ = true;
    output_.aborted = true;
  }
  pokeLoop();
}

size_t StreamExchange::pushBody(std::string_view bytes) {
  const std::lock_guard lock(mutex_);
  if (!bytes.empty()) {
    body_.emplace_back(bytes);
    bodyBytes_ += bytes.size();
  }
  changed_.notify_all();
  return bodyBytes_;
}

void StreamExchange::abandonBody() {
  const std::lock_guard lock(mutex_);
  bodyAbandoned_ = true;
  body_.clear();
  bodyBytes_ = 0;
  changed_.notify_all();
}

void StreamExchange::endBody() {
  const std::lock_guard lock(mutex_);
  bodyEnded_ = true;
  changed_.notify_all();
}

bool StreamExchange::wantsMoreBody() {
  const std::lock_guard lock(mutex_);
  return readingPaused_ && bodyBytes_ < kStreamLowWater;
}

void StreamExchange::setReadingPaused(bool paused) {
  const std::lock_guard lock(mutex_);
  readingPaused_ = paused;
}

StreamExchange::Output StreamExchange::takeOutput() {
  const std::lock_guard lock(mutex_);
  Output out;
  out.whole = std::exchange(output_.whole, std::nullopt);
  out.head = std::exchange(output_.head, std::nullopt);
  out.chunks = std::exchange(output_.chunks, {});
  out.ended = std::exchange(output_.ended, false);
  out.aborted = std::exchange(output_.aborted, false);
  return out;
}

void StreamExchange::written(size_t bytes) {
  const std::lock_guard lock(mutex_);
  outputBytes_ = bytes > outputBytes_ ? 0 : outputBytes_ - bytes;
  changed_.notify_all();
}

void StreamExchange::cancel() {
  const std::lock_guard lock(mutex_);
  cancelled_ = true;
  poke_ = nullptr;  // the loop no longer listens
  changed_.notify_all();
}

}  // namespace ot::controld
