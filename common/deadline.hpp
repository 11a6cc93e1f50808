// common/deadline.hpp: how long a client may take to send a request (--idle-timeout T), one rule for all seven.
//
//   the head  T from when the wait for it began (the accept, or the last response sent). Bytes that arrive do not
//             move it: a client that dribbles the head a byte at a time is closed at T, like a silent one.
//   the body  T from its last bytes (the gap between two reads, as nginx's client_body_timeout), so a body that
//             keeps coming is not cut off; and the whole request within kBodyTimeouts x T of its first byte, so
//             that a trickle (a byte every T - 1 ms) cannot hold the connection for max-body x T.
//
// The event loops get it from the connection engine (connection.hpp); the blocking models from RequestDeadline,
// which their recv_before() asks before each wait (lifecycle.hpp). Neither does I/O here: the unit tests drive both
// with made-up times.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

// The bound on a whole request, in idle timeouts from its first byte. 10 x T (50 s by default) takes a body of
// --max-body (1 MiB) at 21 KB/s or more, ten times a slow mobile upload; a server that accepts larger uploads would
// bound the rate instead (Apache's mod_reqtimeout: MinRate).
constexpr int kBodyTimeouts = 10;

// When a body must have made progress by: T after its last read, and no later than the whole request's bound.
inline std::chrono::steady_clock::time_point body_deadline(std::chrono::steady_clock::time_point last_read,
                                                          std::chrono::steady_clock::time_point first_byte,
                                                          std::chrono::seconds limit) {
  return std::min(last_read + limit, first_byte + kBodyTimeouts * limit);
}

// The blocking models' request deadline: ask due() before each wait, report what each read brought with arrived().
class RequestDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  RequestDeadline(std::chrono::seconds limit, Clock::time_point now) : limit_(limit) { next_request(now); }

  // A new request head is awaited from `now` (a new connection, or the last response has been sent).
  void next_request(Clock::time_point now) {
    wait_began_ = last_read_ = now;
    started_ = false;
  }

  // `n` bytes arrived at `now`.
  void arrived(std::size_t n, Clock::time_point now) {
    if (n == 0) return;
    if (!started_) first_byte_ = now;
    started_ = true;
    last_read_ = now;
  }

  // When the wait that is about to begin must end. `in_body`: the head is whole and the body is on its way
  // (RequestReader::reading_body()).
  Clock::time_point due(bool in_body) const {
    return in_body ? body_deadline(last_read_, first_byte_, limit_) : wait_began_ + limit_;
  }

 private:
  std::chrono::seconds limit_;
  Clock::time_point wait_began_;  // when the wait for this request's head began
  Clock::time_point first_byte_;  // when its first byte came
  Clock::time_point last_read_;   // when its last bytes came
  bool started_ = false;
};
