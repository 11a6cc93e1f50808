// common/lifecycle.hpp: how every server starts and stops.
//
//   start_process()    ignore SIGPIPE, raise the descriptor limit, install the SIGINT/SIGTERM handler
//   stop_requested()   true once SIGINT or SIGTERM has arrived
//   stop_fd()          an eventfd that becomes readable, and stays readable, when a stop is requested: loops put it
//                      in their select/epoll/poll set (or read it on io_uring) to wake up
//   InFlight           counts the requests between "parsed" and "response sent"
//   wait_for_in_flight()  after a stop: give those requests up to 2 s to finish
//
// The stop protocol: stop accepting, finish the responses already being handled, close idle connections, exit 0.
// 07 (Asio) uses asio::signal_set instead, and only shares the 2 s grace period.
#pragma once

#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "net.hpp"

constexpr std::chrono::seconds kStopGrace{2};  // how long responses in flight may take after a stop

namespace detail {
inline std::atomic<bool> stop_flag{false};
inline std::atomic<int> in_flight{0};
inline int stop_eventfd = -1;

inline void on_stop_signal(int) {  // async-signal-safe: an atomic store and a write()
  stop_flag.store(true);
  std::uint64_t one = 1;
  ssize_t ignored = ::write(stop_eventfd, &one, sizeof one);
  (void)ignored;
}
}  // namespace detail

inline bool stop_requested() { return detail::stop_flag.load(std::memory_order_relaxed); }
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

// Counts one request as being handled for as long as it lives.
class InFlight {
 public:
  InFlight() { detail::in_flight.fetch_add(1); }
  ~InFlight() { detail::in_flight.fetch_sub(1); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

// Blocking models, after the accept loop has stopped: let the requests in flight finish, for at most kStopGrace.
// (A short poll is fine here: it runs once, at exit, and keeps the workers free of shutdown plumbing.)
inline void wait_for_in_flight() {
  auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  while (detail::in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Blocking models: waits until the listening socket has a connection or a stop is requested. Returns the new
// connection, or an invalid Fd once stop_requested(). (Waiting in poll() rather than in accept() is what lets a
// multi-threaded process notice a signal that the kernel delivered to some other thread.)
inline Fd accept_or_stop(int listen_fd) {
  while (!stop_requested()) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR: check the flag again
    if (fds[0].revents & POLLIN) {
      Fd client = accept_client(listen_fd, Blocking::kYes);
      if (client.valid()) return client;
    }
  }
  return Fd();
}

// Ends the process with status 0 without running static destructors, for models whose worker threads may still be
// blocked on idle connections (02, 04): returning from main() would destroy what those threads still use.
[[noreturn]] inline void exit_now() {
  std::fflush(nullptr);
  std::_Exit(0);
}
