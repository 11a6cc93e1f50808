// 05-epoll: event loops on epoll, one per thread, each with its own SO_REUSEPORT listener.
//
// Chapter 03's loop, with select() replaced by epoll: the kernel keeps the set of watched fds between calls (we
// change it only when a connection's state changes) and returns only the fds that are ready, so a turn costs
// O(ready), not O(connections), and there is no FD_SETSIZE. One loop is still one thread, so --threads N runs N
// loops that share nothing but the stop flag; the kernel spreads new connections across their listeners. What is
// left to limit it: readiness means a system call to learn that I/O may proceed and another to do it (chapter 06,
// io_uring, submits the I/O itself), and anything that blocks a loop stalls all its clients (--handler sleep shows it).
//
// Needs:  Linux 5.11+ (epoll_pwait2), glibc 2.35+, g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server            (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <netinet/tcp.h>
#include <sys/epoll.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../common/closing.hpp"
#include "../common/exchange.hpp"
#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/response.hpp"
#include "../common/timers.hpp"
#include "../common/workers.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// At most this many new connections per turn: enough to empty a busy listen queue, few enough that a flood of
// connects cannot starve the connections already open. Readiness is level-triggered, so the rest wait one turn.
constexpr int kAcceptBatch = 64;
constexpr int kMaxEvents = 256;  // ready fds taken per epoll_pwait2(); more stay reported for the next turn

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
//   READING: wants input. Between requests it owns no Exchange (common/exchange.hpp): the bytes of a request make
//   one, and it goes once the response is sent and nothing more has come: an idle connection is a 40-byte Conn.
//   The request deadline (--idle-timeout) counts from when it began waiting (accept, or the
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

// [excerpt:conn]
struct Conn {
  Fd fd;                          // closed when close_conn() drops the connection from the table
  State state = State::kReading;
  std::uint32_t events = 0;       // what epoll watches this fd for now, so watch() calls epoll_ctl() only on change
  std::uint64_t generation = 0;   // tells it apart from earlier connections that had the same fd number
  Clock::time_point idle_since;   // READING: since the request wait began; WRITING: the last write progress
  std::unique_ptr<Exchange> x;    // from a request's first byte to its response's last (and LINGERING): `in`,
                                  // the parser, the request, the response; none while idle between requests
};
// What an idle connection costs us, besides its table entry and its timer: the kernel's socket costs several KiB.
static_assert(sizeof(Conn) <= 40, "an idle connection's state is a few words; a request's lives in its Exchange");
// [/excerpt:conn]
// [/excerpt:connection]

// Timers are never cancelled (see timers.hpp). Each names its connection by fd AND generation; when it fires for a
// connection that has closed (its fd number perhaps reused since) or moved on, it is ignored.
struct Timer {
  enum Kind { kHandler, kIdle, kLinger, kResumeAccept } kind;
  int fd;
  std::uint64_t generation;
};

class Loop {
 public:
  Loop(const Options& opts, Fd listener, Fd epoll)
      : opts_(opts), listener_(std::move(listener)), epoll_(std::move(epoll)) {
    if (!control(EPOLL_CTL_ADD, listener_.get(), EPOLLIN) ||
        !control(EPOLL_CTL_ADD, stop_fd(), EPOLLIN))  // becomes readable on SIGINT/SIGTERM, and so wakes every loop
      fail_startup("cannot add the listener to an epoll instance");
  }

  // [excerpt:loop]
  // Runs until a stop has been requested and the responses in flight are written (or kStopGrace has passed).
  void run() {
    for (;;) {
      Clock::time_point now = Clock::now();
      while (std::optional<Timer> t = timers_.pop_due(now)) on_timer(*t, now);
      if (stop_requested() && !stopping_) begin_stop(now);
      if (stopping_ && (conns_.empty() || now >= stop_deadline_)) return reset_all();  // the grace is over

      // The watched set lives in the kernel; only the timeout is ours, in nanoseconds. (epoll_wait() counts whole
      // milliseconds: rounded up, a 1 ms handler could take 2 ms; rounded down, the loop would spin until due.)
      epoll_event events[kMaxEvents];
      std::optional<std::chrono::nanoseconds> wait = timers_.time_to_next(Clock::now());
      timespec timeout = to_timespec(wait.value_or(std::chrono::nanoseconds(0)));
      int ready = ::epoll_pwait2(epoll_.get(), events, kMaxEvents, wait ? &timeout : nullptr, nullptr);
      if (ready < 0) continue;  // EINTR: a signal arrived; the next turn looks at the stop flag

      // O(ready): epoll hands back only the fds that are ready, with the fd we stored in each.
      bool listener_ready = false;
      for (int i = 0; i < ready; ++i) {
        if (events[i].data.fd == listener_.get()) listener_ready = true;
        auto it = conns_.find(events[i].data.fd);
        if (it == conns_.end()) continue;  // the listener, the stop fd, or a connection closed earlier this turn
        Conn& c = it->second;
        // ERR and HUP are reported even when not asked for, e.g. in WAITING: the peer is gone, nothing to answer.
        // (LINGERING reads first: a HUP after the client's FIN may come with bytes that must be read, not reset.)
        if (c.state == State::kLingering && (events[i].events & (EPOLLIN | EPOLLHUP))) on_readable(c);
        else if (events[i].events & (EPOLLERR | EPOLLHUP)) close_conn(c);
        else if (events[i].events & EPOLLIN) on_readable(c);
        else if (events[i].events & EPOLLOUT) advance(c);
      }
      // Accept last: a new connection may get the fd number of one closed above, and must not inherit its event.
      if (listener_ready) accept_clients();
    }
  }
  // [/excerpt:loop]

 private:
  // [excerpt:accept]
  void accept_clients() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      Fd client = accept_client(listener_.get(), Blocking::kNo);
      if (!client.valid()) {  // the queue is empty (EAGAIN), or the connection was lost or shed (EMFILE)
        if (errno == EMFILE || errno == ENFILE) pause_accepting();  // stuck: see accept_client() in net.hpp
        return;
      }
      int fd = client.get();
      Conn& c = conns_[fd];
      c.fd = std::move(client);
      c.generation = ++generations_;
      c.idle_since = Clock::now();
      timers_.add(c.idle_since + opts_.idle_timeout, Timer{Timer::kIdle, fd, c.generation});
      timers_.prune_over(2 * conns_.size() + 64, [this](const Timer& t) { return is_stale(t); });  // see timers.hpp
      if (!control(EPOLL_CTL_ADD, fd, EPOLLIN)) close_conn(c);  // out of kernel memory for watches: drop only this one
      else c.events = EPOLLIN;
    }
  }
  // [/excerpt:accept]

  void on_readable(Conn& c) {
    if (c.state == State::kLingering) {  // throw the bytes away; the client's FIN (or the deadline) ends it
      if (!discard_input(c.fd.get(), c.x->lingering)) close_conn(c);
      return;
    }
    if (!c.x) c.x = std::make_unique<Exchange>(opts_.max_body);  // a request begins (or more of one arrives)
    long n = recv_into(c.fd.get(), c.x->in);
    if (n == 0 || n == -1) return close_conn(c);  // EOF (the peer closed or half-closed) or an error such as a reset
    advance(c);  // -2, nothing to read after all: advance() finds no request. (No new idle_since: the request
                 // deadline holds however often bytes come.)
  }

  void start_writing(Conn& c, Outgoing response) {
    c.x->out = std::move(response);
    c.state = State::kWriting;
  }

  // [excerpt:advance]
  // Runs the connection's protocol as far as it goes without waiting, then records what it waits for next.
  void advance(Conn& c) {
    for (;;) {
      if (c.state == State::kWriting) {
        SendProgress progress = send_some(c.fd.get(), c.x->out);
        if (progress == SendProgress::kFailed) return reset_conn(c);  // the peer reset or vanished, or the file shrank
        c.idle_since = Clock::now();  // progress, or the response is done and the wait for the next request begins
        if (progress == SendProgress::kBlocked) break;  // the send buffer is full: wait until it is writable
        if (!c.x->out.keep_alive) return start_lingering(c);  // the graceful end (a stop's responses say close)
        c.state = State::kReading;  // and look at once for a pipelined request already in `in`
      }
      if (c.state != State::kReading) break;  // WAITING: the handler's timer moves it on
      http::Parse p = c.x->reader.next(c.x->in);  // takes the request (head and body) out of `in` as it reads it
      if (p.status == http::Parse::kIncomplete) break;  // read more, only now that we need more
      if (p.status != http::Parse::kComplete) {
        // An error, with Connection: close (nothing can follow a framing error); or "100 Continue" for a client that
        // waits for it before sending its body, and then back to READING.
        start_writing(c, p.status == http::Parse::kError ? refuse(opts_, p) : interim_continue());
        continue;
      }
      if (handler_needs_timer(opts_)) {
        c.x->request = p.request;
        c.state = State::kWaiting;
        timers_.add(Clock::now() + opts_.delay, Timer{Timer::kHandler, c.fd.get(), c.generation});
        break;
      }
      run_handler_here(opts_);  // --handler sleep|spin (or --delay-us 0): every other client waits meanwhile
      start_writing(c, respond(opts_, p.request));
    }
    // Stopping, and reading (its response said keep-alive before the stop): closed, as in begin_stop().
    if (stopping_ && c.state == State::kReading) return close_conn(c);
    // Between requests: the request's state goes back to the allocator (destroyed, not assigned: exchange.hpp).
    if (c.state == State::kReading && c.x->between_requests()) c.x.reset();
    watch(c);
  }
  // [/excerpt:advance]

  // [excerpt:watch]
  // What epoll should watch this connection for, from its state: READING input, WRITING output (only while
  // there are unsent bytes: a socket is writable nearly always), WAITING nothing, LINGERING input.
  //
  // Level-triggered (no EPOLLET): like select(), epoll reports an fd for as long as it is ready. So a handler may
  // do one recv() and return, and what is left is reported next turn: no connection starves the others, and no
  // missed edge can hang one. The price is this epoll_ctl() on every change of state, two per request. With
  // EPOLLET the interest could stay fixed, but every handler must read and write until EAGAIN: that is a lab.
  void watch(Conn& c) {
    std::uint32_t want = 0;
    if (c.state == State::kReading || c.state == State::kLingering) want = EPOLLIN;
    if (c.state == State::kWriting) want = EPOLLOUT;
    if (want == c.events) return;  // unchanged: spare the system call
    if (!control(EPOLL_CTL_MOD, c.fd.get(), want)) return close_conn(c);
    c.events = want;
  }
  // [/excerpt:watch]

  // Out of descriptors with a connection we can neither accept nor shed: the listener stays readable, so a
  // level-triggered loop would spin on it. Stop watching it for kAcceptPause; a timer turns it back on.
  void pause_accepting() {
    control(EPOLL_CTL_MOD, listener_.get(), 0);  // no events: the listener stays in the set, but quiet
    timers_.add(Clock::now() + kAcceptPause, Timer{Timer::kResumeAccept, -1, 0});
  }

  // Adds fd to this loop's epoll set, changes what it is watched for, or takes it out (op: EPOLL_CTL_ADD/MOD/DEL).
  bool control(int op, int fd, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    return ::epoll_ctl(epoll_.get(), op, fd, &ev) == 0;
  }

  // [excerpt:timers]
  void on_timer(const Timer& t, Clock::time_point now) {
    if (t.kind == Timer::kResumeAccept) {
      if (listener_.valid()) control(EPOLL_CTL_MOD, listener_.get(), EPOLLIN);
      return;
    }
    if (t.fd < 0 || is_stale(t)) return;  // the stop's wake-up, or a timer whose connection is gone
    Conn& c = conns_.at(t.fd);
    if (t.kind == Timer::kHandler) {
      if (c.state != State::kWaiting) return;
      start_writing(c, respond(opts_, c.x->request));
      return advance(c);
    }
    // LINGERING has a deadline of its own, which the bytes that come in push back: its timer looks at it again,
    // and the idle timer retires. Past it, a plain close: the response has had its time.
    if (c.state == State::kLingering) {
      if (t.kind != Timer::kLinger) return;
      if (c.x->lingering.deadline() <= now) return close_conn(c);
      return timers_.add(c.x->lingering.deadline(), t);
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
    control(EPOLL_CTL_DEL, stop_fd(), 0);  // it stays readable: it would wake us every turn
    listener_.reset();  // closing an fd also takes it out of the epoll set
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
    c.x->lingering = Lingering(Clock::now());
    timers_.add(c.x->lingering.deadline(), Timer{Timer::kLinger, c.fd.get(), c.generation});
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

  // The one way a connection ends: the table drops it, its Fd closes the socket, and closing takes it out of the
  // epoll set (nothing dup()s our sockets, so that close is the last reference). A lost spare takes its number.
  void close_conn(Conn& c) { conns_.erase(c.fd.get()); restore_spare(); }

  const Options& opts_;
  Fd listener_;
  Fd epoll_;                             // this loop's epoll instance: the kernel keeps what each fd waits for
  std::unordered_map<int, Conn> conns_;  // fd -> connection: the one owner of every connection's state
  TimerQueue<Timer> timers_;              // handler timers and idle checks, in one heap
  std::uint64_t generations_ = 0;
  bool stopping_ = false;
  Clock::time_point stop_deadline_;
};

}  // namespace

int main(int argc, char** argv) {
  const Model model{"05-epoll", default_thread_count(), "", {kProcessesFlag}};
  const Options opts = options_or_exit(argc, argv, model);
  start_workers(opts, model, opts.threads);  // --processes P: from here on, in each of P workers (workers.hpp)
  start_process();
  // Every loop's epoll instance exists before listen_sockets() prints "listening on", so the server is whole when
  // scripts see that line. epoll_pwait2() is Linux 5.11+, and a container's seccomp profile may refuse it: try it now.
  std::vector<Fd> epolls;
  for (int i = 0; i < opts.threads; ++i) {
    epolls.emplace_back(::epoll_create1(EPOLL_CLOEXEC));
    if (!epolls.back().valid()) fail_startup(std::string("cannot create an epoll instance: ") + std::strerror(errno));
  }
  epoll_event probe{};
  timespec zero{};
  if (::epoll_pwait2(epolls[0].get(), &probe, 1, &zero, nullptr) < 0)
    fail_startup(std::string("epoll_pwait2() is not available here (it needs Linux 5.11+): ") + std::strerror(errno));

  // [excerpt:threads]
  // One loop per thread, each with its own listener (SO_REUSEPORT when there are several: the kernel spreads new
  // connections across them) and its own epoll, connections and timers. Only the stop flag is shared.
  std::vector<Fd> listeners = worker_listen_sockets(opts, opts.threads);
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < opts.threads; ++i)
    loops.push_back(std::make_unique<Loop>(opts, std::move(listeners[i]), std::move(epolls[i])));
  std::vector<std::thread> threads;
  for (auto& loop : loops) threads.emplace_back(&Loop::run, loop.get());
  for (std::thread& t : threads) t.join();  // each loop returns once a stop has been requested and it has drained
  // [/excerpt:threads]
  return 0;
}
