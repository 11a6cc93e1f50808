// 06-io_uring: completion-based event loops on io_uring (liburing), one ring and one listener per thread.
//
// Chapter 05 asked the kernel "which sockets are ready?" and then made every call itself. Here the loop hands the
// kernel the calls themselves (accept, recv, send, poll, a timer) as submission queue entries (SQEs) and later
// reaps one completion queue entry (CQE) per call, carrying its result. One io_uring_submit_and_wait_timeout() per
// loop turn submits everything the last turn queued and sleeps until something completes or the earliest deadline
// is due: one system call per batch, not per call. This is the plain version. advanced.cpp, next to it, is this
// program plus SQPOLL, DEFER_TASKRUN, multishot accept and recv, registered descriptors, splice and zero-copy send,
// each behind a flag: `diff main.cpp advanced.cpp` shows just those.
//
// Needs:  Linux 5.19 or later with io_uring allowed (no seccomp block, kernel.io_uring_disabled = 0), liburing
//         (Debian: liburing-dev), g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp -luring
// Run:    ./run_server            (one loop per core; --root DIR serves files; --help lists the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <liburing.h>
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
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
#include "../common/uring.hpp"
#include "../common/workers.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kRingEntries = 1024;  // SQ slots: Ring::get_sqe() submits when they are all taken
// CQ slots: a connection has one operation in flight (two while it is cancelled), so 8192 (128 KiB) hold a turn of
// 4,000 connections, where the default (twice the SQ) holds 1,000. Past that: an overflow list (see get_sqe).
constexpr unsigned kCqEntries = 8 * kRingEntries;
// The loop's provided buffers, which every recv reads into (see arm_recv): one is taken per recv that completes in a
// turn, and each is given back before the turn's submit, so 256 cover a turn of 256 connections that sent something.
// Past that, a recv fails with -ENOBUFS and is simply armed again. 256 KiB per loop, whatever the connections.
constexpr unsigned kBufferCount = 256;  // a power of two, as a buffer ring requires
constexpr std::size_t kBufferSize = 1024;
constexpr int kBufferGroup = 0;
constexpr std::chrono::milliseconds kAcceptBackoff{10};  // pause after a failed accept (see arm_listen_wait)

// [excerpt:user-data]
// Every SQE carries 64 bits of user_data that come back, unchanged, in its CQE. We pack into them what the loop
// needs to route the completion, rather than a pointer to an object that may be gone by the time it comes back:
//
//    63      56 55                  32 31                                0
//   +----------+----------------------+-----------------------------------+
//   | Op (8)   | generation (24)      | connection slot index (32)        |
//   +----------+----------------------+-----------------------------------+
//
// Ops that belong to no connection (accept, stop, ...) leave the two low fields 0. A slot's generation goes up each
// time the slot is reused, so a completion naming an older generation is for a connection that is gone.
enum class Op : std::uint8_t {
  kNone, kAccept, kBackoff, kListenReady, kStop, kGrace, kCancel,  // the loop's and the listener's
  kRecv, kTimer, kSend, kWritable,                                 // a connection's
};

constexpr std::uint32_t kGenerationMask = 0xFFFFFF;

constexpr std::uint64_t encode(Op op, std::uint32_t generation = 0, std::uint32_t slot = 0) {
  return std::uint64_t(op) << 56 | std::uint64_t(generation & kGenerationMask) << 32 | slot;
}

struct Tag { Op op; std::uint32_t generation; std::uint32_t slot; };

constexpr Tag decode(std::uint64_t data) {
  return {static_cast<Op>(data >> 56), static_cast<std::uint32_t>(data >> 32) & kGenerationMask,
          static_cast<std::uint32_t>(data)};
}
// [/excerpt:user-data]

// [excerpt:connection]
// One connection's life. Each state has one operation in flight, whose completion moves it on; the deadlines are
// not operations but entries in the loop's heap (see on_deadline), which cancel that operation when they pass:
//
//      accept
//        |
//        v
//     READING   recv -------------- EOF, error, a stop --------------------------------------------+
//        |  \______________________ the request deadline passed: cancel the recv --------- reset --+
//        | bytes arrived                                                                           |
//        v                                                                                         |
//   +--> parse the buffer --- incomplete ---> READING                                              |
//   |    |       |                                                                                 |
//   |    |       +--- malformed ---> SENDING refuse(4xx), then LINGERING                           |
//   |    | a whole request                                                                         |
//   |    v                                                                                         |
//   |  WAITING   IORING_OP_TIMEOUT: the simulated handler (--delay-us)                             |
//   |    | -ETIME: it fired; out = respond(request)                                                |
//   |    v                                                                                         |
//   |  SENDING   the head, then the file (see send_more) --- error; stalled too long ----- reset --+
//   |    | all sent, keep-alive:      | all sent, not keep-alive (or a stop):                      |
//   +----+ a new request deadline     v shutdown(SHUT_WR)                                          |
//                                  LINGERING   recv, the bytes thrown away (see linger)            |
//                                     +------- EOF, error, its deadline, kLingerMaxBytes ----------+
//                                                                                                  v
//                                                          once in_flight == 0: ::close(fd) <-- CLOSING
//                         (a reset sets SO_LINGER {1, 0} first), slot freed, generation + 1
//
// A stop: READING connections close at once, the others go on, and what is still open after kStopGrace is reset
// (cancel_and_close). A reset makes the close send an RST, not a FIN: the ways to end are in common/closing.hpp.
//
// Ownership: the Loop owns every Conn, one unique_ptr per slot, and a Conn owns its Exchange (common/exchange.hpp):
// the request and response state, which exists only while a request is in progress. From the moment an SQE of the
// connection is queued until its CQE is reaped, the kernel uses its descriptor and, for a send, reads `x->out.head`;
// in_flight counts those SQEs (+1 queued, -1 reaped). A recv points at none of the connection's memory: it reads
// into a buffer of the loop's ring (see arm_recv). The Exchange is destroyed only in READING, when no send is in
// flight, or by release(); a connection's fd is closed and its slot reused only once it is CLOSING and in_flight
// is 0. So a completion never finds its buffer freed or its slot reused; the generation check in dispatch() is a
// second line of defence.
//
// We close with a plain ::close(fd), not IORING_OP_CLOSE: by then nothing of the connection is in flight, closing a
// socket does not block, and IORING_OP_CLOSE would add one more completion to wait for before the slot is reused.
enum class State { kFree, kReading, kWaiting, kSending, kLingering, kClosing };

// How close_conn() ends a connection: a plain close (FIN), or a reset (RST) for one that timed out, whose send
// failed, or that outlived the stop's grace (common/closing.hpp).
enum class End { kClose, kReset };

struct Conn {
  std::uint32_t slot = 0;        // index in Loop::conns_, fixed for the Conn's whole life
  std::uint32_t generation = 0;  // bumped when the slot is freed
  int fd = -1;
  State state = State::kFree;
  Op op = Op::kNone;     // the operation whose CQE moves the state on: the one a stop or a deadline cancels
  bool reset = false;    // CLOSING: the close sends an RST (End::kReset)
  int in_flight = 0;     // SQEs queued for this connection whose CQE has not been reaped yet
  Clock::time_point since;  // READING: when the wait for this request began; SENDING: the last progress
  // From the first byte of a request to the end of its response, or of the connection: the bytes received, the
  // parser, the request, the response, the lingering close. None while the connection waits between requests.
  std::unique_ptr<Exchange> x;
};
// What an idle connection costs in user memory, besides its entry in the deadline heap: no buffer, no parser.
static_assert(sizeof(Conn) <= 40, "an idle connection keeps only its Conn: keep it small");
// [/excerpt:connection]

// An entry of the deadline heap (see on_deadline): kIdle, one per connection from its accept on; kLinger, one more
// from when it starts LINGERING. It names its connection by slot and generation, as user_data does.
struct Timer { enum Kind { kIdle, kLinger } kind; std::uint32_t slot; std::uint32_t generation; };

// One event loop: a ring, a listener, and the connections it accepted. Used by one thread only.
class Loop {
 public:
  // Creating the ring is also the probe: the first Loop fails with one sentence if io_uring cannot be used.
  // COOP_TASKRUN (5.19): the client's bytes arrive on another CPU, and the recv waiting for them is finished in this
  // thread ("task work"). By default the kernel interrupts the thread for it at once, with an inter-processor
  // interrupt; with the flag the work waits until the thread next enters the kernel, as the loop does every turn.
  // Under keep-alive load on a 2-vCPU VM, that saved a fifth of the loop's CPU per request (docs/io_uring-advanced.md,
  // "Each flag, measured").
  explicit Loop(const Options& opts)
      : opts_(opts), delay_(to_kernel_timespec(opts.delay)), grace_(to_kernel_timespec(kStopGrace)),
        backoff_(to_kernel_timespec(kAcceptBackoff)) {
    io_uring_params params;
    auto create = [&](unsigned flags) {
      params = io_uring_params{};
      params.flags = IORING_SETUP_CQSIZE | flags;
      params.cq_entries = kCqEntries;
      return io_uring_queue_init_params(kRingEntries, &ring_.ring, &params);
    };
    int r = create(IORING_SETUP_COOP_TASKRUN);
    if (r == -EINVAL) fail_startup("io_uring is unavailable: this kernel is older than 5.19 (it refused COOP_TASKRUN)");
    if (r < 0) fail_startup(unavailable(-r));
    // FAST_POLL (5.7): without it every recv would park a kernel worker thread instead of waiting on the socket.
    // EXT_ARG (5.11): the wait with a timeout in run(), for which liburing would otherwise queue an SQE each time.
    if (!(params.features & IORING_FEAT_FAST_POLL) || !(params.features & IORING_FEAT_EXT_ARG))
      fail_startup("io_uring is unavailable: this kernel is older than 5.11 (no IORING_FEAT_FAST_POLL or EXT_ARG)");
    unsigned buffer_count = kBufferCount;  // (advanced.cpp's --multishot-recv takes more)
    if (int e = buffers_.set_up(ring_.ring, buffer_count, kBufferSize, kBufferGroup); e < 0)
      fail_startup("io_uring is unavailable: no ring of provided buffers (" + std::string(std::strerror(-e)) + ")");
  }
  ~Loop() { io_uring_queue_exit(&ring_.ring); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // [excerpt:loop-turn]
  void run(Fd listener) {
    listener_ = std::move(listener);
    arm_accept();
    // The stop eventfd stays readable once a stop is requested, so a poll armed after the signal still fires.
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_poll_add(sqe, stop_fd(), POLLIN);
    tag(sqe, Op::kStop);

    for (;;) {
      Clock::time_point now = Clock::now();
      while (std::optional<Timer> t = timers_.pop_due(now)) on_deadline(*t, now);
      if (stopping_ && listen_op_ == Op::kNone && live_ == 0) break;
      // Submit, then sleep until a CQE comes or the earliest deadline is due (EXT_ARG: like epoll_pwait2's timeout
      // in 05). -ETIME (the timeout) and -EINTR (a signal) are fine.
      std::optional<std::chrono::nanoseconds> wait = timers_.time_to_next(now);
      __kernel_timespec timeout = to_kernel_timespec(wait.value_or(std::chrono::nanoseconds(0)));
      io_uring_cqe* first;  // unused: reap() takes them all
      io_uring_submit_and_wait_timeout(&ring_.ring, &first, 1, wait ? &timeout : nullptr, nullptr);
      ring_.reap();
      for (std::size_t i = 0; i < ring_.batch.size(); ++i) {  // (get_sqe may reap more in the turn: they come last)
        const Completion done = ring_.batch[i];               // a copy: the vector may grow under the handler
        dispatch(done);
      }
      ring_.batch.clear();
    }
    // Left in the ring: the grace timer and some cancel results, which point at nothing of ours. ~Loop() ends them.
  }

 private:
  void dispatch(const Completion& done) {
    Tag t = decode(done.user_data);
    int res = done.res;
    switch (t.op) {
      case Op::kAccept: return on_accept(res);
      case Op::kBackoff:      // the pause after a failed accept is over (or the stop cancelled it)
      case Op::kListenReady:  // the listener has a pending connection (or the stop cancelled the poll)
        listen_op_ = Op::kNone;
        if (stopping_) return listener_.reset();
        return t.op == Op::kBackoff ? arm_listen_wait(Op::kListenReady) : arm_accept();
      case Op::kStop: return on_stop();
      case Op::kGrace:  // kStopGrace is over: whatever is still waiting, sending or lingering is reset now
        for (auto& c : conns_)
          if (c->state != State::kFree && c->state != State::kClosing) cancel_and_close(*c, End::kReset);
        return;
      case Op::kCancel: return;  // 0, -ENOENT or -EALREADY: the target's own CQE is what counts
      default: break;
    }
    if (done.flags & IORING_CQE_F_BUFFER) take_buffer(t, res, done.flags);  // first: even a stale CQE's goes back
    if (t.slot >= conns_.size() || conns_[t.slot]->generation != t.generation) return;  // stale: see user_data
    Conn& c = *conns_[t.slot];
    --c.in_flight;
    if (c.state == State::kClosing) {  // a stop or a deadline cancelled the op (-ECANCELED), or it ended first
      if (c.in_flight == 0) release(c);
      return;
    }
    switch (t.op) {
      case Op::kRecv:
        // -EAGAIN: not ready after all (see on_sent). -ENOBUFS: this turn's recvs took every buffer of the ring;
        // they are all back by the next submit. Either way, the same recv again.
        if (res == -EAGAIN || res == -ENOBUFS) return arm_recv(c);
        if (c.state == State::kLingering) return discard(c, res);
        if (res <= 0) return close_conn(c);  // 0: EOF; <0: the client reset the connection, ...
        return process(c);  // the bytes are in the Exchange (take_buffer)
      case Op::kTimer:  // -ETIME is the normal end of a timeout; -ECANCELED means the stop grace ran out
        return res == -ETIME ? answer(c) : close_conn(c);
      default: return on_sent(c, t.op, res);
    }
  }
  // [/excerpt:loop-turn]

  // [excerpt:take-buffer]
  // A CQE with IORING_CQE_F_BUFFER: a recv filled one of the ring's buffers. The bytes go to the connection's
  // Exchange, made for them if the connection was idle; a LINGERING connection throws them away, and so does one
  // that is gone or CLOSING. Then the buffer goes back to the ring, whatever the CQE (see BufferRing::give_back).
  void take_buffer(const Tag& t, int res, unsigned flags) {
    unsigned id = BufferRing::id(flags);
    Conn* c = t.slot < conns_.size() && conns_[t.slot]->generation == t.generation ? conns_[t.slot].get() : nullptr;
    if (res > 0 && c && c->state != State::kLingering && c->state != State::kClosing) {
      if (!c->x) c->x = std::make_unique<Exchange>(opts_.max_body);
      c->x->in.append(buffers_.data(id), static_cast<std::size_t>(res));
    }
    buffers_.give_back(id);
  }
  // [/excerpt:take-buffer]

  // Sets the SQE's user_data and, for a connection's SQE, counts it in flight until its CQE is reaped.
  void tag(io_uring_sqe* sqe, Op op, Conn* c = nullptr) {
    io_uring_sqe_set_data64(sqe, c ? encode(op, c->generation, c->slot) : encode(op));
    if (!c) return;
    ++c->in_flight;
    c->op = op;
  }

  // [excerpt:deadlines]
  // The deadlines are kept in user space, as in 05: one heap per loop, whose earliest entry is the timeout of the
  // loop's wait (run). That timeout takes no SQE and brings no CQE, and an earlier deadline needs nothing moved, as
  // one IORING_OP_TIMEOUT for the earliest would (IORING_TIMEOUT_UPDATE). An IORING_OP_LINK_TIMEOUT on every recv
  // and send would arm and cancel a kernel timer, and bring a second CQE, per operation: a visible share of the
  // loop's CPU under keep-alive load, in perf (docs/io_uring-advanced.md, "Deadlines: in the kernel or in a heap").
  // One kIdle entry per connection, never later than its deadline: a request or a send that moves the deadline only
  // stores `since`, and the entry, when due, looks at the real deadline: before it, it waits again until then; past
  // it, it cancels the connection's one operation (IORING_OP_ASYNC_CANCEL) and resets the connection. READING's
  // deadline counts from when the wait for the request began, however often bytes come, so a client that dribbles
  // its head a byte at a time (slowloris) is reset --idle-timeout after. SENDING's counts from the last progress,
  // WAITING has none, and LINGERING's is Lingering::deadline(), usually sooner: linger() adds a kLinger entry for it.
  void on_deadline(const Timer& t, Clock::time_point now) {
    Conn& c = *conns_[t.slot];
    if (c.generation != t.generation || c.state == State::kClosing) return;  // its connection is gone or ending
    if (c.state == State::kLingering) {
      if (t.kind != Timer::kLinger) return;  // the kIdle entry retires
      if (c.x->lingering.deadline() <= now) return cancel_and_close(c);  // a plain close: the response had its time
      return timers_.add(c.x->lingering.deadline(), t);                   // input came and moved it
    }
    Clock::time_point deadline = (c.state == State::kWaiting ? now : c.since) + opts_.idle_timeout;
    if (deadline <= now) return cancel_and_close(c, End::kReset);
    timers_.add(deadline, t);
  }
  // [/excerpt:deadlines]

  // [excerpt:accept]
  // Accepted sockets are non-blocking for sendfile()'s sake (see send_more): io_uring's recv, send and poll wait for
  // readiness themselves whatever the flag, all but always (see on_sent). So is the listener: recent kernels ignore
  // that for IORING_OP_ACCEPT and wait (checked on 6.18); some 5.x kernels completed it with -EAGAIN at once, which
  // takes the error path: no spin.
  void arm_accept() {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_accept(sqe, listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    tag(sqe, Op::kAccept);
    listen_op_ = Op::kAccept;
  }

  // After a failed accept the listener waits twice before the next one:
  //
  //   ACCEPT --error--> (EMFILE: shed_pending_connection) --> BACKOFF: 10 ms timeout --> READY: poll --> ACCEPT
  //
  // READY waits for a pending client: at the descriptor limit the kernel fails an accept at once, before it looks
  // for a client, so re-arming the accept straight away would spin. BACKOFF covers a client we can neither take nor
  // shed: the shed frees its spare descriptor for a moment, another loop's accept can take it, and the spare is lost
  // (seen with 2 loops and 64 descriptors); READY would then fire at once, forever.
  void arm_listen_wait(Op op) {
    io_uring_sqe* sqe = ring_.get_sqe();
    if (op == Op::kBackoff)
      io_uring_prep_timeout(sqe, &backoff_, 0, 0);
    else
      io_uring_prep_poll_add(sqe, listener_.get(), POLLIN);
    tag(sqe, op);
    listen_op_ = op;
  }

  void on_accept(int res) {
    listen_op_ = Op::kNone;
    if (res >= 0 && stopping_) close_socket(res);  // it slipped in before the cancel: we no longer take connections
    if (res >= 0 && !stopping_) open_conn(res);
    if (res == -EMFILE || res == -ENFILE) shed_pending_connection(listener_.get());  // common/net.hpp's policy
    if (stopping_) return listener_.reset();  // nothing references the listener any more: close it
    if (res >= 0) return arm_accept();
    arm_listen_wait(Op::kBackoff);  // any error (EMFILE, ECONNABORTED, ...): try again, never exit
  }
  // [/excerpt:accept]

  // [excerpt:stop]
  // Stop: no more accepts, idle (READING) connections close now, WAITING and SENDING ones finish their response and
  // linger, LINGERING ones go on, and after kStopGrace whatever is left is reset. run() returns once all are closed.
  void on_stop() {
    stopping_ = true;
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_cancel64(sqe, encode(listen_op_), 0);  // its CQE (-ECANCELED) then closes the listener
    tag(sqe, Op::kCancel);
    for (auto& c : conns_)
      if (c->state == State::kReading) cancel_and_close(*c);
    sqe = ring_.get_sqe();
    io_uring_prep_timeout(sqe, &grace_, 0, 0);
    tag(sqe, Op::kGrace);
  }

  // Cancels the connection's one operation; its CQE then finds it CLOSING and releases it.
  void cancel_and_close(Conn& c, End end = End::kClose) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_cancel64(sqe, encode(c.op, c.generation, c.slot), 0);
    tag(sqe, Op::kCancel);
    close_conn(c, end);
  }
  // [/excerpt:stop]

  void open_conn(int fd) {
    if (free_.empty()) {
      conns_.push_back(std::make_unique<Conn>());
      conns_.back()->slot = static_cast<std::uint32_t>(conns_.size() - 1);
      free_.push_back(conns_.back()->slot);
    }
    Conn& c = *conns_[free_.back()];
    free_.pop_back();
    c.fd = fd;
    c.since = Clock::now();  // the first request must be complete --idle-timeout from now
    ++live_;
    timers_.add(c.since + opts_.idle_timeout, Timer{Timer::kIdle, c.slot, c.generation});
    // Closed connections leave their entries behind until they come due; drop them once they outnumber the rest.
    timers_.prune_over(2 * live_ + 64, [this](const Timer& t) { return conns_[t.slot]->generation != t.generation; });
    arm_recv(c);
  }

  // [excerpt:protocol]
  // The connection protocol: answer what is buffered; read more only when it holds no whole request. Between
  // requests, with no byte of the next one here, the Exchange goes: an idle connection keeps nothing but its Conn.
  void process(Conn& c) {
    Exchange& x = *c.x;
    http::Parse p = x.reader.next(x.in);  // takes the request (head and body) out of `in` as it reads it
    if (p.status == http::Parse::kIncomplete) {
      // Destroy it, never assign a fresh one: libstdc++ would keep the old strings' buffers (common/exchange.hpp).
      if (x.between_requests()) c.x.reset();
      return stopping_ ? close_conn(c) : arm_recv(c);
    }
    if (p.status != http::Parse::kComplete) {  // an error, or "100 Continue" (then back to reading the body)
      x.out = p.status == http::Parse::kError ? refuse(opts_, p) : interim_continue();
      return send_more(c);
    }
    x.request = std::move(p.request);
    if (handler_needs_timer(opts_)) {
      c.state = State::kWaiting;
      io_uring_sqe* sqe = ring_.get_sqe();
      io_uring_prep_timeout(sqe, &delay_, 0, 0);  // relative, fires once
      tag(sqe, Op::kTimer, &c);
      return;
    }
    run_handler_here(opts_);  // --handler sleep or spin (or --delay-us 0): the whole loop waits, on purpose
    answer(c);
  }

  // A recv with no buffer of its own (IOSQE_BUFFER_SELECT, length 0): when bytes come, the kernel takes a buffer of
  // the loop's ring (take_buffer), so while it waits it holds no memory of ours. No timeout of its own either: the
  // deadline is the heap's (on_deadline). READING leaves `since` alone, so the deadline stays where the wait for the
  // request began.
  void arm_recv(Conn& c) {
    if (c.state != State::kLingering) c.state = State::kReading;
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_recv(sqe, c.fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    tag(sqe, Op::kRecv, &c);
  }

  // The handler is done: build the response and send it. A marked shortcut: with --root, respond() opens the file
  // with a synchronous openat2() in the loop thread (quick from the dentry cache, but a cold disk stalls every
  // connection of this loop); IORING_OP_OPENAT2 and IORING_OP_STATX would make that asynchronous too.
  void answer(Conn& c) {
    c.x->out = respond(opts_, c.x->request);
    send_more(c);
  }
  // [/excerpt:protocol]

  // [excerpt:send-file]
  // SENDING: the head from memory through the ring, then the file with sendfile(), called from the loop itself:
  //
  //     send head ---- short send: send the rest
  //       | all sent
  //       v
  //   +-> sendfile() from `offset`, on the non-blocking socket: takes what fits now --- 0 (the file shrank),
  //   |     | the socket is full (EAGAIN)                   all sent: the response     error ---> CLOSING
  //   |     v                                             is sent: close, or wait
  //   |   poll POLLOUT ----------------------------------- no room for --idle-timeout (on_deadline) ---> CLOSING
  //   +-----+ room again
  //
  // Why not through the ring: io_uring has no sendfile, and IORING_OP_SPLICE (file -> pipe -> socket) always runs in
  // a kernel worker thread (io-wq): about one context switch and half as much CPU again per request
  // (docs/io_uring-advanced.md, "Serving files: splice, ..."). sendfile() on a socket that never blocks costs one
  // system call per burst and copies nothing into user space, as in 05 and nginx. What it gives up: a page-cache
  // miss makes it wait for the disk in the loop thread, stalling this loop's other connections (nginx has
  // `aio threads` for that), like the openat2() in answer().
  void send_more(Conn& c) {
    c.state = State::kSending;
    Outgoing& out = c.x->out;
    if (out.head_sent < out.head.size()) {
      io_uring_sqe* sqe = ring_.get_sqe();
      int more = out.left > 0 ? MSG_MORE : 0;  // a file follows: the head may share a packet with its first bytes
      io_uring_prep_send(sqe, c.fd, out.head.data() + out.head_sent, out.head.size() - out.head_sent,
                         MSG_NOSIGNAL | more);
      tag(sqe, Op::kSend, &c);
    } else {
      switch (send_some(c.fd, out)) {  // common/response.hpp: the file (nothing when the response is all head)
        case SendProgress::kDone: return response_sent(c);
        case SendProgress::kFailed: return close_conn(c, End::kReset);  // the client must not take a part for all
        case SendProgress::kBlocked: break;
      }
      io_uring_sqe* sqe = ring_.get_sqe();
      io_uring_prep_poll_add(sqe, c.fd, POLLOUT);
      tag(sqe, Op::kWritable, &c);
    }
    c.since = Clock::now();  // progress, or the start: the reader has --idle-timeout from now to take more
  }

  // kSend: part of the head is out. kWritable: the socket has room again. -EAGAIN: not ready after all, so the same
  // send again (kRecv: the same recv), whose new SQE waits by poll: no spin. An operation that io_uring hands to a
  // worker thread (io-wq: after many spurious wake-ups, or with no memory for its poll) runs there as a blocking
  // call, and a SENDMSG or RECVMSG answers it with -EAGAIN on a non-blocking socket (liburing issue #364). SEND and
  // RECV, used here, do not pass the socket's O_NONBLOCK on (io_uring/net.c): their worker waits. -EAGAIN stays
  // a result io_uring may give, never an end; blocking sockets (Seastar's cure) would make sendfile() block the loop.
  // Anything else (a reset, EPIPE) ends the connection with a reset: its response cannot be completed.
  void on_sent(Conn& c, Op op, int res) {
    if (res == -EAGAIN) return send_more(c);
    if (res <= 0) return close_conn(c, End::kReset);
    if (op == Op::kSend) c.x->out.head_sent += static_cast<std::size_t>(res);
    send_more(c);
  }

  // The whole response is out: end the connection, or wait for the next request, whose deadline starts now.
  void response_sent(Conn& c) {
    if (!c.x->out.keep_alive) return linger(c);  // as the response said: a stop's say close (respond()); see process()
    c.since = Clock::now();
    process(c);
  }
  // [/excerpt:send-file]

  // [excerpt:lingering]
  // The graceful end of a connection we do not keep (common/closing.hpp): our FIN goes out behind the response, and
  // LINGERING reads and throws away what comes until the client's EOF or a bound, so that unread client bytes never
  // turn the close into an RST that destroys the response. shutdown() is a plain system call: it never blocks, its
  // answer decides the next state now, and IORING_OP_SHUTDOWN would run in a kernel worker thread (io-wq; on 6.18).
  void linger(Conn& c) {
    c.state = State::kLingering;
    c.x->lingering = Lingering(Clock::now());
    timers_.add(c.x->lingering.deadline(), Timer{Timer::kLinger, c.slot, c.generation});
    if (!shutdown_writing(c.fd)) return close_conn(c);  // ENOTCONN: the client reset it; nothing to wait for
    arm_recv(c);  // take_buffer() gives its buffers straight back
  }

  // LINGERING: a recv completed. EOF, an error or kLingerMaxBytes: a plain close (the deadline: see on_deadline).
  void discard(Conn& c, int res) {
    if (res > 0 && c.x->lingering.discarded(static_cast<std::size_t>(res), Clock::now())) return arm_recv(c);
    close_conn(c);
  }
  // [/excerpt:lingering]

  void close_conn(Conn& c, End end = End::kClose) {
    c.state = State::kClosing;
    c.reset = end == End::kReset;
    if (c.in_flight == 0) release(c);  // otherwise the last CQE of the connection releases it (see dispatch)
  }

  void release(Conn& c) {
    close_socket(c.fd, c.reset);  // by the ownership rule no operation can still use this fd
    c.fd = -1;
    c.reset = false;
    c.state = State::kFree;
    c.generation = (c.generation + 1) & kGenerationMask;  // its heap entries and late CQEs are now stale
    c.x.reset();  // frees the buffers and closes the file of a response cut short
    free_.push_back(c.slot);
    --live_;
  }

  // A plain ::close(), not IORING_OP_CLOSE (see Conn). `reset`: SO_LINGER {1, 0} first, so the close sends an RST.
  void close_socket(int fd, bool reset = false) {
    if (reset) reset_connection(fd);
    ::close(fd);
    restore_spare();  // if a shed lost the spare (net.hpp), it takes the number just freed
  }

  const Options& opts_;
  // The kernel reads a timespec when it takes the SQE (with SQPOLL: at any time before the CQE), so these live in
  // the Loop, which outlives every operation; one copy serves every connection, as the values are the same.
  __kernel_timespec delay_, grace_, backoff_;
  Ring ring_;  // the ring, and the CQEs reaped and not yet dispatched (common/uring.hpp)
  BufferRing buffers_;  // the buffers every recv of this loop reads into (see take_buffer)
  Fd listener_;
  Op listen_op_ = Op::kNone;  // the one operation in flight for the listener: kAccept, kBackoff or kListenReady
  bool stopping_ = false;
  std::vector<std::unique_ptr<Conn>> conns_;  // the slot table: index = slot
  std::vector<std::uint32_t> free_;           // free slots, reused last-in first-out
  std::size_t live_ = 0;                      // slots in use
  TimerQueue<Timer> timers_;                  // the connections' deadlines (see on_deadline)
};

}  // namespace

int main(int argc, char** argv) {
  const Model model{"06-io_uring", default_thread_count(), "", {kProcessesFlag}};
  const Options opts = options_or_exit(argc, argv, model);
  start_workers(opts, model, opts.threads);  // --processes P: from here on, in each of P workers (workers.hpp)
  start_process();
  // [excerpt:threads]
  // One ring per loop, created before listening so that "io_uring is unavailable" comes before "listening on".
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < opts.threads; ++i) loops.push_back(std::make_unique<Loop>(opts));
  // One SO_REUSEPORT listener per loop: the kernel spreads new connections over them, and no two loops ever
  // share an accept queue or a connection.
  std::vector<Fd> listeners = worker_listen_sockets(opts, opts.threads);

  std::vector<std::thread> threads;
  for (int i = 0; i < opts.threads; ++i) threads.emplace_back(&Loop::run, loops[i].get(), std::move(listeners[i]));
  for (std::thread& t : threads) t.join();
  // [/excerpt:threads]
  return 0;  // every loop has closed its listener and connections; the rings close with the Loops
}
