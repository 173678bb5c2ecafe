// TlsEngine's private pieces, shared by tls_engine.cc (the OpenSSL path) and
// tls_engine_detach.cc (the proof, the switch and the detached record path). Not for other users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/tls13_key_schedule.h"
#include "common/tls13_record.h"
#include "common/tls_engine.h"

namespace ot::tls {

// The SSL ex_data slot that points an SSL at the engine keeping its traffic secrets.
[[nodiscard]] int engineIndex();

// Counts the whole TLS records in a byte stream (header + body), from a record boundary on.
struct RecordCounter {
  uint64_t records = 0;
  uint32_t bodyLeft = 0;
  uint8_t headerFill = 0;
  uint8_t header[5] = {};

  void pass(std::span<const uint8_t> bytes);
  [[nodiscard]] bool atBoundary() const { return bodyLeft == 0 && headerFill == 0; }
};

// The engine's ciphertext queues: OpenSSL's BIO (and the detached record layer) read from `in`
// (starting at `inPos`), then from `lent` (the caller's bytes, read in place until keepUnread),
// and append to `out`. While a detach is being proven, the bytes OpenSSL reads and writes are
// counted in records (`counting`).
struct MemoryQueues {
  std::vector<uint8_t> in;
  size_t inPos = 0;
  std::span<const uint8_t> lent;
  std::vector<uint8_t> out;
  struct Counters {
    RecordCounter reads;
    RecordCounter writes;
  };
  std::unique_ptr<Counters> counting;
};

// Before the switch: the traffic secrets OpenSSL's keylog callback handed over, and the proof.
struct TlsEngine::Capture {
  uint8_t clientSecret[tls13::kMaxSecretSize] = {};
  uint8_t serverSecret[tls13::kMaxSecretSize] = {};
  uint8_t clientSize = 0;
  uint8_t serverSize = 0;
  bool requested = false;      // the owner asked for the detach
  bool writeProven = false;    // writeNext is proven
  uint64_t writeNext = 0;      // the write sequence number after the proven record ...
  uint64_t writesAtProof = 0;  // ... when the write counter stood here
  std::unique_ptr<tls13::RecordLayer> layer;  // keyed from the secrets, for the proofs

  Capture() = default;
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  ~Capture();
};

// After the switch: all that is left of the connection.
struct TlsEngine::Detached {
  std::unique_ptr<tls13::RecordLayer> layer;
  std::string alpn;
  std::string serverName;
  bool sessionReused = false;
  // Plaintext of a record that did not fit in the caller's span (read hands it out first).
  std::vector<uint8_t> held;
  size_t heldPos = 0;
};

struct TlsEngine::BioState : MemoryQueues {};

}  // namespace ot::tls
