// common/closing.hpp: how a server ends a connection. The two ways nginx has, for all seven servers.
//
// A plain close() is not a safe way to end a connection the server chose to end. If the client has sent bytes the
// server never read (the rest of a refused 4 MB upload, a request pipelined behind a `Connection: close`), the
// kernel answers the close with an RST instead of a FIN, and an RST makes the client's kernel throw away whatever
// it had received and not yet handed to the client: the 413 it was about to read, the last kilobytes of a file.
//
//   graceful   after the last response of a connection the server does not keep (an error, Connection: close,
//   (lingering) 04's fairness, a stop): shutdown(SHUT_WR) sends our FIN after the response, then read and throw
//              away what the client still sends, until its FIN (it has read our response and closed: the usual
//              end, a round trip later), or until kLingerQuiet passes with nothing new, kLingerTotal in all, or
//              kLingerMaxBytes were thrown away. Then close(): whatever arrives later is the client's own doing.
//   abortive   a connection that timed out, whose send failed, or that is still open when the stop's grace is over:
//   (reset)    SO_LINGER {on, 0 s} makes close() send an RST and free the socket at once, with no TIME_WAIT and no
//              unsent bytes left for the kernel to keep retransmitting. (nginx: reset_timedout_connection.)
//
// Not every close is one of these. When the client ends the connection (EOF, or its own reset), or a server closes
// a keep-alive connection that sits between requests (idle at a stop), nothing is waiting to be read, and a plain
// close() sends the FIN.
//
//   end_after_response(fd, sent)  blocking sockets (01, 02, 04): linger_before_close(), or reset if the response
//                            did not go out whole; the caller's Fd then closes
//   Lingering                the event loops (03, 05, 06, 07): the deadline and the byte count of one connection's
//                            LINGERING state; discard_input() reads a non-blocking socket for it
//   reset_connection(fd)     arm the reset: the close() that follows sends an RST
//
// Each of these prepares the close and leaves the close() itself to the owner of the descriptor (an Fd, a loop's
// close_conn()), so that a model with a registry of open connections (02, 04) removes the entry first.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>

#include "net.hpp"
#include "timers.hpp"

// nginx's lingering_timeout is 5 s and its lingering_time 30 s, for clients across the Internet. A client that has
// our response and our FIN closes within a round trip, so on loopback and LANs a second or two is plenty; and the
// stop's grace (kStopGrace, 2 s) bounds lingering at a stop anyway. kLingerMaxBytes bounds the CPU a client can make
// us spend on bytes we throw away (16 MiB is a few milliseconds; a refused 4 MB upload fits in it).
constexpr std::chrono::seconds kLingerQuiet{2};
constexpr std::chrono::seconds kLingerTotal{5};
constexpr std::size_t kLingerMaxBytes = 16 * 1024 * 1024;

// The state of one lingering connection: how much was thrown away, and until when to wait for more.
class Lingering {
 public:
  using Clock = std::chrono::steady_clock;

  Lingering() = default;
  explicit Lingering(Clock::time_point now) : started_(now), last_input_(now) {}

  // When to give up: kLingerQuiet after the last bytes came in, and kLingerTotal after it began, whichever is first.
  Clock::time_point deadline() const { return std::min(started_ + kLingerTotal, last_input_ + kLingerQuiet); }

  // Counts n bytes thrown away. False once kLingerMaxBytes is reached: stop reading and close.
  bool discarded(std::size_t n, Clock::time_point now) {
    bytes_ += n;
    last_input_ = now;
    return bytes_ < kLingerMaxBytes;
  }

 private:
  Clock::time_point started_;
  Clock::time_point last_input_;
  std::size_t bytes_ = 0;
};

// Begins the graceful end: our FIN goes out after every byte already queued. False if the socket is already gone
// (ENOTCONN: the peer reset it): there is nothing to wait for, close at once.
inline bool shutdown_writing(int fd) { return ::shutdown(fd, SHUT_WR) == 0; }

// Non-blocking sockets, in LINGERING: reads and throws away what has arrived. True: nothing more now, wait until
// readable again (or the deadline). False: close now (the client's FIN, an error, or kLingerMaxBytes reached).
inline bool discard_input(int fd, Lingering& lingering) {
  char scratch[4096];
  for (;;) {
    ssize_t n = ::recv(fd, scratch, sizeof scratch, 0);
    if (n > 0) {
      if (!lingering.discarded(static_cast<std::size_t>(n), Lingering::Clock::now())) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Blocking sockets: the graceful end, up to the close, which stays the caller's (its Fd). Each recv() waits at most
// until the deadline (SO_RCVTIMEO); a stop signal (EINTR) ends the wait at once, and 02's and 04's stop reaches a
// thread here through shutdown(SHUT_RD), which makes recv() return 0.
inline void linger_before_close(int fd) {
  if (!shutdown_writing(fd)) return;
  Lingering lingering(Lingering::Clock::now());
  char scratch[4096];
  for (;;) {
    auto left = lingering.deadline() - Lingering::Clock::now();
    if (left <= Lingering::Clock::duration::zero()) return;
    timeval tv = to_timeval(left);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = ::recv(fd, scratch, sizeof scratch, 0);
    if (n <= 0 || !lingering.discarded(static_cast<std::size_t>(n), Lingering::Clock::now())) return;
  }
}

// The abortive end: after this, close() sends an RST and frees the socket at once. The caller still closes.
inline void reset_connection(int fd) {
  linger abortive{1, 0};  // on, with a timeout of 0 s
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
}

// Blocking sockets, after the last response of a connection the server ends: gracefully if the response went out
// whole, else reset (it cannot be completed, and the client must not take a part of it for the whole).
inline void end_after_response(int fd, bool sent_whole) {
  if (sent_whole) linger_before_close(fd);
  else reset_connection(fd);
}
