// common/connection.hpp: the life of one HTTP/1.1 connection of an event loop, written once and doing no I/O.
//
// Every non-blocking server needs the same state machine per connection: read a request, wait for the handler,
// write the response (perhaps in many pieces), keep the connection or end it gracefully, time each wait, and stop
// in an orderly way. ConnectionEngine is that machine and nothing else: the event loop (03 select, 05 epoll; 06
// io_uring and 07 Asio can drive it too) tells it what happened, and it answers what to do next. It never touches
// a socket, so every transition is unit-tested without one (tests/unit/connection_test.cpp). Python's h11 and
// Rust's quinn-proto are built the same way ("sans-I/O"); so is nginx's ngx_http_request apart from ngx_epoll_module.
//
//           start                                   a whole request (the handler's delay is a timer;
//             v       bytes: not yet a request    +---------+  --handler sleep|spin or --delay-us 0: at once)
//        +---------+----------------------------->| WAITING |
//   .--->| READING |                              +---------+
//   |    +---------+  a bad request,                   | timer: the handler is done
//   |      |    |     "100 Continue"                   v
//   |      |    '---------------------------->   +---------+   socket full   +---------+
//   |      |                                     | SENDING |---------------->| BLOCKED |
//   |      | timer: head / body too slow: RESET  +---------+<----------------+---------+
//   |      | EOF, error: CLOSE                    |     |        writable      | no progress for T: RESET
//   |      v                         keep-alive   |     | Connection: close, an error, a stop
//   '---------------------------------------------'     v  (shutdown(SHUT_WR) first)
//                                                   +-----------+  EOF, 16 MiB, its timer
//                                                   | LINGERING |------------------------> CLOSE
//                                                   +-----------+
//
//   Every state: a failed send -> RESET; EOF or an error -> CLOSE; the stop's grace over -> RESET. CLOSE and RESET
//   lead to DONE, for ever. A stop: READING's timer becomes due at once (see on_stop), and then CLOSE.
//
// The deadlines, one per connection at a time (--idle-timeout is T):
//   READING    the head: T from when the wait began (accept, or the last response sent); reads do not move it, so
//              a head that dribbles in is bounded. The body: T from its last read (nginx's client_body_timeout: a
//              body that keeps coming is never cut off), and at most kBodyTimeouts x T from the request's first byte.
//   WAITING    the handler's delay.
//   SENDING, BLOCKED   T from the last progress (a reader that takes nothing for T is reset; a slow one is not).
//   LINGERING  Lingering::deadline() (closing.hpp).
//   stopping   READING: now (see on_stop); the loop ends everything else when the grace is over.
//
// THE CONTRACT, for whoever drives it (an event loop):
//   1. One Connection per connection, in the loop's own table. It is 24 bytes; a request's state (`in`, the
//      parser, the response) lives in an Exchange (exchange.hpp) that exists only while a request is in progress.
//   2. Every event method answers a Next: what to do now, and perhaps a timer to arm. Do it, then wait for the
//      next event. Do::kUnchanged means: go on doing what you were doing (arm the timer if `arm` says so).
//   3. Timers: when Next::arm is set, arm one timer for Next::deadline tagged Next::epoch, and call on_timer()
//      with that epoch when it fires. Never cancel a timer: an old one's epoch differs, and on_timer() ignores it.
//      At most one timer of the current epoch is ever pending; the engine asks for a new one only when that one
//      has fired or a new epoch began (a deadline that moves later needs none: the early timer asks again).
//   4. Reading: while Next says kRead, read and hand the bytes to on_bytes() (copied; the loop's buffer is free
//      again at once); EOF or an error to on_peer_gone(). LINGERING is kRead too: the bytes are counted and thrown
//      away. Bytes given while no read was asked for (a completion already in flight) are kept for later.
//   5. Sending: on kSend, send what outgoing() holds: readiness loops call send_some() on it (response.hpp) and
//      report its SendProgress; completion loops send send_span() (the rest of the head, then a file range for
//      sendfile or splice) and report the bytes taken with on_sent_bytes(n). The span stays valid until the next
//      on_sent*() or release(). Blocked (EAGAIN): report kBlocked, wait for writability, then on_writable().
//   6. Next::shutdown: call shutdown(SHUT_WR) before anything else (LINGERING begins); if it fails, on_peer_gone().
//   7. kClose: close the socket once nothing is in flight on it; kReset: SO_LINGER {1, 0} first (closing.hpp).
//      The connection is then DONE: every event answers kUnchanged. Completion loops call release() once no
//      operation is in flight any more, which frees the Exchange their spans pointed into.
//   8. The stop: call on_stop() on every connection once, then on_grace_over() on those left when kStopGrace is
//      over. A READING connection's deadline becomes now: the loop should look once more for input before its
//      timers (a readiness loop's next wait has a zero timeout), so that a request already in the socket is read
//      and answered, with Connection: close. Whatever was idle or partial then closes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "closing.hpp"
#include "deadline.hpp"
#include "exchange.hpp"
#include "handler.hpp"
#include "http.hpp"
#include "options.hpp"
#include "response.hpp"


// What the loop does next for one connection.
enum class Do : std::uint8_t {
  kRead,          // wait for input (READING, LINGERING), then on_bytes() or on_peer_gone()
  kSend,          // send outgoing() / send_span() now, then on_sent()
  kWaitWritable,  // the socket is full: wait until it is writable, then on_writable()
  kWait,          // no I/O: only the timer (the simulated handler) moves it on
  kClose,         // close the socket (the connection is done)
  kReset,         // reset it (SO_LINGER 0), then close
  kUnchanged,     // go on as before: a stale timer, a deadline that only moved later, bytes while WAITING
};

struct Next {
  Do what = Do::kUnchanged;
  bool shutdown = false;  // shutdown(SHUT_WR) first: LINGERING begins (a failure: on_peer_gone())
  bool arm = false;       // arm a timer for `deadline`, tagged `epoch`
  std::uint32_t epoch = 0;
  std::chrono::steady_clock::time_point deadline;
};

// For completion loops: what to send next. The head's bytes first, then `count` bytes of `file` from `offset`.
struct SendSpan {
  std::string_view head;  // points into the Exchange: valid until on_sent() or release()
  int file = -1;          // -1: no file
  off_t offset = 0;
  std::size_t count = 0;
};

// One connection's state, owned by the loop's table. The engine alone reads and writes it.
class Connection {
 public:
  bool done() const { return phase_ == Phase::kDone; }
  bool busy() const { return x_ != nullptr; }  // a request (or the graceful end) is in progress
  std::uint32_t epoch() const { return epoch_; }  // a timer of another epoch is stale (a loop may prune it)

 private:
  friend class ConnectionEngine;
  enum class Phase : std::uint8_t { kReading, kWaiting, kSending, kBlocked, kLingering, kDone };

  std::unique_ptr<Exchange> x_;                   // none while idle between requests
  std::chrono::steady_clock::time_point since_;  // READING: head wait start, or the body's last read (stopping:
                                                  // the stop); WAITING: when due; SENDING: the last progress
  std::uint32_t epoch_ = 0;  // 32 bits: a wrap takes 4 billion timers of one connection, not 256 requests
  Phase phase_ = Phase::kReading;
  bool stopping_ = false;
};

class ConnectionEngine {
 public:
  using Clock = std::chrono::steady_clock;
  using Prepare = void (*)(Outgoing&);  // called on every response before it is sent (03 moves a file's fd)

  // `opts` is kept by reference: it must outlive the engine (the loops' options live as long as the process).
  explicit ConnectionEngine(const Options& opts, Prepare prepare = nullptr) : opts_(opts), prepare_(prepare) {}
  const Options& options() const { return opts_; }

  // A new connection: read, with the head's deadline.
  Next start(Connection& c, Clock::time_point now) const {
    c.since_ = now;
    return next(c, Do::kRead, true);
  }

  // [excerpt:on-bytes]
  Next on_bytes(Connection& c, std::string_view bytes, Clock::time_point now) const {
    switch (c.phase_) {
      case Connection::Phase::kReading:
        if (!c.x_) {  // a request begins: only now does the connection cost an Exchange
          c.x_ = std::make_unique<Exchange>(opts_.max_body);
          c.x_->began = now;
        }
        c.x_->in.append(bytes);
        return read_request(c, now, false);
      case Connection::Phase::kLingering:  // thrown away; the client's FIN, or the deadline, ends it
        if (!c.x_->lingering.discarded(bytes.size(), now)) return finish(c, Do::kClose);
        return {};
      case Connection::Phase::kDone:
        return {};
      default:  // a completion loop's read that was in flight: kept for the next request
        c.x_->in.append(bytes);
        return {};
    }
  }
  // [/excerpt:on-bytes]

  // EOF (the peer closed or half-closed), or an error such as a reset: nothing can be answered any more.
  Next on_peer_gone(Connection& c) const { return c.done() ? Next{} : finish(c, Do::kClose); }

  // The response being sent: send_some() takes it (readiness loops); nullptr unless SENDING.
  Outgoing* outgoing(Connection& c) const { return c.phase_ == Connection::Phase::kSending ? &c.x_->out : nullptr; }

  SendSpan send_span(const Connection& c) const {
    const Outgoing& out = c.x_->out;
    SendSpan span;
    span.head = std::string_view(out.head).substr(out.head_sent);
    if (out.left > 0) {
      span.file = out.file.get();
      span.offset = out.offset;
      span.count = static_cast<std::size_t>(out.left);
    }
    return span;
  }

  // [excerpt:on-sent]
  // After send_some(): kDone, all sent; kBlocked, the socket is full; kFailed, the peer is gone (or the file shrank).
  Next on_sent(Connection& c, SendProgress progress, Clock::time_point now) const {
    if (c.done()) return {};
    if (progress == SendProgress::kFailed) return finish(c, Do::kReset);  // a client must not take a part for all
    c.since_ = now;  // progress (a loop sends when the socket is writable): the reader is alive
    if (progress == SendProgress::kBlocked) {
      c.phase_ = Connection::Phase::kBlocked;
      return next(c, Do::kWaitWritable, false);
    }
    return response_sent(c, now);
  }
  // [/excerpt:on-sent]

  // Completion loops: n > 0 bytes of send_span() were taken (the head's first, then the file's).
  Next on_sent_bytes(Connection& c, std::size_t n, Clock::time_point now) const {
    if (c.done()) return {};
    Outgoing& out = c.x_->out;
    const std::size_t from_head = std::min(n, out.head.size() - out.head_sent);
    out.head_sent += from_head;
    out.offset += static_cast<off_t>(n - from_head);
    out.left -= static_cast<off_t>(n - from_head);
    if (!out.done()) {
      c.since_ = now;
      c.phase_ = Connection::Phase::kSending;
      return next(c, Do::kSend, false);
    }
    out.file.reset();
    return on_sent(c, SendProgress::kDone, now);
  }

  Next on_writable(Connection& c) const {
    if (c.phase_ != Connection::Phase::kBlocked) return {};
    c.phase_ = Connection::Phase::kSending;
    return next(c, Do::kSend, false);
  }

  // [excerpt:on-timer]
  Next on_timer(Connection& c, std::uint32_t epoch, Clock::time_point now) const {
    if (c.done() || epoch != c.epoch_) return {};  // stale: armed before the deadline moved earlier
    // This epoch's timer has fired; whatever follows with a deadline needs a new one (arm = true).
    if (now < deadline(c)) return next(c, Do::kUnchanged, true);  // the deadline moved later: look again then
    switch (c.phase_) {
      case Connection::Phase::kWaiting:  // the handler is done
        if (c.stopping_) c.x_->request.keep_alive = false;  // stopped while it waited: its answer is the last
        return begin_sending(c, respond(opts_, c.x_->request), now, true);
      case Connection::Phase::kReading:  // stopping: nothing (more) came; else the head or the body was too slow
        return finish(c, c.stopping_ ? Do::kClose : Do::kReset);
      case Connection::Phase::kLingering:  // the response has had its time
        return finish(c, Do::kClose);
      default:  // SENDING or BLOCKED: the reader took nothing for T
        return finish(c, Do::kReset);
    }
  }
  // [/excerpt:on-timer]

  // [excerpt:on-stop]
  // The stop. A request being handled or sent is finished, and says Connection: close. A READING connection gets
  // one more look at its socket: its deadline becomes now, so a request already waiting there is read and
  // answered (with close) before its timer closes it, while an idle or partial one closes at that timer.
  Next on_stop(Connection& c, Clock::time_point now) const {
    if (c.stopping_ || c.done()) return {};
    c.stopping_ = true;
    // In the handler: its response is not made yet, and says close (a loop whose stop is not lifecycle.hpp's
    // stop_requested(), such as 07's signal_set, relies on this; respond() checks that flag too).
    if (c.phase_ == Connection::Phase::kWaiting) c.x_->request.keep_alive = false;
    if (c.phase_ != Connection::Phase::kReading) return {};
    c.since_ = now;
    ++c.epoch_;
    return next(c, Do::kRead, true);
  }
  // [/excerpt:on-stop]

  // kStopGrace is over: whatever is still open is reset (closing.hpp).
  Next on_grace_over(Connection& c) const { return c.done() ? Next{} : finish(c, Do::kReset); }

  // Completion loops, once no operation is in flight on a DONE connection: its Exchange can go.
  void release(Connection& c) const {
    if (c.done()) c.x_.reset();
  }

  // When the current wait ends (Clock::time_point::max() when DONE).
  Clock::time_point deadline(const Connection& c) const {
    switch (c.phase_) {
      case Connection::Phase::kReading:
        if (c.stopping_) return c.since_;
        if (c.x_ && c.x_->reader.reading_body())
          return body_deadline(c.since_, c.x_->began, opts_.idle_timeout);  // deadline.hpp
        return c.since_ + opts_.idle_timeout;
      case Connection::Phase::kWaiting:
        return c.since_;
      case Connection::Phase::kLingering:
        return c.x_->lingering.deadline();
      case Connection::Phase::kDone:
        return Clock::time_point::max();
      default:
        return c.since_ + opts_.idle_timeout;
    }
  }

 private:
  Next next(Connection& c, Do what, bool arm) const {
    Next n;
    n.what = what;
    n.arm = arm && !c.done();
    n.epoch = c.epoch_;
    n.deadline = deadline(c);
    return n;
  }

  Next finish(Connection& c, Do how) const {
    c.phase_ = Connection::Phase::kDone;  // the Exchange stays until the Connection goes, or release()
    return next(c, how, false);
  }

  // [excerpt:read-request]
  // READING: takes the next request out of `in`, if it is all there, and starts handling it.
  Next read_request(Connection& c, Clock::time_point now, bool arm) const {
    http::Parse p = c.x_->reader.next(c.x_->in);  // takes the request (head and body) out of `in` as it reads it
    if (p.status == http::Parse::kIncomplete) {
      if (c.x_->reader.reading_body() && !c.stopping_) c.since_ = now;  // a body is timed by its gaps
      if (c.x_->between_requests()) c.x_.reset();  // idle again: the request's memory goes back (exchange.hpp)
      return next(c, Do::kRead, arm);
    }
    if (p.status != http::Parse::kComplete)  // an error, with Connection: close; or "100 Continue", then READING
      return begin_sending(c, p.status == http::Parse::kError ? refuse(opts_, p) : interim_continue(), now, arm);
    if (c.stopping_) p.request.keep_alive = false;  // answered, and the last (RFC 9112 9.6)
    if (handler_needs_timer(opts_)) {  // the handler's wait is a timer, never a sleep in the loop
      c.x_->request = std::move(p.request);
      c.phase_ = Connection::Phase::kWaiting;
      c.since_ = now + opts_.delay;
      ++c.epoch_;  // the deadline moved earlier: the pending timer is too late
      return next(c, Do::kWait, true);
    }
    run_handler_here(opts_);  // --handler sleep|spin (or --delay-us 0): every other client waits meanwhile
    return begin_sending(c, respond(opts_, p.request), now, arm);
  }
  // [/excerpt:read-request]

  Next begin_sending(Connection& c, Outgoing response, Clock::time_point now, bool arm) const {
    if (prepare_) prepare_(response);
    c.x_->out = std::move(response);
    c.phase_ = Connection::Phase::kSending;
    c.since_ = now;
    return next(c, Do::kSend, arm);
  }

  // [excerpt:response-sent]
  // The whole response has gone: keep the connection (and look at once for a pipelined request), or end it.
  Next response_sent(Connection& c, Clock::time_point now) const {
    if (!c.x_->out.keep_alive) {  // the graceful end (closing.hpp): our FIN, then read until the client's
      c.phase_ = Connection::Phase::kLingering;
      c.x_->lingering = Lingering(now);
      ++c.epoch_;
      Next n = next(c, Do::kRead, true);
      n.shutdown = true;
      return n;
    }
    c.phase_ = Connection::Phase::kReading;
    c.since_ = now;         // the next request's wait begins
    c.x_->began = now;      // (its first bytes may be here already)
    c.x_->out = Outgoing();  // the head's memory goes now, not with the next response
    bool arm = false;
    if (c.stopping_) {  // a keep-alive response that ended during the stop: one more look, as in on_stop()
      ++c.epoch_;
      arm = true;
    }
    return read_request(c, now, arm);
  }
  // [/excerpt:response-sent]

  const Options& opts_;
  Prepare prepare_;
};
