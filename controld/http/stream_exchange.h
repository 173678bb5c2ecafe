// A request whose body and/or response stream between HttpServer's loop and one worker thread
// (POST /api/admin/import takes a body of any size, POST /api/admin/export answers a body as it
// is read from storage). Both directions are bounded: the loop stops reading the socket while
// more than kStreamHighWater bytes of body wait for the worker, and the worker's write() blocks
// while more than kStreamHighWater bytes of response wait for the socket. So memory per exchange
// stays near twice the high-water mark, the loop never blocks, and a slow peer slows the worker.
//
// Threads: the worker side (readBody, respond, beginResponse, write, endResponse, abortResponse)
// on the one worker running the StreamHandler; the loop side (pushBody, endBody, takeOutput,
// written, cancel) on the loop. `poke` (given at construction) wakes the loop to call takeOutput;
// it may run on either thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controld/api/api_types.h"

namespace ot::controld {

inline constexpr size_t kStreamHighWater = 1024 * 1024;
inline constexpr size_t kStreamLowWater = 256 * 1024;

class StreamExchange {
 public:
  explicit StreamExchange(std::function<void()> poke) : poke_(std::move(poke)) {}

  // ---- worker side ----
  enum class Read : uint8_t { kPiece, kEnd, kGone };
  // The next piece of the request body (waits for it): kEnd once the whole body was read, kGone
  // when the connection went away first.
  Read readBody(std::string& piece);
  // A whole response (an error, or an import's report). After it nothing else is sent.
  void respond(ApiResponse response);
  // Starts a chunked response with this status and headers.
  void beginResponse(int status, std::vector<std::pair<std::string, std::string>> headers);
  // The next bytes of it; waits while the peer is behind. false when the connection went away
  // (or no response was begun, or it already ended).
  bool write(std::string_view bytes);
  // Ends it cleanly (the last chunk), or cuts it: the connection closes without the last chunk,
  // so the peer sees a transfer error rather than a complete body. The first of the two counts;
  // both do nothing without beginResponse().
  void endResponse();
  void abortResponse();

  // ---- loop side ----
  // Body bytes for the worker; answers how many wait now (stop reading above kStreamHighWater).
  size_t pushBody(std::string_view bytes);
  void endBody();
  // The rest of the body will not be read (the worker answered first): reads see kGone.
  void abandonBody();
  // Whether the loop paused reading and the worker has since drained below kStreamLowWater.
  [[nodiscard]] bool wantsMoreBody();
  void setReadingPaused(bool paused);

  struct Output {
    std::optional<ApiResponse> whole;
    std::optional<std::pair<int, std::vector<std::pair<std::string, std::string>>>> head;
    std::vector<std::string> chunks;
    bool ended = false;
    bool aborted = false;
  };
  [[nodiscard]] Output takeOutput();
  // `bytes` of chunks handed out by takeOutput reached the socket.
  void written(size_t bytes);
  // The connection is gone (closed, reset): the worker's reads and writes fail from now on.
  void cancel();

 private:
  void pokeLoop();

  std::function<void()> poke_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Request body.
  std::deque<std::string> body_;
  size_t bodyBytes_ = 0;
  bool bodyEnded_ = false;
  bool bodyAbandoned_ = false;
  bool readingPaused_ = false;
  // Response.
  Output output_;
  size_t outputBytes_ = 0;  // queued or being written
  bool answered_ = false;   // respond() or beginResponse() was called
  bool streamed_ = false;   // beginResponse() was called
  bool finished_ = false;   // endResponse() or abortResponse() was called
  bool cancelled_ = false;
};

// Runs on a worker thread; reads the body and answers through the exchange. Must not throw.
using StreamHandler = std::function<void(const ApiRequest& head, StreamExchange& exchange)>;
// Chooses, on the loop once a request's head arrived, whether it streams: the handler for it, or
// an empty function for an ordinary request. Must be quick and must not block.
using StreamRoutes = std::function<StreamHandler(const ApiRequest& head)>;

}  // namespace ot::controld
