// common/lifecycle.hpp: how every server starts and stops.
//
//   start_process()    ignore SIGPIPE, raise the descriptor limit, install the SIGINT/SIGTERM handler
//   stop_requested()   true once SIGINT or SIGTERM has arrived
//   stop_deadline()    then: when the grace for the responses in flight (kStopGrace, 2 s) is over
//   stop_fd()          an eventfd that becomes readable, and stays readable, when a stop is requested: loops put it
//                      in their select/epoll/poll set (or read it on io_uring) to wake up
//   OpenConnections    the blocking models' connections (02, 04): a stop wakes every thread blocked in recv() on
//                      one, then gives the requests already read up to 2 s to be answered
//   OnlyConnection     01's one connection: the signal handler itself wakes its recv() the same way
//   recv_before()      the blocking models' wait for request bytes: until the request deadline (deadline.hpp),
//                      however often a stop and continue (Ctrl-Z, fg) interrupts it; at a stop, no wait at all
//
// The stop protocol: stop accepting, finish the responses already being handled (each ends gracefully, see
// closing.hpp), close idle connections, reset whatever is still open when the grace is over, exit 0.
// 07 (Asio) uses asio::signal_set instead, and only shares the 2 s grace period.
#pragma once

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "closing.hpp"
#include "deadline.hpp"
#include "net.hpp"

constexpr std::chrono::seconds kStopGrace{2};  // how long responses in flight may take after a stop

namespace detail {
inline std::atomic<bool> stop_flag{false};
inline int stop_eventfd = -1;

inline std::atomic<std::int64_t> stop_time_ns{0};  // steady_clock's reading when the first stop signal came
inline std::atomic<int> only_connection{-1};       // 01's connection while it is served (see OnlyConnection)

// Async-signal-safe: clock_gettime(), atomics, write() and shutdown() are all on POSIX's list.
inline void on_stop_signal(int) {
  const int saved_errno = errno;  // the interrupted code may be about to read errno: leave it as it was
  if (!stop_flag.load()) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);  // what std::chrono::steady_clock reads on Linux
    stop_time_ns.store(std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec);
  }
  stop_flag.store(true, std::memory_order_release);  // after the time: whoever sees the flag (acquire) sees it
  std::uint64_t one = 1;
  ssize_t ignored = ::write(stop_eventfd, &one, sizeof one);
  (void)ignored;
  if (int fd = only_connection.load(); fd >= 0) ::shutdown(fd, SHUT_RD);  // see OnlyConnection
  errno = saved_errno;
}
}  // namespace detail

inline bool stop_requested() { return detail::stop_flag.load(std::memory_order_acquire); }

// Once stop_requested(): when the grace for the responses in flight is over.
inline std::chrono::steady_clock::time_point stop_deadline() {
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(detail::stop_time_ns.load())) + kStopGrace;
}
inline int stop_fd() { return detail::stop_eventfd; }

inline void start_process() {
  ::signal(SIGPIPE, SIG_IGN);  // belt and braces: every send also passes MSG_NOSIGNAL
  raise_fd_limit();
  detail::stop_eventfd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (detail::stop_eventfd < 0) fail_startup("cannot create an eventfd");
  struct sigaction sa {};
  sa.sa_handler = detail::on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a thread blocked in recv() or accept() returns EINTR and can notice the stop
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// Blocking models: a stop bounds a send to a slow reader too. SO_SNDTIMEO fails a send only after a whole timeout
// without progress, so a reader that keeps taking a few bytes could hold the process long after the stop. Once a
// stop is requested, each blocking send first cuts the timeout to what remains of the grace. False when nothing
// remains: give up on this connection.
inline bool send_within_stop_grace(int fd) {
  if (!stop_requested()) return true;
  auto left = stop_deadline() - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return false;
  timeval tv = to_timeval(left);
  return ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0;
}

// Blocking models with a thread per connection being served (02, 04): how a stop reaches those threads.
// A thread blocked in recv() does not see a signal that the kernel delivered to another thread, but shutdown(fd,
// SHUT_RD) reaches it: its recv() returns 0, end of file, once the bytes already received have been read. Sending
// still works, so a request the thread has already read is answered in full. That is why the stop waits for
// connections, not for requests: a count of requests "being handled" misses the one that recv() has just handed to
// its thread, not yet counted, and the process would end without answering it.
class OpenConnections {
 public:
  // One connection's entry, from construction to destruction. Declare it after the Fd it names, so that it is
  // removed before the Fd closes the descriptor: the next accept() may reuse the number.
  class Entry {
   public:
    Entry(OpenConnections& all, int fd) : all_(all), fd_(fd), added_(all.add(fd)) {}
    ~Entry() {
      if (added_) all_.remove(fd_);
    }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    explicit operator bool() const { return added_; }  // false once a stop has begun: close, do not serve

   private:
    OpenConnections& all_;
    int fd_;
    bool added_;
  };

  // After the accept loop has stopped: end every wait in recv(), then give the connections up to kStopGrace to
  // close (each answers what it has read, sees end of file, and closes). True if they all closed in time; if not,
  // the ones left are reset (closing.hpp), so that the process's exit frees them at once.
  bool stop_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    for (int fd : fds_) ::shutdown(fd, SHUT_RD);
    if (all_closed_.wait_for(lock, kStopGrace, [this] { return fds_.empty(); })) return true;
    for (int fd : fds_) reset_connection(fd);  // still open under the lock, so still this connection's number
    return false;
  }

 private:
  bool add(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    fds_.insert(fd);
    return true;
  }
  void remove(int fd) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.erase(fd);
    }
    all_closed_.notify_all();
  }

  std::mutex mutex_;  // guards fds_ and stopping_
  std::condition_variable all_closed_;
  std::set<int> fds_;
  bool stopping_ = false;
};

// 01: how a stop reaches its one connection. 01 checks stop_requested() and then blocks in recv(); a signal that
// comes between the two would find nobody to notice it, and the recv() would wait for the request deadline (up to
// --idle-timeout, an hour if asked) instead of the stop's grace. 02 and 04 close that gap with OpenConnections:
// their main thread shuts the reading side of every connection, and a recv() that has not started yet returns 0
// as surely as one that is waiting. 01 has no other thread to do it, so its signal handler does the same for the
// one connection registered here. The registration is an atomic, and the handler runs on 01's only thread, so it
// never sees a number that has been closed (and perhaps reused) meanwhile. Declare it after the Fd it names, so
// that it is removed before the Fd closes the descriptor. One thread only: with several, the handler could run on
// another thread while this one closes the descriptor.
class OnlyConnection {
 public:
  explicit OnlyConnection(int fd) { detail::only_connection.store(fd); }  // a stop before this: serve() checks
  ~OnlyConnection() { detail::only_connection.store(-1); }
  OnlyConnection(const OnlyConnection&) = delete;
  OnlyConnection& operator=(const OnlyConnection&) = delete;
};

// Blocking models: the one place where a blocking recv() waits for request bytes. It waits until the request's
// deadline (deadline.hpp: the head's, or the body's gap and bound; `in_body` is RequestReader::reading_body()),
// and returns -2 once it has passed (close with a reset), else what recv_into() returns.
//
// EINTR is not the stop here. On Linux a recv() with SO_RCVTIMEO fails with EINTR after the process is stopped
// and continued (Ctrl-Z then fg, a debugger, kill -STOP and -CONT), even with no handler (signal(7)): the
// connection is fine, so the recv() starts again, with SO_RCVTIMEO set to the time that is left (a second full
// timeout would move the deadline).
//
// At a stop it never waits: it takes what the client has already sent (MSG_DONTWAIT), so a request that was
// waiting in the socket is read and answered (with Connection: close, see respond()), and returns 0, as end of
// file, when nothing is there. A stop also reaches a recv() that is already waiting, through shutdown(SHUT_RD)
// (OpenConnections, OnlyConnection): it returns the bytes already received, then 0.
inline long recv_before(int fd, std::string& buffer, RequestDeadline& deadline, bool in_body) {
  for (;;) {
    if (stop_requested()) {
      long n = recv_into(fd, buffer, MSG_DONTWAIT);
      return n == -2 ? 0 : n;  // nothing waiting: the connection has nothing more to answer
    }
    if (!set_recv_deadline(fd, deadline.due(in_body, std::chrono::steady_clock::now()))) return -2;
    long n = recv_into(fd, buffer);
    if (n > 0) deadline.arrived(static_cast<std::size_t>(n), std::chrono::steady_clock::now());
    if (n != -1 || errno != EINTR) return n;
  }
}

// Blocking models: waits until the listening socket has a connection or a stop is requested. Returns the new
// connection, or an invalid Fd once stop_requested(). (Waiting in poll() rather than in accept() is what lets a
// multi-threaded process notice a signal that the kernel delivered to some other thread.) Stuck at the descriptor
// limit (see accept_client()), the listener stays readable: it then watches only the stop for kAcceptPause, so
// that it tries again 100 times a second instead of spinning.
inline Fd accept_or_stop(int listen_fd) {
  while (!stop_requested()) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR: check the flag again
    if (fds[0].revents & POLLIN) {
      Fd client = accept_client(listen_fd, Blocking::kYes);
      if (client.valid()) return client;
      if (errno == EMFILE || errno == ENFILE) ::poll(&fds[1], 1, static_cast<int>(kAcceptPause.count()));
    }
  }
  return Fd();
}

// Ends the process with status 0 without running static destructors, for models whose threads may still be running
// (02, 04: detached, or still writing to a slow reader when the grace is up): returning from main() would destroy
// what those threads still use.
[[noreturn]] inline void exit_now() {
  std::fflush(nullptr);
  std::_Exit(0);
}
