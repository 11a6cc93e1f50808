// common/deadline.hpp: how long a client may take to send a request (--idle-timeout T), in one place for all seven.
//
//   the head  T from when the wait for it began: a client that dribbles the head a byte at a time is still closed
//             at T (slowloris).
//   the body  T from the last bytes that came (the gap between two reads, as nginx's client_body_timeout), and the
//             whole body within T plus one second for every kBodyMinRate bytes received so far (Apache's
//             mod_reqtimeout, MinRate). A body that keeps coming is never cut off, however long it takes; a trickle
//             is, however regular its drops, and no body can hold a connection longer than T + max-body / 500 s.
//
// A loop asks due() before each wait and reports each read with arrived(); it does no I/O of its own, so the unit
// tests drive it with made-up times (tests/unit/deadline_test.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

class RequestDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kBodyMinRate = 500;  // bytes per second, mod_reqtimeout's default

  RequestDeadline(std::chrono::seconds limit, Clock::time_point now) : limit_(limit) { next_request(now); }

  // A new request head is awaited from `now` (a new connection, or the last response has been sent).
  void next_request(Clock::time_point now) {
    in_body_ = false;
    since_ = last_ = now;
    body_bytes_ = 0;
  }

  // When the wait that is about to begin must end. `in_body`: the reader has the whole head and waits for the body
  // (RequestReader::reading_body()); the first time it says so, the body's clock starts.
  Clock::time_point due(bool in_body, Clock::time_point now) {
    if (in_body && !in_body_) {
      in_body_ = true;
      since_ = last_ = now;
    }
    if (!in_body_) return since_ + limit_;
    constexpr Clock::duration kEarnedPerByte = Clock::duration(std::chrono::seconds(1)) / kBodyMinRate;
    return std::min(last_ + limit_, since_ + limit_ + kEarnedPerByte * static_cast<long>(body_bytes_));
  }

  // `n` bytes of the request arrived at `now`.
  void arrived(std::size_t n, Clock::time_point now) {
    if (!in_body_ || n == 0) return;  // the head's deadline does not move: that is what stops a slowloris
    body_bytes_ += n;
    last_ = now;
  }

 private:
  Clock::duration limit_;
  Clock::time_point since_;  // the head: when the wait began; the body: when the head ended
  Clock::time_point last_;   // the body: when its last bytes came
  std::size_t body_bytes_ = 0;
  bool in_body_ = false;
};
