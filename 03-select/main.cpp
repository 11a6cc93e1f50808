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
#include <netinet/tcp.h>
#include <sys/select.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/closing.hpp"
#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/response.hpp"
#include "../common/timers.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// At most this many new connections per turn: enough to empty a busy listen queue, few enough that a flood of
// connects cannot starve the connections already open. Readiness is level-triggered, so the rest wait one turn.
constexpr int kAcceptBatch = 64;

// [excerpt:connection]
// The life of one connection. It handles one request at a time; pipelined requests wait in `in` for their turn.
//
//   accept --> READING ---- request complete: arm the handler's timer ---------> WAITING
//               ^ |  \                                                              |
//               | |   \                                                             | the timer fires
//               | |    `-- bad request, 100 Continue, or --handler sleep|spin -> WRITING --> reset: a send failed,
//               | |                                                                 |  |     or a stalled reader
//               | `--> close: EOF, error, stop; reset: request deadline             |  |
//               `------------------ whole response sent, keep-alive ----------------'  | sent, and not kept:
//                                                                                      v Connection: close, error,
//                                            close <-- EOF, error, 16 MiB, deadline  LINGERING        or stopping
//
//   READING: wants input. The request deadline (--idle-timeout) counts from when it began waiting (accept, or the
//   previous response sent); reads do not push it back, so a client that dribbles its head is closed all the same.
//   WAITING: no I/O at all (bytes that arrive wait in the kernel), and no deadline.
//   WRITING: wants writability until `out` is all sent: its head, then (with --root) its file by sendfile() from
//   the saved offset, as much as the socket takes each time. A reader that takes nothing for the idle timeout is
//   closed, like SO_SNDTIMEO in the blocking chapters; a slow one that keeps reading is not (see listen_sockets()).
//   LINGERING: the graceful end (common/closing.hpp). Our FIN has gone out after the response (shutdown SHUT_WR);
//   what the client still sends is read and thrown away until its FIN, so a close with unread bytes never sends
//   an RST that would destroy the response before the client has read it. A deadline of its own bounds it.
//   Not handled here: the disk. Opening a file and reading it (in sendfile) block the loop while the disk works;
//   readiness says nothing about regular files, which always count as ready. 06 does the same (an open and a
//   sendfile() in its loop); only advanced.cpp --splice moves the reads to kernel workers (the open stays).
enum class State { kReading, kWaiting, kWriting, kLingering };

struct Conn {
  Fd fd;                          // closed when close_conn() drops the connection from the table
  std::uint64_t generation = 0;   // tells it apart from earlier connections that had the same fd number
  State state = State::kReading;
  std::string in;                 // bytes received and not yet read by `reader`: may hold pipelined requests
  http::RequestReader reader;     // where the request being read stands (common/http.hpp)
  http::Request request;          // WAITING: the request the handler is working on
  Outgoing out;                   // WRITING: the response, how far it has got, and whether to close after it
  Clock::time_point idle_since;   // READING: since the request wait began; WRITING: the last write progress
  Lingering lingering;            // LINGERING: its deadline, and the bytes thrown away
};
// [/excerpt:connection]

// Timers are never cancelled (see timers.hpp). Each names its connection by fd AND generation; when it fires for a
// connection that has closed (its fd number perhaps reused since) or moved on, it is ignored.
struct Timer {
  enum Kind { kHandler, kIdle, kLinger } kind;
  int fd;
  std::uint64_t generation;
};

class Loop {
 public:
  Loop(const Options& opts, Fd listener) : opts_(opts), listener_(std::move(listener)) {
    FD_ZERO(&want_read_);
    FD_ZERO(&want_write_);
    FD_SET(listener_.get(), &want_read_);
    FD_SET(stop_fd(), &want_read_);  // becomes readable on SIGINT/SIGTERM, and so wakes select()
    max_fd_ = std::max(listener_.get(), stop_fd());
  }

  // [excerpt:loop]
  // Runs until a stop has been requested and the responses in flight are written (or kStopGrace has passed).
  void run() {
    for (;;) {
      Clock::time_point now = Clock::now();
      while (std::optional<Timer> t = timers_.pop_due(now)) on_timer(*t, now);
      if (stop_requested() && !stopping_) begin_stop(now);
      if (stopping_ && (conns_.empty() || now >= stop_deadline_)) return reset_all();  // the grace is over

      // select() overwrites its fd_sets with its answer and (on Linux) the timeout with the time left, so both
      // are rebuilt every turn: the sets from copies of what we want, the timeout from the timer heap.
      fd_set readable = want_read_, writable = want_write_;
      std::optional<std::chrono::nanoseconds> wait = timers_.time_to_next(Clock::now());
      timeval timeout = to_timeval(wait.value_or(std::chrono::nanoseconds(0)));
      int ready = ::select(max_fd_ + 1, &readable, &writable, nullptr, wait ? &timeout : nullptr);
      if (ready < 0) continue;  // EINTR: a signal arrived; the next turn looks at the stop flag

      // The O(n) part: select() says how many fds are ready, not which, so every connection is looked at (and the
      // kernel has already walked every fd up to max_fd_ to fill in the sets).
      for (auto it = conns_.begin(); it != conns_.end();) {
        Conn& c = (it++)->second;  // step past c first: handling it may close it and erase it from the table
        if (FD_ISSET(c.fd.get(), &readable)) on_readable(c);
        else if (FD_ISSET(c.fd.get(), &writable)) advance(c);
      }
      // Accept last: a new connection may get the fd number of one closed above, and must not inherit its answer.
      if (listener_.valid() && FD_ISSET(listener_.get(), &readable)) accept_clients();
    }
  }
  // [/excerpt:loop]

 private:
  // [excerpt:accept]
  void accept_clients() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      Fd client = accept_client(listener_.get(), Blocking::kNo);
      if (!client.valid()) return;  // the queue is empty (EAGAIN), or the connection was lost or shed (EMFILE)
      int fd = client.get();
      if (fd >= FD_SETSIZE) {  // FD_SET() would write past the end of the fd_set: refuse this one, stay up
        Outgoing refusal = refuse(503);
        const bool sent = send_some(fd, refusal) == SendProgress::kDone;  // a fresh socket takes 100 bytes at once
        end_refused(std::move(client), sent);  // select() cannot watch it linger: a thread does (closing.hpp)
        continue;
      }
      Conn& c = conns_[fd];
      c.fd = std::move(client);
      c.reader = http::RequestReader(opts_.max_body);
      c.generation = ++generations_;
      c.idle_since = Clock::now();
      timers_.add(c.idle_since + opts_.idle_timeout, Timer{Timer::kIdle, fd, c.generation});
      timers_.prune_over(2 * conns_.size() + 64, [this](const Timer& t) { return is_stale(t); });  // see timers.hpp
      max_fd_ = std::max(max_fd_, fd);  // never lowered: a stale mark only makes select() look at a few more bits
      watch(c);
    }
  }
  // [/excerpt:accept]

  void on_readable(Conn& c) {
    if (c.state == State::kLingering) {  // throw the bytes away; the client's FIN (or the deadline) ends it
      if (!discard_input(c.fd.get(), c.lingering)) close_conn(c);
      return;
    }
    long n = recv_into(c.fd.get(), c.in);
    if (n == -2) return;               // nothing to read after all
    if (n <= 0) return close_conn(c);  // EOF (the peer closed or half-closed) or an error such as a reset
    advance(c);                        // (no new idle_since: the request deadline holds however often bytes come)
  }

  void start_writing(Conn& c, Outgoing response) {
    // select() never watches a file, but its descriptor takes the lowest free number, which a connection accepted
    // meanwhile then misses (fd >= FD_SETSIZE: 503). Move it above select()'s range; if that fails, it stays put.
    if (response.file.valid() && response.file.get() < FD_SETSIZE) {
      const int high = ::fcntl(response.file.get(), F_DUPFD_CLOEXEC, FD_SETSIZE);
      if (high >= 0) response.file.reset(high);  // closes the low number
    }
    c.out = std::move(response);
    c.state = State::kWriting;
  }

  // [excerpt:advance]
  // Runs the connection's protocol as far as it goes without waiting, then records what it waits for next.
  void advance(Conn& c) {
    for (;;) {
      if (c.state == State::kWriting) {
        SendProgress progress = send_some(c.fd.get(), c.out);
        if (progress == SendProgress::kFailed) return reset_conn(c);  // the peer reset or vanished, or the file shrank
        c.idle_since = Clock::now();  // progress, or the response is done and the wait for the next request begins
        if (progress == SendProgress::kBlocked) break;  // the send buffer is full: wait until it is writable
        if (!c.out.keep_alive) return start_lingering(c);  // the graceful end (a stop's responses say close)
        c.state = State::kReading;  // and look at once for a pipelined request already in `in`
      }
      if (c.state != State::kReading) break;  // WAITING: the handler's timer moves it on
      http::Parse p = c.reader.next(c.in);  // takes the request (head and body) out of `in` as it reads it
      if (p.status == http::Parse::kIncomplete) break;  // read more, only now that we need more
      if (p.status != http::Parse::kComplete) {
        // An error, with Connection: close (nothing can follow a framing error); or "100 Continue" for a client that
        // waits for it before sending its body, and then back to READING.
        start_writing(c, p.status == http::Parse::kError ? refuse(opts_, p) : interim_continue());
        continue;
      }
      if (handler_needs_timer(opts_)) {
        c.request = p.request;
        c.state = State::kWaiting;
        timers_.add(Clock::now() + opts_.delay, Timer{Timer::kHandler, c.fd.get(), c.generation});
        break;
      }
      run_handler_here(opts_);  // --handler sleep|spin (or --delay-us 0): every other client waits meanwhile
      start_writing(c, respond(opts_, p.request));
    }
    // Stopping, and between requests (its response said keep-alive before the stop): closed, as in begin_stop().
    if (stopping_ && c.state == State::kReading) return close_conn(c);
    watch(c);
  }
  // [/excerpt:advance]

  // What select() should watch this connection for, from its state: READING input, WRITING output (only while
  // there are unsent bytes: a socket is writable nearly always), WAITING nothing, LINGERING input.
  void watch(Conn& c) {
    FD_CLR(c.fd.get(), &want_read_);
    FD_CLR(c.fd.get(), &want_write_);
    if (c.state == State::kReading || c.state == State::kLingering) FD_SET(c.fd.get(), &want_read_);
    if (c.state == State::kWriting) FD_SET(c.fd.get(), &want_write_);
  }

  // [excerpt:timers]
  void on_timer(const Timer& t, Clock::time_point now) {
    if (t.fd < 0 || is_stale(t)) return;  // the stop's wake-up, or a timer whose connection is gone
    Conn& c = conns_.at(t.fd);
    if (t.kind == Timer::kHandler) {
      if (c.state != State::kWaiting) return;
      start_writing(c, respond(opts_, c.request));
      return advance(c);
    }
    // LINGERING has a deadline of its own, which the bytes that come in push back: its timer looks at it again,
    // and the idle timer retires. Past it, a plain close: the response has had its time.
    if (c.state == State::kLingering) {
      if (t.kind != Timer::kLinger) return;
      if (c.lingering.deadline() <= now) return close_conn(c);
      return timers_.add(c.lingering.deadline(), t);
    }
    // The deadline check. Write progress and finished responses move idle_since, not the heap: the check looks at
    // the real deadline now; past it, reset (closing.hpp), otherwise look again then. (The handler's wait never
    // counts.)
    Clock::time_point deadline = c.idle_since + opts_.idle_timeout;
    if (c.state == State::kWaiting) deadline = now + opts_.idle_timeout;
    if (deadline <= now) return reset_conn(c);
    timers_.add(deadline, t);  // each connection has exactly one idle timer in the heap
  }
  // [/excerpt:timers]

  // [excerpt:stop]
  // Stop accepting, close the connections that are between requests, and give the others kStopGrace to finish.
  void begin_stop(Clock::time_point now) {
    stopping_ = true;
    stop_deadline_ = now + kStopGrace;
    timers_.add(stop_deadline_, Timer{Timer::kIdle, -1, 0});  // a timer for no connection: it only wakes the loop
    FD_CLR(stop_fd(), &want_read_);  // it stays readable: still watching it would wake select() every turn
    FD_CLR(listener_.get(), &want_read_);
    listener_.reset();
    std::vector<Conn*> idle;
    for (auto& entry : conns_)
      if (entry.second.state == State::kReading) idle.push_back(&entry.second);
    for (Conn* c : idle) close_conn(*c);
  }
  // [/excerpt:stop]

  // A timer of a connection that has closed (its fd number perhaps reused since): on_timer() ignores it.
  bool is_stale(const Timer& t) const {
    auto it = conns_.find(t.fd);
    return t.fd >= 0 && (it == conns_.end() || it->second.generation != t.generation);
  }

  // The graceful end (common/closing.hpp): our FIN goes out after the response; the client's ends LINGERING.
  void start_lingering(Conn& c) {
    if (!shutdown_writing(c.fd.get())) return close_conn(c);  // the peer is gone already
    c.state = State::kLingering;
    c.lingering = Lingering(Clock::now());
    timers_.add(c.lingering.deadline(), Timer{Timer::kLinger, c.fd.get(), c.generation});
    watch(c);
  }

  // The abortive end: a timeout, a failed send, or the end of the stop's grace. The close sends an RST.
  void reset_conn(Conn& c) {
    reset_connection(c.fd.get());
    close_conn(c);
  }
  void reset_all() {
    for (auto& entry : conns_) reset_connection(entry.first);
    conns_.clear();  // each Fd closes its socket
  }

  // The one way a connection ends: select() stops watching it, and the table drops it (its Fd closes the socket).
  void close_conn(Conn& c) {
    FD_CLR(c.fd.get(), &want_read_);
    FD_CLR(c.fd.get(), &want_write_);
    conns_.erase(c.fd.get());
  }

  const Options& opts_;
  Fd listener_;
  std::unordered_map<int, Conn> conns_;  // fd -> connection: the one owner of every connection's state
  fd_set want_read_, want_write_;        // what each fd waits for; select() gets copies, as it overwrites them
  int max_fd_ = -1;
  TimerQueue<Timer> timers_;              // handler timers and idle checks, in one heap
  std::uint64_t generations_ = 0;
  bool stopping_ = false;
  Clock::time_point stop_deadline_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options opts = options_or_exit(
      argc, argv, {"03-select", 0, "one thread runs one select() loop for every connection (chapter 05 runs several)"});
  start_process();
  std::vector<Fd> listener = listen_sockets(opts);  // non-blocking, and a low fd number, like the stop fd
  Loop(opts, std::move(listener[0])).run();
  return 0;
}
