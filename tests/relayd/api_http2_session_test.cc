// ApiHttp2Session against a real nghttp2 client session, bytes pumped between them in memory.
#include "relayd/api_http2_session.h"

#include <doctest/doctest.h>
#include <nghttp2/nghttp2.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace ot::relayd {
namespace {

struct Recorder final : ApiHttp2Session::Handler {
  std::vector<Http2Request> requests;
  std::vector<int32_t> closed;
  std::vector<int> refused;
  void onHttp2Request(Http2Request request) override { requests.push_back(std::move(request)); }
  void onHttp2StreamClosed(int32_t streamId) override { closed.push_back(streamId); }
  void onHttp2Refused(int status) override { refused.push_back(status); }
};

// A client: its answers by stream, and whether a GOAWAY came (with its error code).
struct Client {
  struct Answer {
    std::string status;
    std::string body;
    bool closed = false;
  };
  nghttp2_session* session = nullptr;
  std::map<int32_t, Answer> answers;
  std::map<int32_t, std::string> bodies;  // request bodies being sent
  std::map<int32_t, size_t> sent;
  int goAwayError = -1;

  Client() {
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_header_callback(
        callbacks,
        [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t nameLength,
           const uint8_t* value, size_t valueLength, uint8_t, void* self) {
          if (std::string(reinterpret_cast<const char*>(name), nameLength) == ":status") {
            static_cast<Client*>(self)->answers[frame->hd.stream_id].status =
                std::string(reinterpret_cast<const char*>(value), valueLength);
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        callbacks, [](nghttp2_session*, uint8_t, int32_t streamId, const uint8_t* data,
                      size_t length, void* self) {
          static_cast<Client*>(self)->answers[streamId].body.append(
              reinterpret_cast<const char*>(data), length);
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        callbacks, [](nghttp2_session*, const nghttp2_frame* frame, void* self) {
          if (frame->hd.type == NGHTTP2_GOAWAY) {
            static_cast<Client*>(self)->goAwayError = static_cast<int>(frame->goaway.error_code);
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        callbacks, [](nghttp2_session*, int32_t streamId, uint32_t, void* self) {
          static_cast<Client*>(self)->answers[streamId].closed = true;
          return 0;
        });
    nghttp2_session_client_new(&session, callbacks, this);
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~Client() { nghttp2_session_del(session); }

  int32_t request(const std::string& method, const std::string& path,
                  std::vector<std::pair<std::string, std::string>> extra = {},
                  const std::string* body = nullptr) {
    std::vector<std::pair<std::string, std::string>> fields{
        {":method", method}, {":scheme", "https"}, {":authority", "api.test"}, {":path", path}};
    fields.insert(fields.end(), extra.begin(), extra.end());
    std::vector<nghttp2_nv> nva;
    for (auto& [name, value] : fields) {
      nva.push_back({reinterpret_cast<uint8_t*>(name.data()),
                     reinterpret_cast<uint8_t*>(value.data()), name.size(), value.size(),
                     NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider provider{};
    provider.read_callback = [](nghttp2_session*, int32_t streamId, uint8_t* buffer, size_t length,
                                uint32_t* flags, nghttp2_data_source*, void* self) -> ssize_t {
      auto& client = *static_cast<Client*>(self);
      const std::string& all = client.bodies[streamId];
      size_t& offset = client.sent[streamId];
      const size_t count = std::min(length, all.size() - offset);
      std::memcpy(buffer, all.data() + offset, count);
      offset += count;
      if (offset == all.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
      return static_cast<ssize_t>(count);
    };
    const int32_t id = nghttp2_submit_request(session, nullptr, nva.data(), nva.size(),
                                              body != nullptr ? &provider : nullptr, nullptr);
    if (body != nullptr) bodies[id] = *body;
    return id;
  }
};

// Moves bytes both ways until neither side has anything to send.
void pump(Client& client, ApiHttp2Session& server) {
  for (int round = 0; round < 10'000; ++round) {
    bool moved = false;
    const uint8_t* data = nullptr;
    ssize_t length = 0;
    while ((length = nghttp2_session_mem_send(client.session, &data)) > 0) {
      server.receive({data, static_cast<size_t>(length)});
      moved = true;
    }
    std::vector<uint8_t> out;
    server.takeOutput(out, 1u << 20);
    if (!out.empty()) {
      nghttp2_session_mem_recv(client.session, out.data(), out.size());
      moved = true;
    }
    if (!moved) return;
  }
}

TEST_CASE("ApiHttp2Session: a request out, its answer back on its stream") {
  Recorder handler;
  auto server = ApiHttp2Session::create(handler, {});
  REQUIRE(server);
  Client client;
  const std::string body = "{\"id\":\"x\"}";
  const int32_t id =
      client.request("POST", "/api/tunnel", {{"content-type", "application/json"}}, &body);
  pump(client, *server);
  REQUIRE(handler.requests.size() == 1);
  const Http2Request& request = handler.requests[0];
  CHECK(request.streamId == id);
  CHECK(request.method == "POST");
  CHECK(request.path == "/api/tunnel");
  CHECK(request.authority == "api.test");
  CHECK(request.body == body);
  server->respond(id, 201, {{"Content-Type", "application/json"}}, "{\"ok\":true}");
  pump(client, *server);
  CHECK(client.answers[id].status == "201");
  CHECK(client.answers[id].body == "{\"ok\":true}");
  CHECK(client.answers[id].closed);
  CHECK(handler.closed == std::vector<int32_t>{id});
  CHECK(server->openStreams() == 0);
  CHECK(server->pendingResponseBytes() == 0);
}

TEST_CASE("ApiHttp2Session: oversized headers get 431, an oversized body 413, unseen") {
  Recorder handler;
  auto server = ApiHttp2Session::create(handler, {});
  Client client;
  const int32_t big = client.request("GET", "/x", {{"x-big", std::string(17 * 1024, 'a')}});
  const std::string declaredBody(2'000'000, 'x');
  const int32_t declared =
      client.request("POST", "/x", {{"content-length", "2000000"}}, &declaredBody);
  const std::string huge(1024 * 1024 + 1, 'b');
  const int32_t sent = client.request("POST", "/x", {}, &huge);
  pump(client, *server);
  CHECK(handler.requests.empty());
  CHECK(client.answers[big].status == "431");
  CHECK(client.answers[declared].status == "413");
  CHECK(client.answers[sent].status == "413");
  CHECK(client.answers[sent].body.find("PayloadTooLargeError") != std::string::npos);
  CHECK(handler.refused.size() == 3);
  // The connection still serves.
  const int32_t next = client.request("GET", "/ok");
  pump(client, *server);
  REQUIRE(handler.requests.size() == 1);
  CHECK(handler.requests[0].streamId == next);
}

TEST_CASE("ApiHttp2Session: request bodies held by the connection stay within the budget") {
  Recorder handler;
  auto server = ApiHttp2Session::create(handler, {});
  Client client;
  const std::string part(400 * 1024, 'c');
  const int32_t first = client.request("POST", "/1", {}, &part);
  pump(client, *server);
  client.request("POST", "/2", {}, &part);
  pump(client, *server);
  REQUIRE(handler.requests.size() == 2);
  // 800 KiB held by requests in flight: the third body may bring it to 1 MiB (plus one 64 KiB
  // window), no further.
  const int32_t third = client.request("POST", "/3", {}, &part);
  pump(client, *server);
  CHECK(handler.requests.size() == 2);
  CHECK(client.sent[third] < part.size());
  CHECK(client.sent[third] <= 224 * 1024 + 64 * 1024);
  server->respond(first, 204, {}, "");
  pump(client, *server);
  REQUIRE(handler.requests.size() == 3);
  CHECK(handler.requests[2].streamId == third);
  CHECK(handler.requests[2].body.size() == part.size());
}

TEST_CASE("ApiHttp2Session: interleaved bodies over the budget: the largest refused, no stall") {
  Recorder handler;
  auto server = ApiHttp2Session::create(handler, {});
  Client client;
  const std::string part(600 * 1024, 'd');
  for (int i = 0; i < 3; ++i) client.request("POST", "/x", {}, &part);
  pump(client, *server);
  REQUIRE(handler.requests.size() == 1);
  CHECK(handler.requests[0].body.size() == part.size());
  CHECK(handler.refused == std::vector<int>{503, 503});
}

TEST_CASE("ApiHttp2Session: a bad preface or frame gets GOAWAY and finishes") {
  Recorder handler;
  auto server = ApiHttp2Session::create(handler, {});
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  server->receive({reinterpret_cast<const uint8_t*>(junk.data()), junk.size()});
  std::vector<uint8_t> out;
  server->takeOutput(out, 1u << 20);
  Client client;
  nghttp2_session_mem_recv(client.session, out.data(), out.size());
  CHECK(client.goAwayError == NGHTTP2_PROTOCOL_ERROR);
  CHECK(server->finished());
}

TEST_CASE("ApiHttp2Session: goAway lets open streams finish, then the session is finished") {
  Recorder handler;
  auto server = ApiHttp2Session::create(handler, {});
  Client client;
  const int32_t id = client.request("GET", "/slow");
  pump(client, *server);
  REQUIRE(handler.requests.size() == 1);
  server->goAway();
  pump(client, *server);
  CHECK(client.goAwayError == NGHTTP2_NO_ERROR);
  CHECK_FALSE(server->finished());
  server->respond(id, 200, {}, "done");
  pump(client, *server);
  CHECK(client.answers[id].body == "done");
  CHECK(server->finished());
}

}  // namespace
}  // namespace ot::relayd
