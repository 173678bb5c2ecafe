// StreamExchange (controld/http/stream_exchange.h): the worker's writes wait while the loop is
// behind, body reads wait for pieces and see the end or a vanished connection, and the loop is
// poked when there is something for it.
#include "controld/http/stream_exchange.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "controld/api/admin_routes.h"
#include "controld/api/api_source_guard.h"

namespace ot::controld {
namespace {

using namespace std::chrono_literals;

TEST_CASE("stream exchange: a worker's writes wait while the loop is behind") {
  std::atomic<int> pokes{0};
  StreamExchange exchange([&] { ++pokes; });
  exchange.beginResponse(200, {{"Content-Type", "application/json"}});
  const std::string piece(kStreamHighWater / 2, 'x');
  CHECK(exchange.write(piece));
  CHECK(exchange.write(piece));  // now at the high-water mark
  std::promise<bool> third;
  auto wrote = third.get_future();
  std::thread worker([&] { third.set_value(exchange.write(piece)); });
  CHECK(wrote.wait_for(100ms) == std::future_status::timeout);  // held back
  StreamExchange::Output out = exchange.takeOutput();
  REQUIRE(out.head);
  CHECK(out.head->first == 200);
  CHECK(out.chunks.size() == 2);
  CHECK(wrote.wait_for(50ms) == std::future_status::timeout);  // taken is not yet written
  exchange.written(piece.size());
  CHECK(wrote.get());
  worker.join();
  CHECK(pokes.load() >= 3);
  exchange.endResponse();
  exchange.abortResponse();  // after the end: ignored
  out = exchange.takeOutput();
  CHECK(out.ended);
  CHECK_FALSE(out.aborted);
}

TEST_CASE("stream exchange: a write waiting for a peer that went away fails") {
  StreamExchange exchange([] {});
  exchange.beginResponse(200, {});
  REQUIRE(exchange.write(std::string(kStreamHighWater, 'x')));
  auto blocked = std::async(std::launch::async, [&] { return exchange.write("more"); });
  CHECK(blocked.wait_for(50ms) == std::future_status::timeout);
  exchange.cancel();
  CHECK_FALSE(blocked.get());
}

TEST_CASE("stream exchange: body pieces in order, then the end or the connection gone") {
  std::atomic<int> pokes{0};
  StreamExchange exchange([&] { ++pokes; });
  CHECK(exchange.pushBody("ab") == 2);
  CHECK(exchange.pushBody("cd") == 4);
  exchange.endBody();
  std::string piece;
  CHECK(exchange.readBody(piece) == StreamExchange::Read::kPiece);
  CHECK(piece == "ab");
  CHECK(exchange.readBody(piece) == StreamExchange::Read::kPiece);
  CHECK(piece == "cd");
  CHECK(exchange.readBody(piece) == StreamExchange::Read::kEnd);

  StreamExchange gone([] {});
  auto read = std::async(std::launch::async, [&] {
    std::string p;
    return gone.readBody(p);
  });
  CHECK(read.wait_for(50ms) == std::future_status::timeout);
  gone.cancel();
  CHECK(read.get() == StreamExchange::Read::kGone);

  StreamExchange answered([] {});
  answered.pushBody("unread");
  answered.abandonBody();
  CHECK(answered.readBody(piece) == StreamExchange::Read::kGone);
}

TEST_CASE("stream exchange: a paused loop is woken once the worker drained the body") {
  std::atomic<int> pokes{0};
  StreamExchange exchange([&] { ++pokes; });
  const std::string piece(kStreamHighWater, 'x');
  CHECK(exchange.pushBody(piece) == kStreamHighWater);
  CHECK(exchange.pushBody("y") > kStreamHighWater);
  exchange.setReadingPaused(true);
  CHECK_FALSE(exchange.wantsMoreBody());
  std::string got;
  REQUIRE(exchange.readBody(got) == StreamExchange::Read::kPiece);
  CHECK(pokes.load() == 1);  // below the low-water mark now
  CHECK(exchange.wantsMoreBody());
}

TEST_CASE("stream exchange: one answer only") {
  StreamExchange exchange([] {});
  exchange.respond(ApiResponse::json(200, "{}"));
  exchange.respond(ApiResponse::json(500, "{}"));
  exchange.beginResponse(200, {});
  CHECK_FALSE(exchange.write("no head was begun"));
  StreamExchange::Output out = exchange.takeOutput();
  REQUIRE(out.whole);
  CHECK(out.whole->status == 200);
  CHECK_FALSE(out.head);
}

// A Backup whose export fails after its first page, and whose import counts what it was fed.
class FailingBackup final : public Backup {
 public:
  Status exportTo(const ExportOptions&, const ExportSink& sink) override {
    if (!sink("{\"records\":[\n", 0)) return Error{ErrorKind::kUnavailable, "gone"};
    if (!sink("{\"id\":\"a\"}", 1)) return Error{ErrorKind::kUnavailable, "gone"};
    return Error{ErrorKind::kUnavailable, "storage went away"};
  }
  std::unique_ptr<ImportSession> beginImport(const ImportOptions&) override { return nullptr; }
};

ApiRequest adminRequest(std::string path, const char* token) {
  ApiRequest request;
  request.method = "POST";
  request.path = std::move(path);
  if (token != nullptr)
    request.headers.emplace_back("Authorization", std::string("Bearer ") + token);
  return request;
}

TEST_CASE("admin stream routes: an export failing midway is cut, never ended") {
  FailingBackup backup;
  const StreamRoutes routes = adminStreamRoutes(AdminApi{"secret", {}, &backup});
  REQUIRE(routes);
  CHECK_FALSE(routes(adminRequest("/api/admin/stats", "secret")));  // not streamed
  const ApiRequest request = adminRequest("/api/admin/export", "secret");
  const StreamHandler handler = routes(request);
  REQUIRE(handler);
  StreamExchange exchange([] {});
  handler(request, exchange);
  const StreamExchange::Output out = exchange.takeOutput();
  REQUIRE(out.head);
  CHECK(out.head->first == 200);
  CHECK(out.chunks.size() == 2);
  CHECK(out.aborted);
  CHECK_FALSE(out.ended);
}

TEST_CASE("admin stream routes: the admin token is required, and nothing without one") {
  FailingBackup backup;
  CHECK_FALSE(adminStreamRoutes(AdminApi{"", {}, &backup}));
  const StreamRoutes routes = adminStreamRoutes(AdminApi{"secret", {}, &backup});
  for (const char* path : {"/api/admin/export", "/api/admin/import"}) {
    for (const char* token : {static_cast<const char*>(nullptr), "wrong"}) {
      CAPTURE(path);
      const ApiRequest request = adminRequest(path, token);
      StreamExchange exchange([] {});
      routes(request)(request, exchange);
      const StreamExchange::Output out = exchange.takeOutput();
      REQUIRE(out.whole);
      CHECK(out.whole->status == 401);
      CHECK_FALSE(out.head);
    }
  }
}

TEST_CASE("admin stream routes: wrong tokens count with the API's failed authentications") {
  // One guard state around the API's routes and the streamed admin routes (as controld builds
  // them): failures on either count for the source, and a refused source gets 429 on both, the
  // right token included.
  FailingBackup backup;
  metrics::Metrics metrics;
  SourceFailureLimits limits;
  limits.maxFailures = 3;
  const auto state = makeSourceGuardState(limits, metrics, [] { return uint64_t{1000}; });
  const auto guard = [state](ApiHandler inner) { return withSourceGuard(std::move(inner), state); };
  const ApiHandler api = guard([](const ApiRequest&) {
    return ApiResponse::error(401, "UnauthorizedError", "not the tunnel's token");
  });
  const StreamRoutes routes = adminStreamRoutes(AdminApi{"secret", {}, &backup}, guard);
  auto stream = [&](const char* token) {
    ApiRequest request = adminRequest("/api/admin/export", token);
    request.clientAddress = "192.0.2.7";
    StreamExchange exchange([] {});
    routes(request)(request, exchange);
    StreamExchange::Output out = exchange.takeOutput();
    return out.whole ? out.whole->status : (out.head ? out.head->first : 0);
  };
  ApiRequest apiRequest = adminRequest("/api/tunnel/abc", "guess");
  apiRequest.clientAddress = "192.0.2.7";

  CHECK(stream("wrong") == 401);
  CHECK(api(apiRequest).status == 401);
  CHECK(stream(nullptr) == 401);  // the third failure: the source is refused from now on
  CHECK(stream("secret") == 429);
  CHECK(api(apiRequest).status == 429);
  // Another address is not affected.
  ApiRequest other = adminRequest("/api/admin/export", "secret");
  other.clientAddress = "198.51.100.1";
  StreamExchange exchange([] {});
  routes(other)(other, exchange);
  const StreamExchange::Output out = exchange.takeOutput();
  REQUIRE(out.head);
  CHECK(out.head->first == 200);
}

}  // namespace
}  // namespace ot::controld
