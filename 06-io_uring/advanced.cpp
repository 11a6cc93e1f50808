// 06-io_uring/advanced.cpp: main.cpp's event loops, plus the io_uring features that make servers like it fast,
// each behind its own flag and probed at run time.
//
// Why two programs: main.cpp is the chapter's lesson, one plain batched completion loop. The features below are what
// public io_uring servers advertise; each changes one thing, but together they would bury that loop. So this program
// is main.cpp, every line of it in the same order, with each feature added as code that runs only under its flag.
// Without flags it is main.cpp, and `diff main.cpp advanced.cpp` shows the features and nothing else (the test
// Advanced.IsMainPlusFlags, in tests/unit, checks that no line of main.cpp is missing here).
//
//   --defer-taskrun     SINGLE_ISSUER + DEFER_TASKRUN (6.1): the kernel finishes the loop's operations when the loop
//                       waits for them, not whenever the next system call comes (main.cpp's COOP_TASKRUN)
//   --sqpoll MS         a kernel thread takes SQEs as they are queued: the loop makes a system call only to wait,
//                       or to wake that thread once it has slept after MS idle milliseconds
//   --attach-wq         the rings share the first ring's kernel workers (io-wq), and its SQPOLL thread if any
//   --multishot-accept  one accept SQE per listener completes once for every new connection (5.19)
//   --multishot-recv    one recv SQE per connection completes for every read, into buffers the loop provides (6.0)
//   --fixed-files       connections get registered ("direct") descriptors, which the kernel finds without looking
//                       them up in the process's descriptor table on every operation (5.19); implies --splice
//   --splice            with --root, a file goes file -> pipe -> socket by two splices in kernel worker threads,
//                       instead of by sendfile() from the loop; without --root it changes nothing
//   --send-zc           with --root, a file goes file -> buffer -> zero-copy send (IORING_OP_SEND_ZC, 6.0),
//                       instead of by sendfile(); without --root it changes nothing
//
// Needs:  what main.cpp needs (Linux 5.19, liburing 2.3 or later), and what each flag says.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server_advanced advanced.cpp -luring
// Run:    ./run_server_advanced --defer-taskrun      (--help lists the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
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
// The flags' own (see the header):
constexpr off_t kSpliceMax = 1 << 30;  // --splice: the most one file splice asks for; the pipe takes what fits
constexpr int kPipeSize = 1 << 20;  // not the default 64 KiB: wrk -c100 then fetched a 1 MB file ~1.5x as often
// --multishot-recv: more buffers in the loop's ring, and how much a connection may buffer while it answers
// (pipelined requests) before its recv is paused. A recv that stays armed takes a buffer for every read, also while
// its connection is busy: with 256 buffers of 2 KiB, wrk -c300 met an empty ring (-ENOBUFS) on 4 % of its requests;
// with 1024, none up to -c1000.
constexpr unsigned kMultishotBufferCount = 1024;
constexpr std::size_t kMaxBuffered = 8192;  // as main.cpp's reads: a head is at most 8 KiB; see on_received
constexpr unsigned kZcBufferSize = 256 * 1024;  // --send-zc: a connection's file buffer, made for its first file
constexpr sockaddr kDisconnect{AF_UNSPEC, {}};  // --fixed-files: connect() to it resets a connection (close_direct)

// The flags, from the command line (features_or_exit, at the end): set before the first Loop, read-only after.
struct Features {
  bool defer_taskrun = false;
  unsigned sqpoll_idle_ms = 0;  // --sqpoll MS; 0: no SQPOLL thread
  bool attach_wq = false;
  bool multishot_accept = false;
  bool multishot_recv = false;
  bool fixed_files = false;
  bool splice = false;  // --splice, or --fixed-files without --send-zc: sendfile() cannot take a registered file
  bool send_zc = false;
  bool recv_cap = false;  // --multishot-recv: the kernel can end it after kMaxBuffered bytes (probed: Linux 6.17)
} features;
int first_ring_fd = -1;  // --attach-wq: the first ring, whose workers the others share (its Loop sets it)

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
  kShutdown, kClose, kFileToPipe, kPipeToSocket, kFileToBuffer, kSendZc,  // a connection's, under the flags
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
// The flags: --multishot-recv keeps one recv armed through every state (see on_received); --splice and --send-zc
// send a file through the ring (see send_file); --fixed-files names the socket by an index in the ring's table of
// registered files, so the socket calls main.cpp makes itself go through the ring (see close_direct). A zero-copy
// send also delays the slot's reuse: the kernel may read `zc_buffer` until its notification (see send_file_zc).
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
  // The flags' own:
  bool receiving = false;   // --multishot-recv: its recv is armed (until the CQE without IORING_CQE_F_MORE)
  bool read_ended = false;  // ... and ended with EOF or an error: close once `in` holds no whole request
  Fd pipe_rd, pipe_wr;      // --splice: the pipe files go through, made for the first one, closed with the Conn
  std::size_t piped = 0;    // ... bytes of the file in the pipe, not yet spliced to the socket
  std::unique_ptr<char[]> zc_buffer;  // --send-zc: kZcBufferSize bytes, made for the connection's first file
  std::size_t zc_filled = 0;          // ... bytes of the file read into it
  std::size_t zc_sent = 0;            // ... and sent from it
  int zc_notifs = 0;  // ... zero-copy sends that may still read it, until their IORING_CQE_F_NOTIF (see dispatch)
};
// What an idle connection costs in user memory, besides its entry in the deadline heap: no buffer, no parser.
// (main.cpp's bound is 40 bytes; the flags' state above adds what its comments say.)
static_assert(sizeof(Conn) <= 112, "an idle connection keeps only its Conn: keep it small");
// [/excerpt:connection]

// An entry of the deadline heap (see on_deadline): kIdle, one per connection from its accept on; kLinger, one more
// from when it starts LINGERING. It names its connection by slot and generation, as user_data does.
struct Timer { enum Kind { kIdle, kLinger } kind; std::uint32_t slot; std::uint32_t generation; };

// [excerpt:setup]
// The ring's setup options for the flags, on top of main.cpp's.
void set_up_flags(io_uring_params& params) {
  if (features.sqpoll_idle_ms > 0) {  // (the kernel refuses COOP_TASKRUN with it: the Loop then asks without)
    params.flags |= IORING_SETUP_SQPOLL;
    params.sq_thread_idle = features.sqpoll_idle_ms;
  }
  if (first_ring_fd >= 0) {  // the io-wq workers (--splice runs there) and, with SQPOLL, ONE SQPOLL thread for all
    params.flags |= IORING_SETUP_ATTACH_WQ;
    params.wq_fd = static_cast<unsigned>(first_ring_fd);
  }
  // SINGLE_ISSUER promises the kernel that one thread only submits to this ring: true here, with one ring per
  // thread, and what DEFER_TASKRUN requires. The kernel takes the thread that enables the ring as that issuer, so
  // main() creates it disabled (R_DISABLED) and run() enables it, in the loop's own thread.
  if (features.defer_taskrun)
    params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
}
// [/excerpt:setup]

// One sentence on a ring that could not be created with `flags`: io_uring itself, or one of the flags' options.
std::string setup_refused(int error, unsigned flags) {
  io_uring plain;
  if (int r = io_uring_queue_init(8, &plain, 0); r < 0) return unavailable(-r);
  io_uring_queue_exit(&plain);
  std::string names;
  if (flags & IORING_SETUP_SQPOLL) names += " --sqpoll (IORING_SETUP_SQPOLL)";
  if (flags & IORING_SETUP_ATTACH_WQ) names += " --attach-wq (IORING_SETUP_ATTACH_WQ)";
  if (flags & IORING_SETUP_DEFER_TASKRUN) names += " --defer-taskrun (IORING_SETUP_DEFER_TASKRUN, Linux 6.1)";
  return "the kernel refused a ring with" + names + ": " + std::strerror(error);
}
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
      set_up_flags(params);
      return io_uring_queue_init_params(kRingEntries, &ring_.ring, &params);
    };
    int r = create(IORING_SETUP_COOP_TASKRUN);
    if (r == -EINVAL && features.sqpoll_idle_ms > 0) r = create(0);  // the kernel refuses COOP_TASKRUN with SQPOLL
    if (r < 0 && (params.flags & ~(IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN)))
      fail_startup(setup_refused(-r, params.flags));
    if (r == -EINVAL) fail_startup("io_uring is unavailable: this kernel is older than 5.19 (it refused COOP_TASKRUN)");
    if (r < 0) fail_startup(unavailable(-r));
    // FAST_POLL (5.7): without it every recv would park a kernel worker thread instead of waiting on the socket.
    // EXT_ARG (5.11): the wait with a timeout in run(), for which liburing would otherwise queue an SQE each time.
    if (!(params.features & IORING_FEAT_FAST_POLL) || !(params.features & IORING_FEAT_EXT_ARG))
      fail_startup("io_uring is unavailable: this kernel is older than 5.11 (no IORING_FEAT_FAST_POLL or EXT_ARG)");
    unsigned buffer_count = kBufferCount;  // (advanced.cpp's --multishot-recv takes more)
    if (features.multishot_recv) buffer_count = kMultishotBufferCount;  // see kMultishotBufferCount
    if (int e = buffers_.set_up(ring_.ring, buffer_count, kBufferSize, kBufferGroup); e < 0)
      fail_startup("io_uring is unavailable: no ring of provided buffers (" + std::string(std::strerror(-e)) + ")");
    if (features.attach_wq && first_ring_fd < 0) first_ring_fd = ring_.ring.ring_fd;  // main() keeps this Loop
    if (features.fixed_files) register_files();
  }
  ~Loop() { io_uring_queue_exit(&ring_.ring); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // [excerpt:loop-turn]
  void run(Fd listener) {
    // --defer-taskrun: enabling the ring makes this thread its single issuer. (liburing 2.3 declares
    // io_uring_enable_rings() but does not export it, hence the system call.)
    if (features.defer_taskrun &&
        ::syscall(__NR_io_uring_register, ring_.ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) != 0)
      fail_startup(std::string("--defer-taskrun: cannot enable the ring: ") + std::strerror(errno));
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
    if (t.op == Op::kAccept && (done.flags & IORING_CQE_F_MORE)) return accepted(res);  // --multishot-accept
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
      case Op::kClose: return;   // --fixed-files: a registered file's reset or close (see close_direct)
      default: break;
    }
    if (done.flags & IORING_CQE_F_BUFFER) take_buffer(t, res, done.flags);  // first: even a stale CQE's goes back
    if (t.slot >= conns_.size() || conns_[t.slot]->generation != t.generation) return;  // stale: see user_data
    Conn& c = *conns_[t.slot];
    // The flags: an SQE is in flight until its last CQE, and a multishot one carries IORING_CQE_F_MORE until then. A
    // zero-copy send stops using the socket at its first CQE; its notification (IORING_CQE_F_NOTIF) comes after.
    if (t.op == Op::kSendZc && !(done.flags & IORING_CQE_F_MORE)) --c.zc_notifs;  // its notification, or none to come
    if (done.flags & IORING_CQE_F_NOTIF) return notified(c);
    if (t.op == Op::kRecv && (done.flags & IORING_CQE_F_MORE)) return received_more(c, res, done.flags);
    --c.in_flight;
    if (c.state == State::kClosing) {  // a stop or a deadline cancelled the op (-ECANCELED), or it ended first
      if (c.in_flight == 0) release(c);
      return;
    }
    switch (t.op) {
      case Op::kRecv:
        if (features.multishot_recv) return on_received(c, res, done.flags);
        // -EAGAIN: not ready after all (see on_sent). -ENOBUFS: this turn's recvs took every buffer of the ring;
        // they are all back by the next submit. Either way, the same recv again.
        if (res == -EAGAIN || res == -ENOBUFS) return arm_recv(c);
        if (c.state == State::kLingering) return discard(c, res);
        if (res <= 0) return close_conn(c);  // 0: EOF; <0: the client reset the connection, ...
        return process(c);  // the bytes are in the Exchange (take_buffer)
      case Op::kTimer:  // -ETIME is the normal end of a timeout; -ECANCELED means the stop grace ran out
        return res == -ETIME ? answer(c) : close_conn(c);
      case Op::kShutdown: return res < 0 ? cancel_and_close(c) : void();  // --fixed-files, see shutdown_direct
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

  // --fixed-files: a connection's `fd` is an index in the ring's table of registered files, not a descriptor, and
  // every SQE that names it says so.
  void direct(io_uring_sqe* sqe) const {
    if (features.fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
  }

  // Cancels the connection's operation `op`, if it is in flight: its CQE then ends with -ECANCELED.
  void cancel(Conn& c, Op op) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_cancel64(sqe, encode(op, c.generation, c.slot), 0);
    tag(sqe, Op::kCancel);
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
    if (features.multishot_accept || features.fixed_files) prep_accept_with_flags(sqe);  // in its place
    tag(sqe, Op::kAccept);
    listen_op_ = Op::kAccept;
  }

  // --multishot-accept: one SQE accepts every connection, each CQE carrying IORING_CQE_F_MORE while it goes on.
  // --fixed-files: the kernel puts the socket in a free entry of the registered table and answers its index
  // (registered files have no close-on-exec: there is nothing to exec them into).
  void prep_accept_with_flags(io_uring_sqe* sqe) {
    int fd = listener_.get();
    if (features.multishot_accept && features.fixed_files)
      io_uring_prep_multishot_accept_direct(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK);
    else if (features.multishot_accept)
      io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    else  // - 1: liburing 2.3 adds 1 to any index (2.4 and later leave ALLOC as it is)
      io_uring_prep_accept_direct(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK, IORING_FILE_INDEX_ALLOC - 1);
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

  // --multishot-accept: a CQE with IORING_CQE_F_MORE brings a connection, and the accept goes on. Its last CQE (an
  // error, the stop's cancel, or when the kernel chooses, as with a full CQ) goes to on_accept like a single one's.
  void accepted(int fd) { stopping_ ? close_socket(fd) : open_conn(fd); }
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
    if (features.multishot_recv) return arm_multishot_recv(c);
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_recv(sqe, c.fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    direct(sqe);
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
    if (out.head_sent == out.head.size() && (features.splice || features.send_zc)) return send_file(c);
    if (out.head_sent < out.head.size()) {
      io_uring_sqe* sqe = ring_.get_sqe();
      int more = out.left > 0 ? MSG_MORE : 0;  // a file follows: the head may share a packet with its first bytes
      io_uring_prep_send(sqe, c.fd, out.head.data() + out.head_sent, out.head.size() - out.head_sent,
                         MSG_NOSIGNAL | more);
      direct(sqe);
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
    // --splice: the socket is full. A splice runs in a worker, never by poll: issued again at once, it would spin.
    if (op == Op::kPipeToSocket && res == -EAGAIN) return wait_writable(c);
    if (res == -EAGAIN) return send_more(c);
    if (res <= 0) return close_conn(c, End::kReset);
    if (op == Op::kSend) c.x->out.head_sent += static_cast<std::size_t>(res);
    if (op != Op::kSend && op != Op::kWritable) file_progress(c, op, static_cast<std::size_t>(res));  // the flags'
    send_more(c);
  }

  // The whole response is out: end the connection, or wait for the next request, whose deadline starts now.
  void response_sent(Conn& c) {
    if (!c.x->out.keep_alive) return linger(c);  // as the response said: a stop's say close (respond()); see process()
    c.since = Clock::now();
    process(c);
  }
  // [/excerpt:send-file]

  // [excerpt:splice]
  // --splice and --send-zc: SENDING's file through the ring, instead of sendfile() from the loop. --splice sends it
  // through the connection's pipe, one operation per arrow (--send-zc: see send_file_zc):
  //
  //   +-> left == 0 and the pipe empty? --- yes ---> the response is sent: close, or wait for the next request
  //   |     | no
  //   |     v
  //   |   splice file -> pipe at `offset` ------ 0 (the file shrank), error ---> CLOSING
  //   |     | n bytes in the pipe
  //   |     v
  //   |   splice pipe -> socket ---------------- -EAGAIN ---> poll POLLOUT (wait_writable)
  //   |     | short: splice the rest  <------------------------ room again
  //   +-----+ the pipe is empty
  //
  // splice() moves page references, not bytes: page cache -> pipe -> socket, never through user space. io_uring runs
  // every splice in a kernel worker thread (io-wq), and two rules keep those workers from ever waiting on a client.
  // The pipe is empty when we fill it, so the file splice never waits for room in it. The socket is non-blocking,
  // so the socket splice takes what fits or fails with -EAGAIN, and we wait for room with a poll, under SENDING's
  // deadline. (Into a blocking socket the splice would wait in its worker until the client had read it all, and no
  // cancel could end it: seen on 6.18.) The two splices are not linked: a chain goes on only if an operation moves
  // all it was asked for, and the file splice moves what fits in the pipe, which would end the chain.
  // main.cpp's sendfile() measured cheaper than two splices in workers (docs/io_uring-advanced.md), but --fixed-files
  // needs this path: a registered file has no descriptor number for sendfile(), and a splice names it with
  // IOSQE_FIXED_FILE. `benchmark.sh --mode files 06 06-io_uring-advanced:--splice` measures the two side by side.
  void send_file(Conn& c) {
    c.since = Clock::now();  // progress, or the start: as in send_more
    Outgoing& out = c.x->out;
    if (out.done() && c.piped == 0 && c.zc_sent == c.zc_filled && c.zc_notifs == 0) return response_sent(c);
    if (features.send_zc) return send_file_zc(c);
    if (out.left > 0 && !c.pipe_wr.valid()) {  // the connection's first file
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) return close_conn(c, End::kReset);  // out of descriptors: no response
      c.pipe_rd.reset(fds[0]);
      c.pipe_wr.reset(fds[1]);
      // Refused (EPERM) past fs.pipe-max-size, or once the user's pipes hold fs.pipe-user-pages-soft pages (16,384 by
      // default: 64 pipes of 1 MiB). Past that soft limit a new pipe even starts at 8 KiB, not 64 KiB, and stays so:
      // as uid 65534, 64 connections got 1 MiB and the next 36 got 8 KiB (root is exempt). More splices, no errors.
      ::fcntl(fds[1], F_SETPIPE_SZ, kPipeSize);
    }
    io_uring_sqe* sqe = ring_.get_sqe();
    if (c.piped > 0) {
      io_uring_prep_splice(sqe, c.pipe_rd.get(), -1, c.fd, -1, static_cast<unsigned>(c.piped), 0);
      direct(sqe);  // IOSQE_FIXED_FILE names the output; the pipe, the input, is an ordinary descriptor
      tag(sqe, Op::kPipeToSocket, &c);
    } else {
      auto count = static_cast<unsigned>(std::min(out.left, kSpliceMax));
      io_uring_prep_splice(sqe, out.file.get(), out.offset, c.pipe_wr.get(), -1, count, 0);
      tag(sqe, Op::kFileToPipe, &c);
    }
  }

  void wait_writable(Conn& c) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_poll_add(sqe, c.fd, POLLOUT);
    direct(sqe);
    tag(sqe, Op::kWritable, &c);
  }

  // What a file operation moved (`n` > 0: on_sent has taken the errors and the shrunk file).
  void file_progress(Conn& c, Op op, std::size_t n) {
    if (op == Op::kPipeToSocket) c.piped -= n;
    if (op == Op::kSendZc) c.zc_sent += n;
    if (op == Op::kFileToPipe) c.piped = n;
    if (op == Op::kFileToBuffer) c.zc_filled = n, c.zc_sent = 0;
    if (op == Op::kFileToPipe || op == Op::kFileToBuffer) {
      c.x->out.offset += static_cast<off_t>(n);
      c.x->out.left -= static_cast<off_t>(n);
      if (c.x->out.left == 0) c.x->out.file.reset();  // the rest is in the pipe or the buffer: the file can be closed
    }
  }
  // [/excerpt:splice]

  // [excerpt:send-zc]
  // --send-zc: the file goes through the connection's buffer, and the socket takes the buffer's pages themselves
  // (IORING_OP_SEND_ZC) instead of a copy. Each zero-copy send completes twice: first with the bytes sent
  // (IORING_CQE_F_MORE: more to come), then with IORING_CQE_F_NOTIF once the network stack has let go of the pages.
  // Until then the buffer must not change, so a response ends, and the buffer is read into again, only when every
  // notification is in (on a real network that is when the client has acknowledged the bytes):
  //
  //   +-> read file -> buffer at `offset` ------------- 0 (the file shrank), error ---> CLOSING
  //   |     | n bytes
  //   |     v
  //   |   send_zc the buffer ------------------------- short: send_zc the rest at once (those bytes do not change)
  //   |     | all n sent
  //   |     v
  //   +-- every notification in; left > 0   (left == 0: the response is sent)
  //
  // A client that stops reading acknowledges nothing, so no notification comes, and no operation is in flight:
  // SENDING's deadline, from the last progress, resets the connection (on_deadline), and the notifications follow.
  // Copies: one (page cache -> buffer), where splice makes none; what it saves is the copy into the socket, on a
  // network card that can send from the pages. Over loopback the kernel copies them anyway when it delivers them to
  // the receiving socket (every notification says so: IORING_NOTIF_USAGE_ZC_COPIED, measured on 6.18), so there this
  // mode only adds the read.
  void send_file_zc(Conn& c) {
    Outgoing& out = c.x->out;
    if (c.zc_sent < c.zc_filled) {
      io_uring_sqe* sqe = ring_.get_sqe();
      io_uring_prep_send_zc(sqe, c.fd, c.zc_buffer.get() + c.zc_sent, c.zc_filled - c.zc_sent, MSG_NOSIGNAL, 0);
      direct(sqe);
      ++c.zc_notifs;
      return tag(sqe, Op::kSendZc, &c);
    }
    if (c.zc_notifs > 0) return;  // all sent, but the kernel may still read the buffer: the last notification calls
    if (!c.zc_buffer) c.zc_buffer = std::make_unique<char[]>(kZcBufferSize);
    io_uring_sqe* sqe = ring_.get_sqe();
    auto count = static_cast<unsigned>(std::min<off_t>(out.left, kZcBufferSize));
    io_uring_prep_read(sqe, out.file.get(), c.zc_buffer.get(), count, static_cast<std::uint64_t>(out.offset));
    tag(sqe, Op::kFileToBuffer, &c);
  }

  // A notification came (dispatch counted it): the last one lets the buffer change, or the slot go (release).
  void notified(Conn& c) {
    if (c.state == State::kClosing) return c.in_flight == 0 ? release(c) : void();
    if (c.zc_notifs == 0) send_more(c);
  }
  // [/excerpt:send-zc]

  // [excerpt:lingering]
  // The graceful end of a connection we do not keep (common/closing.hpp): our FIN goes out behind the response, and
  // LINGERING reads and throws away what comes until the client's EOF or a bound, so that unread client bytes never
  // turn the close into an RST that destroys the response. shutdown() is a plain system call: it never blocks, its
  // answer decides the next state now, and IORING_OP_SHUTDOWN would run in a kernel worker thread (io-wq; on 6.18).
  void linger(Conn& c) {
    c.state = State::kLingering;
    c.x->lingering = Lingering(Clock::now());
    timers_.add(c.x->lingering.deadline(), Timer{Timer::kLinger, c.slot, c.generation});
    if (features.fixed_files) return shutdown_direct(c);  // no descriptor to call shutdown() on
    if (!shutdown_writing(c.fd)) return close_conn(c);  // ENOTCONN: the client reset it; nothing to wait for
    arm_recv(c);  // take_buffer() gives its buffers straight back
  }

  // --fixed-files: no descriptor to call shutdown() on, so IORING_OP_SHUTDOWN, which runs in a kernel worker thread.
  // The reading need not wait for it; its failure closes the connection (kShutdown in dispatch).
  void shutdown_direct(Conn& c) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_shutdown(sqe, c.fd, SHUT_WR);
    direct(sqe);
    tag(sqe, Op::kShutdown, &c);
    arm_recv(c);
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
    if (c.receiving) cancel(c, Op::kRecv);  // --multishot-recv: it outlives every state; end it
    if (c.in_flight == 0) release(c);  // otherwise the last CQE of the connection releases it (see dispatch)
  }

  void release(Conn& c) {
    if (c.zc_notifs > 0) return close_before_notifications(c);  // --send-zc
    close_socket(c.fd, c.reset);  // by the ownership rule no operation can still use this fd
    c.fd = -1;
    c.reset = false;
    c.state = State::kFree;
    c.generation = (c.generation + 1) & kGenerationMask;  // its heap entries and late CQEs are now stale
    c.x.reset();  // frees the buffers and closes the file of a response cut short
    c.receiving = c.read_ended = false;  // the flags' state (their CQEs came while CLOSING)
    c.pipe_rd.reset();                  // --splice: the pipe, with whatever it still held
    c.pipe_wr.reset();
    c.piped = 0;  // left stale, the slot's next connection would splice from its new, empty pipe, and wait forever
    c.zc_buffer.reset();
    c.zc_filled = c.zc_sent = 0;
    free_.push_back(c.slot);
    --live_;
  }

  // A plain ::close(), not IORING_OP_CLOSE (see Conn). `reset`: SO_LINGER {1, 0} first, so the close sends an RST.
  void close_socket(int fd, bool reset = false) {
    if (fd < 0) return;  // --send-zc: closed already, before the notifications (see close_before_notifications)
    if (features.fixed_files) return close_direct(fd, reset);
    if (reset) reset_connection(fd);
    ::close(fd);
    restore_spare();  // if a shed lost the spare (net.hpp), it takes the number just freed
  }

  // --send-zc: zero-copy sends whose notifications are missing mean the network stack still holds pages of
  // zc_buffer, for bytes the client has not acknowledged, and would hold them as long as the client does not read.
  // A reset drops those bytes, and the notifications follow; the last one frees the slot (see notified).
  void close_before_notifications(Conn& c) {
    close_socket(c.fd, true);
    c.fd = -1;
  }

  // --fixed-files: a registered file is closed by the ring (IORING_OP_CLOSE on its index), which frees the entry for
  // a new accept. Its reset cannot be SO_LINGER: setsockopt() needs a descriptor (io_uring's own setsockopt command
  // needs Linux 6.7 and liburing 2.5). connect() to AF_UNSPEC, which the ring can run on a registered file, resets a
  // TCP connection the same way: both end in the kernel's tcp_disconnect(), which sends the RST.
  void close_direct(int fd, bool reset) {
    io_uring_sqe* sqe = ring_.get_sqe(2);
    if (reset) {
      io_uring_prep_connect(sqe, fd, &kDisconnect, sizeof kDisconnect);
      sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;  // the close below waits for it, whatever its result
      tag(sqe, Op::kClose);
      sqe = ring_.get_sqe();
    }
    io_uring_prep_close_direct(sqe, static_cast<unsigned>(fd));
    tag(sqe, Op::kClose);
  }

  // [excerpt:fixed-files]
  // --fixed-files: an empty table of registered files, which the accepts fill (the kernel refuses a table larger than
  // RLIMIT_NOFILE). A full table fails the accept with -ENFILE, as a full descriptor table does.
  void register_files() {
    rlimit fds{};
    ::getrlimit(RLIMIT_NOFILE, &fds);
    if (int r = io_uring_register_files_sparse(&ring_.ring, std::min<rlim_t>(fds.rlim_cur, 65536)); r < 0)
      fail_startup(std::string("--fixed-files: the kernel refused a sparse table of registered files (") +
                   std::strerror(-r) + "; it needs Linux 5.19)");
  }
  // [/excerpt:fixed-files]

  // [excerpt:multishot-recv]
  // --multishot-recv: the loop's ring of provided buffers, the one main.cpp's recvs read into (common/uring.hpp's
  // BufferRing), with kMultishotBufferCount buffers, and one recv per connection that the kernel completes for every
  // read: each CQE names the buffer it filled, take_buffer() copies the bytes into the connection's Exchange and
  // gives the buffer back at once, so the ring is full again whenever the loop has caught up.

  // READING or LINGERING: the multishot recv, armed once; a stop or a deadline cancels it as `op`, as main.cpp's.
  void arm_multishot_recv(Conn& c) {
    if (c.read_ended) return close_conn(c);  // the client is gone, or sends no more: no request can complete
    c.op = Op::kRecv;
    if (c.receiving) return;  // its next CQE brings the bytes
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_recv_multishot(sqe, c.fd, nullptr, 0, 0);  // no buffer of ours: the kernel picks one of the ring's
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    if (features.recv_cap) sqe->file_index = kMaxBuffered;  // `optlen` in newer headers: end after this many bytes
    direct(sqe);
    tag(sqe, Op::kRecv, &c);
    c.receiving = true;
  }

  // A CQE of the multishot recv that is not its last (IORING_CQE_F_MORE): nothing to do once the connection ends.
  void received_more(Conn& c, int res, unsigned flags) {
    if (c.state != State::kClosing) on_received(c, res, flags);
  }

  // The multishot recv stays armed in every state, so a keep-alive connection costs no SQE per request to read. Bytes
  // that come while the connection is WAITING or SENDING are pipelined requests: they wait in x->in, which the parser
  // reads once the response is out, as in main.cpp. But the kernel reads a socket as fast as bytes come, into the
  // loop's buffers, and a client that pipelines without reading the answers would fill `in` without end. Two bounds:
  // - From Linux 6.17 the recv ends by itself after kMaxBuffered bytes (recv_cap), and arm_recv() re-arms it only
  //   in READING, once `in` is used up: the socket's receive buffer then fills and TCP slows the client down.
  // - Before, we cancel it once `in` holds more than kMaxBuffered. The cancel lands late: the CQEs the kernel has
  //   posted by then, up to a whole socket receive buffer (~160 KiB per client measured on 6.18), are kept.
  // The recv ends (no IORING_CQE_F_MORE) with EOF or an error; with -ENOBUFS, when the buffer ring was empty; with
  // -ECANCELED, after that pause; at the cap; or when the kernel chooses. arm_recv() re-arms it whenever it is needed
  // again; after -ENOBUFS at once, since take_buffer() has given back the buffers of the CQEs before this one.
  void on_received(Conn& c, int res, unsigned flags) {
    if (!(flags & IORING_CQE_F_MORE)) c.receiving = false;
    bool paused = res == -ENOBUFS || res == -ECANCELED || res == -EAGAIN;  // -EAGAIN: see on_sent
    if (res == 0 || (res < 0 && !paused)) c.read_ended = true;
    if (c.state == State::kLingering) return paused ? arm_recv(c) : discard(c, res);
    if (c.state != State::kReading) {
      if (c.receiving && c.x->in.size() > kMaxBuffered) cancel(c, Op::kRecv);
      return;
    }
    if (res > 0) return process(c);  // the bytes are in the Exchange (take_buffer)
    arm_recv(c);
  }
  // [/excerpt:multishot-recv]
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

const std::vector<ExtraFlag> kFlags = {
    {"--defer-taskrun", nullptr, "SINGLE_ISSUER + DEFER_TASKRUN rings (Linux 6.1)"},
    {"--sqpoll", "MS", "a kernel thread submits, and sleeps after MS idle ms (its CPU is the server's)"},
    {"--attach-wq", nullptr, "the rings share one pool of kernel workers (and one SQPOLL thread)"},
    {"--multishot-accept", nullptr, "one accept SQE for all the connections of a listener (Linux 5.19)"},
    {"--multishot-recv", nullptr, "one recv SQE per connection, into a ring of provided buffers (Linux 6.0)"},
    {"--fixed-files", nullptr, "registered (direct) descriptors for the connections (Linux 5.19); sets --splice"},
    {"--splice", nullptr, "with --root: files by two splices in kernel workers, not sendfile(); else no effect"},
    {"--send-zc", nullptr, "with --root: files by read + zero-copy send, not sendfile() (Linux 6.0); else no effect"},
    kProcessesFlag,
};
const Model kModel{"06-io_uring-advanced", default_thread_count(), "", kFlags};

// The flags of kFlags, checked. A bad value or combination: a sentence and the usage, exit 2.
Features features_or_exit(const Options& opts) {
  Features f;
  auto given = [&](const char* name) { return opts.extra.count(name) > 0; };
  f.defer_taskrun = given("--defer-taskrun");
  f.attach_wq = given("--attach-wq");
  f.multishot_accept = given("--multishot-accept");
  f.multishot_recv = given("--multishot-recv");
  f.fixed_files = given("--fixed-files");
  f.send_zc = given("--send-zc");
  f.splice = given("--splice") || (f.fixed_files && !f.send_zc);
  if (given("--sqpoll")) {
    const std::string& ms = opts.extra.at("--sqpoll");
    char* end = nullptr;
    long v = std::strtol(ms.c_str(), &end, 10);
    if (ms.empty() || *end != '\0' || v < 1 || v > 60'000)
      usage_error(kModel, "--sqpoll takes the idle time in milliseconds, from 1 to 60000, not '" + ms + "'");
    f.sqpoll_idle_ms = static_cast<unsigned>(v);
  }
  // The SQPOLL thread runs the task work itself: the kernel refuses DEFER_TASKRUN with it.
  if (f.defer_taskrun && f.sqpoll_idle_ms > 0)
    usage_error(kModel, "--defer-taskrun and --sqpoll do not combine: the SQPOLL thread completes the operations");
  if (f.splice && f.send_zc) usage_error(kModel, "--splice and --send-zc are two ways to send a file: choose one");
  return f;
}

// [excerpt:probes]
// Whether the kernel knows a flag of an old opcode, which the opcode probe cannot tell: on a descriptor that is
// not a socket (an eventfd), a kernel that knows the flag fails the operation with -ENOTSOCK when it runs it; an
// older kernel refuses the unknown flag with -EINVAL before that.
bool kernel_knows(void (*prep)(io_uring_sqe* sqe, int fd)) {
  io_uring ring;
  if (io_uring_queue_init(2, &ring, 0) < 0) return true;  // no io_uring at all: the first Loop will say so
  Fd not_a_socket(::eventfd(0, EFD_CLOEXEC));
  prep(io_uring_get_sqe(&ring), not_a_socket.get());
  io_uring_cqe* cqe;
  int res = io_uring_submit_and_wait(&ring, 1) == 1 && io_uring_peek_cqe(&ring, &cqe) == 0 ? cqe->res : -EINVAL;
  io_uring_queue_exit(&ring);
  return res != -EINVAL;
}

// The flags' run-time probes that no ring setup makes: one sentence and exit 1 if the kernel lacks a feature, and
// what the kernel offers beyond it (recv_cap).
void probe_or_exit(Features& f) {
  if (f.multishot_accept && !kernel_knows([](io_uring_sqe* sqe, int fd) {
        io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, 0);
      }))
    fail_startup("--multishot-accept: the kernel refused IORING_ACCEPT_MULTISHOT (EINVAL; it needs Linux 5.19)");
  if (f.multishot_recv && !kernel_knows([](io_uring_sqe* sqe, int fd) {
        io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = kBufferGroup;
      }))
    fail_startup("--multishot-recv: the kernel refused IORING_RECV_MULTISHOT (EINVAL; it needs Linux 6.0)");
  f.recv_cap = f.multishot_recv && kernel_knows([](io_uring_sqe* sqe, int fd) {
                  io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
                  sqe->flags |= IOSQE_BUFFER_SELECT;
                  sqe->file_index = kMaxBuffered;  // older kernels refuse it: EINVAL
                });
  if (f.send_zc) {  // a new opcode: the opcode probe knows
    io_uring_probe* probe = io_uring_get_probe();  // nullptr without io_uring: the first Loop will say so
    bool missing = probe && !io_uring_opcode_supported(probe, IORING_OP_SEND_ZC);
    io_uring_free_probe(probe);
    if (missing) fail_startup("--send-zc: the kernel lacks IORING_OP_SEND_ZC (it needs Linux 6.0)");
  }
}
// [/excerpt:probes]
}  // namespace

int main(int argc, char** argv) {
  const Model& model = kModel;
  const Options opts = options_or_exit(argc, argv, model);
  features = features_or_exit(opts);
  probe_or_exit(features);
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
