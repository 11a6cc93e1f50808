// 03-select: one thread, non-blocking sockets, select() says which connections are ready.
//
// One thread serves every connection. It never waits on a single client: it waits in select() until some socket is
// readable or writable, or until the next timer is due, and then does only what cannot block. Each connection is a
// small state machine, and the simulated 1 ms handler is a timer in a heap, not a sleep, so a thousand clients can
// wait at once. The limits: select() takes no fd >= FD_SETSIZE (1024), and every turn both the kernel and this loop
// scan every watched connection, ready or not. Chapter 05 (epoll) lifts both.
//
// Needs:  Linux, g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server            (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <fcntl.h>
#include <sys/select.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/readiness.hpp"
#include "../common/timers.hpp"

namespace {

// At most this many new connections per turn: enough to empty a busy listen queue, few enough that a flood of
// connects cannot starve the connections already open. Readiness is level-triggered, so the rest wait one turn.
constexpr int kAcceptBatch = 64;

// select() never watches a file, but a file's descriptor takes the lowest free number, which a connection accepted
// meanwhile then misses (fd >= FD_SETSIZE: 503). Move it above select()'s range; if that fails, it stays put.
void move_file_above_fd_setsize(Outgoing& response) {
  if (response.file.valid() && response.file.get() < FD_SETSIZE) {
    const int high = ::fcntl(response.file.get(), F_DUPFD_CLOEXEC, FD_SETSIZE);
    if (high >= 0) response.file.reset(high);  // closes the low number
  }
}

// Each connection's life (reading, the handler's timer, writing, keeping it or ending it, its deadlines, the stop)
// is the connection engine's (common/connection.hpp: its diagram shows the states); what to do once a socket is
// ready is shared by 03 and 05 (common/readiness.hpp). What is left here is how the loop waits, and how it tells
// the kernel what each fd waits for.
class Loop : public ReadinessLoop<Loop> {
 public:
  explicit Loop(const Options& opts) : ReadinessLoop(opts, move_file_above_fd_setsize) {
    FD_ZERO(&want_read_);
    FD_ZERO(&want_write_);
    FD_SET(stop_fd(), &want_read_);  // readable on SIGINT/SIGTERM: it wakes select()
    max_fd_ = stop_fd();
  }
  void listen_on(Fd listener) {
    listener_ = std::move(listener);
    max_fd_ = std::max(max_fd_, listener_.get());  // non-blocking, and a low fd number, like the stop fd
    watch_listener(true);
  }

  // [excerpt:loop]
  // Runs until a stop has been requested and the responses in flight are written (or kStopGrace has passed).
  void run() {
    while (begin_turn()) {  // the due timers and the stop (readiness.hpp)
      // select() overwrites its fd_sets with its answer and (on Linux) the timeout with the time left, so both
      // are rebuilt every turn: the sets from copies of what we want, the timeout from the timer heap.
      fd_set readable = want_read_, writable = want_write_;
      std::optional<std::chrono::nanoseconds> wait = time_to_next();
      timeval timeout = to_timeval(wait.value_or(std::chrono::nanoseconds(0)));
      int ready = ::select(max_fd_ + 1, &readable, &writable, nullptr, wait ? &timeout : nullptr);
      if (ready < 0) continue;  // EINTR: a signal arrived; the next turn looks at the stop flag

      // The O(n) part: select() marks the ready fds in the sets but returns no list of them, so every connection is
      // tested (and the kernel has already walked every fd up to max_fd_ to fill in the sets).
      for (auto it = conns_.begin(); it != conns_.end();) {
        Conn& c = (it++)->second;  // step past c first: handling it may close it and erase it from the table
        if (FD_ISSET(c.fd.get(), &readable)) on_readable(c);
        else if (FD_ISSET(c.fd.get(), &writable)) on_writable(c);
      }
      // Accept last: a new connection may get the fd number of one closed above, and must not inherit its readiness.
      if (listener_.valid() && FD_ISSET(listener_.get(), &readable)) accept_clients();
    }
  }
  // [/excerpt:loop]

  // [excerpt:watch]
  // What the kernel watches a connection for: input while it reads (or lingers), output only while a response waits
  // for room (a socket is writable nearly always), nothing while the handler works.
  bool watch(int fd, std::uint32_t, std::uint32_t want) {
    forget(fd);
    if (want & kWantRead) FD_SET(fd, &want_read_);
    if (want & kWantWrite) FD_SET(fd, &want_write_);
    max_fd_ = std::max(max_fd_, fd);  // never lowered: a stale mark only makes select() look at a few more bits
    return true;
  }
  void forget(int fd) { FD_CLR(fd, &want_read_); FD_CLR(fd, &want_write_); }
  // [/excerpt:watch]

  void watch_listener(bool on) {
    if (listener_.valid() && on) FD_SET(listener_.get(), &want_read_);
    if (listener_.valid() && !on) FD_CLR(listener_.get(), &want_read_);
  }
  void stop_listening() {
    FD_CLR(stop_fd(), &want_read_);  // it stays readable: still watching it would wake select() every turn
    watch_listener(false);
    listener_.reset();
  }

 private:
  // [excerpt:accept]
  void accept_clients() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      Fd client = accept_client(listener_.get(), Blocking::kNo);
      if (!client.valid()) {  // the queue is empty (EAGAIN), or the connection was lost or shed (EMFILE)
        if (errno == EMFILE || errno == ENFILE) pause_accepting();  // stuck: see readiness.hpp
        return;
      }
      if (client.get() >= FD_SETSIZE) {  // FD_SET() would write past the end of the fd_set: refuse this one, stay up
        Outgoing refusal = refuse(503);
        const bool sent = send_some(client.get(), refusal) == SendProgress::kDone;  // a fresh socket takes it all
        end_refused(std::move(client), sent);  // select() cannot watch it linger: a thread does (closing.hpp)
        continue;
      }
      add(std::move(client));  // watched for input, with the head's deadline (readiness.hpp)
    }
  }
  // [/excerpt:accept]

  Fd listener_;
  fd_set want_read_, want_write_;  // what each fd waits for; select() gets copies, as it overwrites them
  int max_fd_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  const Options opts = options_or_exit(
      argc, argv, {"03-select", 0, "one thread runs one select() loop for every connection (chapter 05 runs several)"});
  start_process();
  Loop loop(opts);  // one loop on this one thread (a second thread would make each fd table growth wait for RCU)
  loop.listen_on(std::move(listen_sockets(opts)[0]));
  loop.run();
  return 0;
}
