// 06-io_uring: completion-based event loops on io_uring (liburing), one ring and one listener per thread.
//
// Chapter 05 asked the kernel "which sockets are ready?" and then made every call itself. Here the loop hands the
// kernel the calls themselves (accept, recv, send, poll) as submission queue entries (SQEs) and later reaps one
// completion queue entry (CQE) per call, carrying its result. One io_uring_submit_and_wait_timeout() per loop turn
// submits everything the last turn queued and sleeps until something completes or the earliest deadline is due:
// one system call per batch, not per call. Each connection's HTTP life (request, handler's delay, response,
// keep-alive, lingering close, deadlines, stop) is the connection engine's (common/connection.hpp), as in 03 and 05:
// this file is how io_uring drives it. advanced.cpp derives from its Loop, each io_uring feature behind a flag.
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
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../common/closing.hpp"
#include "../common/connection.hpp"
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
// CQ slots: a connection has one operation in flight (and a cancel while it closes), so 8192 (128 KiB) hold a turn
// of 4,000 connections, where the default (twice the SQ) holds 1,000. Past that: an overflow list (see get_sqe).
constexpr unsigned kCqEntries = 8 * kRingEntries;
// The loop's provided buffers, which every recv reads into (see arm_recv): one is taken per recv that completes in a
// turn and given back before the turn's submit, so 256 cover a turn of 256 connections that sent something; past
// that, a recv fails with -ENOBUFS and is armed again. 256 KiB per loop for any load (the size's trade: chapter 06).
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
// time the slot is freed, so a completion or a timer naming an older generation is for a connection that is gone.
enum class Op : std::uint8_t {
  kNone, kAccept, kBackoff, kListenReady, kStop, kCancel,  // the loop's and the listener's
  kRecv, kSend, kWritable,                                  // a connection's: at most one at a time
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
// One connection, as the loop sees it. What it is doing in HTTP terms (reading, waiting for the handler, sending,
// lingering) and when each wait ends are its engine's (`life`: common/connection.hpp, THE CONTRACT at its top).
// The loop turns each answer (Do) into io_uring operations, and each completion back into an engine event:
//
//   engine says    the loop                                     its completion, told to the engine
//   kRead          a recv SQE, into a provided buffer           on_bytes(), or on_peer_gone() for EOF or an error
//   kSend          a send SQE for the head; the file by         on_sent_bytes(n), or on_sent(kFailed)
//                  sendfile() from the loop (see send)
//   kWaitWritable  a poll SQE for POLLOUT                       on_writable()
//   kWait          nothing: the engine's timer is a heap entry  (the timer: on_timer())
//   kClose/kReset  CLOSING: cancel the operation in flight;     none: the engine is done with it
//                  when it is back, close the socket
//
// In flight: from when an SQE of the connection is queued until its CQE is reaped, the kernel holds its fd and, for
// a send, reads the head from the engine's Exchange (send_span()). `op` names that one operation: the engine asks
// for one thing at a time. The CLOSING rule: once the engine says kClose or kReset, that operation is cancelled,
// and the socket is closed, the Exchange freed (release()) and the slot reused only when its CQE is back (see
// close_conn). A recv points at none of the connection's memory: it reads into the loop's ring of buffers.
struct Conn {
  std::uint32_t slot = 0;        // index in Loop::conns_, fixed for the Conn's whole life
  std::uint32_t generation = 0;  // bumped when the slot is freed
  int fd = -1;                   // -1: the slot is free
  Op op = Op::kNone;             // the operation in flight for it, whose CQE comes next; kNone: none
  Do doing = Do::kRead;          // what the engine last asked for: kUnchanged means "go on with it"
  Connection life;               // its HTTP state (common/connection.hpp): 24 bytes while idle
};
// What an idle connection costs in user memory, besides its entry in the timer heap: no buffer, no parser.
static_assert(sizeof(Conn) <= 40, "an idle connection keeps only its Conn: keep it small");
// [/excerpt:connection]

// A timer heap entry: a connection's deadline, by slot, generation and the engine's epoch, or the stop's grace.
struct Timer { std::uint32_t slot; std::uint32_t generation; std::uint32_t epoch; };
constexpr std::uint32_t kGraceSlot = 0xFFFFFFFF;

// One event loop: a ring, a listener, and the connections it accepted. Used by one thread only. advanced.cpp derives
// from it: the `virtual` methods are where its flags differ, and here each does the plain thing the chapter shows.
class Loop {
 public:
  // Creating the ring is also the probe: the first Loop fails with one sentence if io_uring cannot be used.
  // COOP_TASKRUN (5.19): the recv waiting for a client's bytes is finished in this thread ("task work"). By default
  // the kernel interrupts the thread at once (an inter-processor interrupt); with the flag the work waits until the
  // thread next enters the kernel, as it does every turn: a fifth less CPU per request under keep-alive load on 2
  // vCPUs (docs/io_uring-advanced.md); the stop allows for it (on_stop). advanced.cpp passes `tune` and `buffers`.
  explicit Loop(const Options& opts, void (*tune)(io_uring_params&) = nullptr, unsigned buffers = kBufferCount)
      : engine_(opts), backoff_(to_kernel_timespec(kAcceptBackoff)) {
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN;
    params.cq_entries = kCqEntries;
    if (tune) tune(params);
    int r = io_uring_queue_init_params(kRingEntries, &ring_.ring, &params);
    if (r == -EINVAL) fail_startup("io_uring is unavailable: this kernel is older than 5.19 (it refused COOP_TASKRUN)");
    if (r < 0) fail_startup(unavailable(-r));
    // FAST_POLL (5.7): without it every recv would park a kernel worker thread instead of waiting on the socket.
    // EXT_ARG (5.11): the wait with a timeout in run(), for which liburing would otherwise queue an SQE each time.
    if (!(params.features & IORING_FEAT_FAST_POLL) || !(params.features & IORING_FEAT_EXT_ARG))
      fail_startup("io_uring is unavailable: this kernel is older than 5.11 (no IORING_FEAT_FAST_POLL or EXT_ARG)");
    if (int e = buffers_.set_up(ring_.ring, buffers, kBufferSize, kBufferGroup); e < 0)
      fail_startup("io_uring is unavailable: no ring of provided buffers (" + std::string(std::strerror(-e)) + ")");
  }
  virtual ~Loop() { io_uring_queue_exit(&ring_.ring); }
  Loop(const Loop&) = delete;  // it owns a ring (and so cannot be assigned either: Ring's members forbid it)

  void listen_on(Fd listener) { listener_ = std::move(listener); }

  // [excerpt:loop-turn]
  void run() {
    arm_accept();
    // The stop eventfd stays readable once a stop is requested, so a poll armed after the signal still fires.
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_poll_add(sqe, stop_fd(), POLLIN);
    tag(sqe, Op::kStop);
    for (;;) {
      // The deadlines are a heap in user space, as in 05: the earliest is the timeout of the wait below (no SQE, no
      // CQE). The handler's delay is one: one SQE and one CQE fewer per request than an IORING_OP_TIMEOUT.
      if (stopping_) look_before_deadlines();  // see on_stop
      Clock::time_point now = Clock::now();
      while (std::optional<Timer> t = timers_.pop_due(now)) on_timer(*t, now);
      if (stopping_ && listen_op_ == Op::kNone && live_ == 0) break;
      // Submit, then sleep until a CQE comes or the earliest deadline is due (EXT_ARG: read during this call only,
      // as epoll_pwait2's timeout in 05, so a stack variable will do). -ETIME (the timeout), -EINTR: fine.
      std::optional<std::chrono::nanoseconds> wait = timers_.time_to_next(now);
      __kernel_timespec timeout = to_kernel_timespec(wait.value_or(std::chrono::nanoseconds(0)));
      io_uring_cqe* first;  // unused: reap() takes them all
      io_uring_submit_and_wait_timeout(&ring_.ring, &first, 1, wait ? &timeout : nullptr, nullptr);
      ring_.reap();
      if (stop_requested() && !stopping_) on_stop();  // before the batch: a request in it is answered as the last
      dispatch_batch();
    }
    // Left in the ring: some cancel results, which point at nothing of ours. ~Loop() ends them.
  }

 protected:
  // Every CQE reaped, in order; a copy of each, as get_sqe() may reap more (they come last) under dispatch().
  void dispatch_batch() {
    for (std::size_t i = 0; i < ring_.batch.size(); ++i) dispatch(Completion(ring_.batch[i]));
    ring_.batch.clear();
  }

  virtual void dispatch(const Completion& done) {
    Tag t = decode(done.user_data);
    switch (t.op) {
      case Op::kAccept: return on_accept(done.res);
      case Op::kBackoff:      // the pause after a failed accept is over (or the stop cancelled it)
      case Op::kListenReady:  // the listener has a pending connection (or the stop cancelled the poll)
        listen_op_ = Op::kNone;
        if (stopping_) return listener_.reset();
        return t.op == Op::kBackoff ? arm_listen_wait(Op::kListenReady) : arm_accept();
      case Op::kStop: return stopping_ ? void() : on_stop();
      case Op::kCancel: return;  // 0, -ENOENT or -EALREADY: the target's own CQE is what counts
      default: break;
    }
    // A connection's operation. The stale check cannot fail by the CLOSING rule; it is a second line of defence.
    if (t.slot < conns_.size() && conns_[t.slot].generation == t.generation) on_completion(conns_[t.slot], t.op, done);
    // Every buffer a CQE names goes back to the ring, whatever the CQE says (a stale one, a CLOSING connection, an
    // EOF): one that does not is lost to the kernel for good. on_completion() has copied its bytes by now.
    if (done.flags & IORING_CQE_F_BUFFER) buffers_.give_back(BufferRing::id(done.flags));
  }
  // [/excerpt:loop-turn]

  // [excerpt:completion]
  // The connection's one operation is over: tell the engine, and do what it answers. A recv's bytes are in a buffer
  // of the loop's ring, named by the CQE (IORING_CQE_F_BUFFER, its id); on_bytes() copies them, then dispatch() gives
  // the buffer back. -ENOBUFS: this turn's recvs took every buffer (all are back by the next submit). -EAGAIN: not
  // ready after all, as an operation run by a kernel worker (io-wq) may end (liburing issue #364). Both answer
  // kUnchanged: the same operation again, whose new SQE waits by poll; never an end.
  virtual void on_completion(Conn& c, Op op, const Completion& done) {
    c.op = Op::kNone;
    if (closing(c)) return close_conn(c);  // the cancel's target, or an operation that ended before it: release
    const int res = done.res;
    const Clock::time_point now = Clock::now();
    if (res == -EAGAIN || (op == Op::kRecv && res == -ENOBUFS)) return apply(c, Next{});
    if (op == Op::kRecv && res > 0) {
      std::string_view bytes(buffers_.data(BufferRing::id(done.flags)), static_cast<std::size_t>(res));
      return apply(c, engine_.on_bytes(c.life, bytes, now));
    }
    if (op == Op::kRecv) return apply(c, engine_.on_peer_gone(c.life));  // 0: EOF; < 0: a reset, ...
    if (op == Op::kWritable) return apply(c, engine_.on_writable(c.life));  // room again (or an error: send finds it)
    if (res > 0) return apply(c, engine_.on_sent_bytes(c.life, static_cast<std::size_t>(res), now));
    apply(c, engine_.on_sent(c.life, SendProgress::kFailed, now));  // a reset, EPIPE: the response cannot be whole
  }
  // [/excerpt:completion]

  // [excerpt:apply]
  // Carries out what the engine answered, until the connection waits for a CQE or a timer. kUnchanged goes on with
  // what it was doing: an operation that completed without news (-EAGAIN, LINGERING's bytes) is armed again.
  void apply(Conn& c, Next next) {
    for (;;) {
      if (next.arm) {  // contract 3: a timer for the deadline, tagged with the epoch; an old one is never cancelled
        timers_.add(next.deadline, Timer{c.slot, c.generation, next.epoch});
        timers_.prune_over(2 * live_ + 64, [this](const Timer& t) { return stale(t); });  // timers.hpp
      }
      if (next.shutdown && !shut_down(c)) {  // LINGERING begins with our FIN; the peer may be gone
        next = engine_.on_peer_gone(c.life);
        continue;
      }
      if (next.what != Do::kUnchanged) c.doing = next.what;
      if (closing(c)) return close_conn(c);
      if (c.op != Op::kNone) return;  // one operation at a time: its CQE brings the next step
      switch (c.doing) {
        case Do::kRead: return arm_recv(c);
        case Do::kWaitWritable: return arm_writable(c);
        case Do::kSend: break;
        default: return;  // kWait: no I/O; the handler's delay is the engine's timer, in the heap
      }
      next = send(c);
      if (c.op != Op::kNone) return;
    }
  }

  // A recv with no buffer of its own (IOSQE_BUFFER_SELECT, length 0): the kernel takes one of the loop's ring when
  // bytes come, so a waiting recv holds no memory of ours; and no timeout: the engine's deadline is a heap entry.
  virtual void arm_recv(Conn& c) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_recv(sqe, c.fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    tag(sqe, Op::kRecv, &c);
  }

  // The socket was full (sendfile's EAGAIN): IORING_OP_POLL_ADD completes once it has room.
  void arm_writable(Conn& c) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_poll_add(sqe, c.fd, POLLOUT);
    tag(sqe, Op::kWritable, &c);
  }
  // [/excerpt:apply]

  // kSend: the head from the engine's Exchange through the ring (its CQE: on_sent_bytes; a short send, and the
  // engine asks for the rest), then the file with sendfile() from the loop itself (send_some, common/response.hpp):
  // on the non-blocking socket it takes what fits now; when the socket is full the engine asks for kWaitWritable,
  // a poll, then kSend again; --idle-timeout without progress, and its timer resets the connection. Why not through
  // the ring: io_uring has no sendfile, and IORING_OP_SPLICE runs in a kernel worker thread (io-wq), half as much CPU
  // again per request (docs/io_uring-advanced.md); sendfile() copies nothing into user space, as in 05. What it gives
  // up: a page-cache miss waits for the disk in the loop thread, stalling this loop's other connections (nginx has
  // `aio threads` for that), as does the synchronous openat2() with which respond() opens the file.
  virtual Next send(Conn& c) {
    SendSpan span = engine_.send_span(c.life);
    if (span.head.empty())  // the file (nothing when the response is all head)
      return engine_.on_sent(c.life, send_some(c.fd, *engine_.outgoing(c.life)), Clock::now());
    io_uring_sqe* sqe = ring_.get_sqe();
    int more = span.file >= 0 ? MSG_MORE : 0;  // a file follows: the head may share a packet with its first bytes
    io_uring_prep_send(sqe, c.fd, span.head.data(), span.head.size(), MSG_NOSIGNAL | more);
    tag(sqe, Op::kSend, &c);
    return Next{};
  }

  // Sets the SQE's user_data and, for a connection's SQE, makes it the connection's operation in flight.
  virtual void tag(io_uring_sqe* sqe, Op op, Conn* c = nullptr) {
    io_uring_sqe_set_data64(sqe, c ? encode(op, c->generation, c->slot) : encode(op));
    if (c) c->op = op;
  }

  // A timer is due. The engine judges (contract 3): the handler is done, a wait took too long, or it moved later.
  void on_timer(const Timer& t, Clock::time_point now) {
    if (t.slot == kGraceSlot) {  // kStopGrace is over: whatever is still open is reset (contract 8)
      for (Conn& c : conns_)
        if (c.fd >= 0 && !closing(c)) apply(c, engine_.on_grace_over(c.life));
      return;
    }
    Conn& c = conns_[t.slot];
    if (c.generation != t.generation || closing(c)) return;  // its connection is gone or ending
    apply(c, engine_.on_timer(c.life, t.epoch, now));
  }

  bool stale(const Timer& t) const {  // of a connection gone, or of an epoch before its deadline moved earlier
    const Conn* c = t.slot == kGraceSlot ? nullptr : &conns_[t.slot];
    return c && (c->generation != t.generation || c->life.epoch() != t.epoch);
  }

  // Accepted sockets are non-blocking for sendfile()'s sake (see send); io_uring's recv, send and poll wait by
  // themselves. So is the listener: IORING_OP_ACCEPT waits anyway on 6.18; some 5.x kernels completed it with
  // -EAGAIN at once, which takes the error path below: no spin.
  virtual void arm_accept() {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_accept(sqe, listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    tag(sqe, Op::kAccept);
    listen_op_ = Op::kAccept;
  }

  // After a failed accept: ACCEPT --error--> (EMFILE: shed_pending_connection) --> BACKOFF: 10 ms --> READY: poll.
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

  void open_conn(int fd) {
    if (free_.empty()) {  // a new slot
      free_.push_back(static_cast<std::uint32_t>(conns_.size()));
      conns_.emplace_back().slot = free_.back();
    }
    Conn& c = conns_[free_.back()];
    free_.pop_back();
    c.fd = fd;
    c.doing = Do::kRead;
    c.life = Connection();  // a fresh one: the slot's last connection left its engine state DONE
    ++live_;
    apply(c, engine_.start(c.life, Clock::now()));  // a recv, and the head's deadline
  }

  // [excerpt:stop]
  // The stop (contract 8): no more accepts; every connection is told, and kStopGrace later what is left is reset;
  // run() returns once all are closed. A READING connection's deadline becomes now, and its timer closes it, unless a
  // request already waits in its socket: that one is read and answered, with Connection: close. So while stopping,
  // each turn looks at the sockets before the deadlines: it submits what is queued (a recv armed since completes at
  // once if its bytes are there) and lets the kernel post what it has finished (COOP_TASKRUN lets that work wait
  // until the thread enters the kernel), again as long as that queues more, and dispatches it all.
  void on_stop() {
    stopping_ = true;
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_cancel64(sqe, encode(listen_op_), 0);  // its CQE (-ECANCELED) then closes the listener
    tag(sqe, Op::kCancel);
    Clock::time_point now = Clock::now();
    timers_.add(now + kStopGrace, Timer{kGraceSlot, 0, 0});
    for (Conn& c : conns_)
      if (c.fd >= 0 && !closing(c)) apply(c, engine_.on_stop(c.life, now));
  }
  virtual void look_before_deadlines() {
    do {
      io_uring_submit_and_get_events(&ring_.ring);  // no wait
      ring_.reap();
      dispatch_batch();
    } while (io_uring_sq_ready(&ring_.ring) > 0);
  }

  // CLOSING: the engine is done (kClose or kReset in `doing`). With an operation in flight the kernel still holds the
  // socket (and a send, the Exchange): cancel it; its CQE (-ECANCELED, or its own result if it ended first) comes
  // to on_completion(), which calls this again, to release it. A CLOSING connection gets no other event.
  virtual void close_conn(Conn& c) {
    if (c.op == Op::kNone) return release(c);
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_cancel64(sqe, encode(c.op, c.generation, c.slot), 0);
    tag(sqe, Op::kCancel);
  }
  // [/excerpt:stop]

  bool closing(const Conn& c) const { return c.doing == Do::kClose || c.doing == Do::kReset; }

  // Nothing is in flight any more: the socket closes (kReset: with an RST), the engine frees the Exchange (contract
  // 7), and the slot is free, generation + 1, so its timers and any late CQE are stale. A plain ::close(), not
  // IORING_OP_CLOSE, which would add one more completion to wait for: closing a socket does not block.
  virtual void release(Conn& c) {
    engine_.release(c.life);
    close_socket(c.fd, c.doing == Do::kReset);
    c.fd = -1;
    c.generation = (c.generation + 1) & kGenerationMask;
    free_.push_back(c.slot);
    --live_;
  }

  virtual bool shut_down(Conn& c) { return shutdown_writing(c.fd); }  // our FIN (closing.hpp)
  virtual void close_socket(int fd, bool reset = false) {
    if (reset) reset_connection(fd);
    ::close(fd);
    restore_spare();  // if a shed lost the spare (net.hpp), it takes the number just freed
  }

  ConnectionEngine engine_;  // every connection's HTTP life (common/connection.hpp)
  __kernel_timespec backoff_;  // the kernel reads it until the CQE (never a stack variable): the Loop outlives it
  Ring ring_;  // the ring, and the CQEs reaped and not yet dispatched (common/uring.hpp)
  BufferRing buffers_;  // the buffers every recv of this loop reads into (see on_completion)
  Fd listener_;
  Op listen_op_ = Op::kNone;  // the one operation in flight for the listener: kAccept, kBackoff or kListenReady
  bool stopping_ = false;
  std::deque<Conn> conns_;  // the slot table (index = slot), the one owner of every Conn: a deque never moves them
  std::vector<std::uint32_t> free_;   // free slots, reused last-in first-out
  std::size_t live_ = 0;              // slots in use
  TimerQueue<Timer> timers_;          // every connection's deadline and the handler's delays, in one heap
};

}  // namespace

#ifndef PSP_06_ADVANCED  // advanced.cpp includes this file for Loop, and has a main() of its own
int main(int argc, char** argv) {
  const Model model{"06-io_uring", default_thread_count(), "", {kProcessesFlag}};
  const Options opts = options_or_exit(argc, argv, model);
  // One ring per loop, created before listening (so "io_uring is unavailable" comes before "listening on"), one
  // SO_REUSEPORT listener each, one thread each, in each --processes worker (workers.hpp).
  run_loops<Loop>(opts, model, opts.threads);
  return 0;  // every loop has closed its listener and connections; the rings close with the Loops
}
#endif
