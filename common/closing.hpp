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
//   end_refused(client, sent) a 503 at accept (02, 03, 04): the graceful end too, on a thread of its own, so that
//                            the accepting thread goes on accepting
//   Lingering                the event loops (03, 05, 06, 07): the deadline and the byte count of one connection's
//                            LINGERING state; discard_input() reads a non-blocking socket for it
//   reset_connection(fd)     arm the reset: the close() that follows sends an RST
//
// Each of these prepares the close and leaves the close() itself to the owner of the descriptor (an Fd, a loop's
// close_conn()), so that a model with a registry of open connections (02, 04) removes the entry first.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <system_error>
#include <thread>

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
// until the deadline (SO_RCVTIMEO, set again each time to what is left). A stop reaches a thread here through
// shutdown(SHUT_RD), which makes recv() return 0 (lifecycle.hpp: OpenConnections, OnlyConnection); an EINTR is
// only a signal, or a stop and continue (Ctrl-Z, fg), and the wait goes on.
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
    if (n < 0 && errno == EINTR) continue;
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

// A connection refused at accept with 503 (02: no thread could be created for it; 03: its number is past
// FD_SETSIZE, so select() cannot watch it; 04: the queue is full). Its client may have sent its request and more,
// so it ends gracefully like any other: a plain close would reset it, and the client would lose the 503. But the
// accepting thread must not linger itself: it would stop accepting for up to kLingerTotal per refused client
// (04's workers would run out of queued connections meanwhile), and a flood of refused clients would stall the
// server. So each lingers on a short-lived thread of its own, at most kLingeringRefusals at once: a flood pins
// that many threads and sockets for kLingerTotal at most. Past that, or when no thread can be created (02's
// case, most likely), the end that needs no waiting: our FIN, then what the client has already sent is thrown
// away, so that the close finds nothing unread and sends a FIN, not a reset (what comes later meets a closed
// socket). The threads are detached: a stop does not wait for them, and the process's exit closes their sockets.
constexpr int kLingeringRefusals = 16;

namespace detail {
inline std::atomic<int> lingering_refusals{0};

inline void end_without_waiting(int fd) {
  if (!shutdown_writing(fd)) return;
  char scratch[4096];
  std::size_t thrown_away = 0;
  ssize_t n;
  while (thrown_away < kLingerMaxBytes && (n = ::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT)) > 0)
    thrown_away += static_cast<std::size_t>(n);
}
}  // namespace detail

inline void end_refused(Fd client, bool sent_whole) {
  if (!sent_whole) return reset_connection(client.get());
  if (detail::lingering_refusals.fetch_add(1) < kLingeringRefusals) {
    const int fd = client.release();
    try {
      std::thread([fd] {
        {
          Fd refused(fd);
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // 03's sockets are non-blocking; this one waits
          linger_before_close(fd);
        }
        restore_spare();  // the number is free again: a spare lost at the descriptor limit takes it (net.hpp)
        --detail::lingering_refusals;
      }).detach();
      return;
    } catch (const std::system_error&) {
      client.reset(fd);  // no thread: the connection is still ours to end
    }
  }
  --detail::lingering_refusals;
  detail::end_without_waiting(client.get());
}
