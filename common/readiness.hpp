// common/readiness.hpp: what a readiness loop does once the kernel says a socket is ready, shared by 03 (select)
// and 05 (epoll), as redis's ae.c is shared by ae_select.c and ae_epoll.c.
//
// The loop's main.cpp keeps its I/O model: how it waits (select, epoll_pwait2), how it watches an fd for reading
// or writing, how it accepts. This keeps the rest: the table of connections, the timer heap, one recv() per
// readable socket, send_some() per writable one, and carrying out what the connection engine (connection.hpp)
// answers. The Poller (the main.cpp's Loop, which derives from ReadinessLoop<Loop>) provides:
//
//   bool watch(int fd, std::uint32_t before, std::uint32_t want)   watch fd for kWantRead / kWantWrite / nothing
//                                                                  (before: kUnwatched for a new fd)
//   void forget(int fd)                                            before the fd closes
//   void watch_listener(bool on)                                   watch the listener for new connections, or not
//   void stop_listening()                                          the stop: close the listener, quiet the stop fd
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "closing.hpp"
#include "connection.hpp"
#include "lifecycle.hpp"
#include "net.hpp"
#include "options.hpp"
#include "response.hpp"
#include "timers.hpp"

template <class Poller>
class ReadinessLoop {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::uint32_t kWantRead = 1, kWantWrite = 2, kUnwatched = 4;

  // [excerpt:conn]
  struct Conn {
    Fd fd;                               // closed when close_conn() drops the connection from the table
    std::uint32_t interest = kUnwatched;  // what the poller watches it for now: watch() is called only on change
    std::uint64_t generation = 0;        // tells it apart from earlier connections that had the same fd number
    Connection life;                     // its HTTP state (connection.hpp): 24 bytes while idle
  };
  // [/excerpt:conn]
  // What an idle connection costs us, besides its table entry and its timer: the kernel's socket costs several KiB.
  static_assert(sizeof(Conn) <= 40, "an idle connection's state is a few words; a request's is an Exchange");

 protected:
  // Timers are never cancelled (timers.hpp). One names its connection by fd, generation (an fd number is reused)
  // and epoch (connection.hpp: a deadline that moved earlier); fd kWakeUp only wakes the loop, kLoop ends a pause.
  struct Timer {
    int fd;
    std::uint32_t epoch;
    std::uint64_t generation;
  };
  static constexpr int kWakeUp = -1, kLoop = -2;

  ReadinessLoop(const Options& opts, ConnectionEngine::Prepare prepare = nullptr) : engine_(opts, prepare) {}

  // [excerpt:turn]
  // The start of every turn: the due timers, then the stop. False once the loop is done: every connection has
  // ended, or the stop's grace is over and what remains is reset.
  bool begin_turn() {
    Clock::time_point now = Clock::now();
    while (std::optional<Timer> t = timers_.pop_due(now)) on_timer(*t, now);
    if (stop_requested() && !stopping_) begin_stop(now);  // its timers are due: the wait that follows is a peek
    if (stopping_ && !conns_.empty() && now >= stop_deadline_) {
      for (auto& entry : conns_)
        if (engine_.on_grace_over(entry.second.life).what == Do::kReset) reset_connection(entry.first);
      conns_.clear();  // each Fd closes its socket
    }
    return !(stopping_ && conns_.empty());
  }
  // [/excerpt:turn]

  // How long the wait may last: until the next timer; std::nullopt, for ever.
  std::optional<std::chrono::nanoseconds> time_to_next() const { return timers_.time_to_next(Clock::now()); }

  // A connection just accepted.
  void add(Fd client) {
    const int fd = client.get();
    Conn& c = conns_[fd];
    c.fd = std::move(client);
    c.generation = ++generations_;
    timers_.prune_over(2 * conns_.size() + 64, [this](const Timer& t) { return is_stale(t); });  // timers.hpp
    apply(c, engine_.start(c.life, Clock::now()));
  }

  // Readable: one recv(), whatever the state (LINGERING's bytes are thrown away by the engine). This needs
  // level-triggered readiness (select(), and epoll without EPOLLET): the socket is reported again next turn if more
  // is left, so no connection starves the others and no missed edge can hang one. (Edge-triggered, every handler
  // must read and write until EAGAIN: that is a lab.)
  void on_readable(Conn& c) {
    char buffer[4096];  // at most 4 KiB a turn: the parser answers before a head grows far past its 8 KiB limit
    ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;  // nothing after all
    if (n <= 0) return apply(c, engine_.on_peer_gone(c.life));  // EOF, or an error such as a reset
    apply(c, engine_.on_bytes(c.life, std::string_view(buffer, static_cast<std::size_t>(n)), Clock::now()));
  }
  void on_writable(Conn& c) { apply(c, engine_.on_writable(c.life)); }
  // An error or a hang-up, reported even when not asked for. If it was waiting for input, read: the bytes before
  // the client's FIN still count (a request, or LINGERING's wait for that FIN); else nothing can be answered.
  void on_hangup(Conn& c) {
    if (c.interest == kWantRead) return on_readable(c);
    apply(c, engine_.on_peer_gone(c.life));
  }

  // Carries out what the engine answered, until the connection waits for something.
  void apply(Conn& c, Next next) {
    for (;;) {
      const int fd = c.fd.get();
      if (next.arm) timers_.add(next.deadline, Timer{fd, next.epoch, c.generation});
      if (next.shutdown && !shutdown_writing(fd)) {  // LINGERING begins with our FIN; it fails if the peer is gone
        next = engine_.on_peer_gone(c.life);
        continue;
      }
      switch (next.what) {
        case Do::kSend:  // as much as the socket takes now: the head, then the file by sendfile()
          next = engine_.on_sent(c.life, send_some(fd, *engine_.outgoing(c.life)), Clock::now());
          continue;
        case Do::kRead: return watch(c, kWantRead);
        case Do::kWaitWritable: return watch(c, kWantWrite);
        case Do::kWait: return watch(c, 0);  // bytes that arrive meanwhile wait in the kernel
        case Do::kReset: reset_connection(fd); return close_conn(c);  // closing.hpp: the close sends an RST
        case Do::kClose: return close_conn(c);
        case Do::kUnchanged: return;
      }
    }
  }

  // Out of descriptors with a connection we can neither accept nor shed (net.hpp: accept_client()): the listener
  // stays readable, so a level-triggered loop would spin on it. Stop watching it for kAcceptPause; a timer turns
  // it back on.
  void pause_accepting() {
    poller().watch_listener(false);
    timers_.add(Clock::now() + kAcceptPause, Timer{kLoop, 0, 0});
  }

  std::unordered_map<int, Conn> conns_;  // fd -> connection: the one owner of every connection's state
  bool stopping_ = false;

 private:
  Poller& poller() { return static_cast<Poller&>(*this); }

  void watch(Conn& c, std::uint32_t want) {
    if (want == c.interest) return;  // unchanged: spare the system call
    if (!poller().watch(c.fd.get(), c.interest, want)) return close_conn(c);  // out of kernel memory: this one
    c.interest = want;
  }

  void on_timer(const Timer& t, Clock::time_point now) {
    if (t.fd == kLoop) return poller().watch_listener(true);  // the accept pause is over
    if (t.fd == kWakeUp || is_stale(t)) return;  // the stop's wake-up, or a connection closed since
    Conn& c = conns_.at(t.fd);
    apply(c, engine_.on_timer(c.life, t.epoch, now));
  }

  // [excerpt:stop]
  // Stop accepting, then tell every connection (connection.hpp: on_stop); kStopGrace later, reset what is left.
  void begin_stop(Clock::time_point now) {
    stopping_ = true;
    stop_deadline_ = now + kStopGrace;
    timers_.add(stop_deadline_, Timer{kWakeUp, 0, 0});
    poller().stop_listening();
    std::vector<Conn*> all;  // apply() may close a connection: not while walking the table
    for (auto& entry : conns_) all.push_back(&entry.second);
    for (Conn* c : all) apply(*c, engine_.on_stop(c->life, now));
  }
  // [/excerpt:stop]

  // A timer of a connection that has closed, of an fd number reused since, or of an earlier epoch.
  bool is_stale(const Timer& t) const {
    if (t.fd < 0) return false;
    auto it = conns_.find(t.fd);
    return it == conns_.end() || it->second.generation != t.generation || it->second.life.epoch() != t.epoch;
  }

  // The one way a connection ends: the poller forgets it, the table drops it (its Fd closes the socket), and a
  // spare descriptor lost at the limit takes the number (net.hpp).
  void close_conn(Conn& c) {
    poller().forget(c.fd.get());
    conns_.erase(c.fd.get());
    restore_spare();
  }

  ConnectionEngine engine_;
  TimerQueue<Timer> timers_;  // every connection's deadline and the handler's delays, in one heap
  std::uint64_t generations_ = 0;
  Clock::time_point stop_deadline_;
};
