// Keeps otunnel's certificate current while it runs: every `interval` (an hour) a thread of its
// own asks the server for the tunnel's certificate (a blocking curl call, so never on the loop),
// saves a changed chain (state file, and the chain file in passthrough mode) and hands it to the
// event loop through a uv_async_t. controld renews the certificate for the same CSR by itself;
// the client only has to pick the new chain up.
//
// A tunnel taken from the state directory unchecked (the control plane could not be asked at
// startup: Provisioned::unchecked) is checked sooner: after 2 s, then twice as long each time the
// server still cannot answer, up to a minute, until it answers; that answer is logged
// ("the control plane answers again ..."), and the hourly rhythm follows.
//
// Lifetime: construct and start() on the loop thread; close() on the loop thread asks the thread
// to stop and closes the async handle; destroy the object only after the loop has run the close
// (e.g. after uv_run returns): the destructor joins the thread.
#pragma once

#include <uv.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "client/api_client.h"
#include "client/provision.h"

namespace ot::client {

class CertificateWatcher {
 public:
  using OnRenewed = std::function<void(const std::string& chainPem)>;  // loop thread
  using OnMessage = std::function<void(const std::string& line)>;      // loop thread

  CertificateWatcher(uv_loop_t* loop, ApiClientOptions apiOptions, Provisioned provisioned,
                     std::chrono::milliseconds interval, OnRenewed onRenewed, OnMessage onMessage);
  ~CertificateWatcher();
  CertificateWatcher(const CertificateWatcher&) = delete;
  CertificateWatcher& operator=(const CertificateWatcher&) = delete;

  void start();
  void close();

 private:
  struct Event {
    bool renewed = false;
    std::string text;  // the chain when renewed, else a line for people
  };

  void run();
  // False when the server could not be asked (no answer, 5xx, 429): the next check comes sooner
  // while the tunnel is unchecked.
  bool checkOnce(const ApiClient& api);
  void post(Event event);
  static void onAsync(uv_async_t* handle);

  uv_loop_t* loop_;
  ApiClientOptions apiOptions_;
  Provisioned provisioned_;  // owned by the thread once started
  std::chrono::milliseconds interval_;
  OnRenewed onRenewed_;
  OnMessage onMessage_;

  uv_async_t async_{};
  bool started_ = false;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;  // guards the fields below
  std::condition_variable wake_;
  bool asyncOpen_ = false;
  std::deque<Event> events_;
  std::thread thread_;
};

}  // namespace ot::client
