// common/lifecycle.hpp: how every server starts and stops.
//
//   start_process()    ignore SIGPIPE, raise the descriptor limit, install the SIGINT/SIGTERM handler
//   stop_requested()   true once SIGINT or SIGTERM has arrived
//   stop_fd()          an eventfd that becomes readable, and stays readable, when a stop is requested: loops put it
//                      in their select/epoll/poll set (or read it on io_uring) to wake up
//   OpenConnections    the blocking models' connections (02, 04): a stop wakes every thread blocked in recv() on
//                      one, then gives the requests already read up to 2 s to be answered
//
// The stop protocol: stop accepting, finish the responses already being handled, close idle connections, exit 0.
// 07 (Asio) uses asio::signal_set instead, and only shares the 2 s grace period.
#pragma once

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "net.hpp"

constexpr std::chrono::seconds kStopGrace{2};  // how long responses in flight may take after a stop

namespace detail {
inline std::atomic<bool> stop_flag{false};
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
  // close (each answers what it has read, sees end of file, and closes). True if they all closed in time.
  bool stop_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    for (int fd : fds_) ::shutdown(fd, SHUT_RD);
    return all_closed_.wait_for(lock, kStopGrace, [this] { return fds_.empty(); });
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

// Ends the process with status 0 without running static destructors, for models whose threads may still be running
// (02, 04: detached, or still writing to a slow reader when the grace is up): returning from main() would destroy
// what those threads still use.
[[noreturn]] inline void exit_now() {
  std::fflush(nullptr);
  std::_Exit(0);
}
