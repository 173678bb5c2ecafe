// A batched path to the kernel for TcpStreams that are mostly idle (relayd's bridges between
// visitors): their small reads arrive through an armed multishot receive instead of a readiness
// event and a read(2) each, and the small writes made inside a send batch (the heartbeat wheel's
// pings) go out in one submission instead of a write(2) each. relayd implements it with io_uring
// (relayd/io_ring.h); a context without one (otunnel, a kernel without io_uring) returns none
// and every stream reads and writes through libuv alone.
//
// The ring calls back into the stream (TcpStream::onRing*) from its completion processing, which
// runs at the top of a loop callback, never inside an owner's call. Loop thread only.
#pragma once

#include <cstdint>
#include <vector>

namespace ot {

class TcpStream;

class StreamRing {
 public:
  // Arms a receive on `fd` whose data comes to stream->onRingData until it ends
  // (stream->onRingReceiveEnded, exactly once). False when it cannot be armed now: the stream
  // reads through libuv instead.
  [[nodiscard]] virtual bool armReceive(int fd, TcpStream* stream) = 0;
  // Ends an armed receive; its data already taken from the socket still arrives, then
  // onRingReceiveEnded.
  virtual void cancelReceive(TcpStream* stream) = 0;
  // Whether a send batch is open (sendBatched is taken).
  [[nodiscard]] virtual bool batchingSends() const = 0;
  // Queues `bytes` (moved from) for `fd`; stream->onRingSent follows when the batch is flushed.
  // False when it cannot be queued (nothing is moved): the stream writes as usual.
  [[nodiscard]] virtual bool sendBatched(int fd, TcpStream* stream,
                                         std::vector<uint8_t>& bytes) = 0;
  // Sends what the open batch holds now and delivers every onRingSent; the batch stays open.
  virtual void flushSends() = 0;
  // A stream that holds bytes read while it did not want them asks to have them delivered on the
  // loop's next turn (stream->onRingHeldDue), once it wants them again; forget() withdraws it.
  virtual void deliverHeldSoon(TcpStream* stream) = 0;
  virtual void forget(TcpStream* stream) = 0;

 protected:
  ~StreamRing() = default;
};

}  // namespace ot
