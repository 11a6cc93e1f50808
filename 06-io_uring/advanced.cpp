// 06-io_uring/advanced.cpp: main.cpp's event loops, plus the io_uring features that make servers like it fast,
// each behind its own flag and probed at run time.
//
// Why two programs: main.cpp is the chapter's lesson, one plain batched completion loop. The features below are what
// public io_uring servers advertise; each changes one thing, but together they would bury that loop. So they live
// here, in a program that keeps main.cpp's names, states and order. Without flags it serves the same HTTP, ends
// connections the same way (common/closing.hpp) and keeps the same deadlines, but it is not main.cpp line for
// line: it bounds its recvs and sends with a linked timeout each (main.cpp keeps its deadlines in a heap, the
// cheaper way: docs/06), and with --root it sends files by splice through a pipe (main.cpp: sendfile()).
//
//   --defer-taskrun     SINGLE_ISSUER + DEFER_TASKRUN (6.1; else COOP_TASKRUN, 5.19): the kernel finishes the
//                       loop's operations when the loop waits for them, instead of interrupting it to do so
//   --sqpoll MS         a kernel thread takes SQEs as they are queued (5.11): the loop makes a system call only to
//                       wait, or to wake that thread once it has slept after MS idle milliseconds
//   --attach-wq         the rings share the first ring's kernel workers (io-wq), and its SQPOLL thread if any
//   --multishot-accept  one accept SQE per listener completes once for every new connection (5.19)
//   --multishot-recv    one recv SQE per connection completes for every read, into buffers the loop provides (6.0)
//   --fixed-files       connections get registered ("direct") descriptors, which the kernel finds without looking
//                       them up in the process's descriptor table on every operation (5.19)
//   --send-zc           with --root, a file goes file -> buffer -> zero-copy send (IORING_OP_SEND_ZC, 6.0)
//                       instead of through a pipe with splice; without --root it changes nothing
//
// Needs:  Linux 5.7 or later with io_uring allowed (each flag says what more it needs), liburing 2.3 or later,
//         g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server_advanced advanced.cpp -luring
// Run:    ./run_server_advanced --defer-taskrun      (--help lists the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../common/closing.hpp"
#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/response.hpp"
#include "../common/uring.hpp"

namespace {

constexpr unsigned kRingEntries = 1024;  // SQ slots: get_sqe() submits when they are all taken
// CQ slots: a turn brings up to two CQEs per busy connection (an op and its linked timeout), so 8192 (128 KiB) hold
// 4,000 of them, where the default (twice the SQ) holds 1,000. Past that: an overflow list (see get_sqe).
constexpr unsigned kCqEntries = 8 * kRingEntries;
constexpr std::size_t kRecvChunk = 4096;  // as in recv_into(): a buffer never grows far past the 8 KiB head limit
constexpr std::chrono::milliseconds kAcceptBackoff{10};  // pause after a failed accept (see arm_listen_wait)
constexpr off_t kSpliceMax = 1 << 30;  // the most one file splice asks for; the kernel moves what fits in the pipe
constexpr int kPipeSize = 1 << 20;  // not the default 64 KiB: wrk -c100 then fetched a 1 MB file ~1.5x as often
// --multishot-recv: the loop's provided buffers, and how much a connection may buffer while it answers (pipelined
// requests) before its recv is paused. A loop turn needs one buffer per connection that sent something: with 256,
// wrk -c300 met an empty ring (-ENOBUFS) on 4 % of its requests; with 1024, none up to -c1000.
constexpr unsigned kBufferCount = 1024;  // a power of two, as a buffer ring requires
constexpr std::size_t kBufferSize = 2048;
constexpr int kBufferGroup = 0;
constexpr std::size_t kMaxBuffered = 64 * 1024;
constexpr unsigned kZcBufferSize = 256 * 1024;  // --send-zc: a connection's file buffer, made for its first file
constexpr sockaddr kDisconnect{AF_UNSPEC, {}};  // --fixed-files: connect() to it resets a connection (close_socket)

// The advanced options, from the command line (see the header and features_or_exit). All are off by default.
struct Features {
  bool defer_taskrun = false;
  bool coop_taskrun = false;    // --defer-taskrun's fallback, chosen by the first Loop if the kernel refuses it
  unsigned sqpoll_idle_ms = 0;  // --sqpoll MS; 0: no SQPOLL thread
  bool attach_wq = false;
  bool multishot_accept = false;
  bool multishot_recv = false;
  bool fixed_files = false;
  bool send_zc = false;
};

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
  kNone, kAccept, kBackoff, kListenReady, kStop, kGrace, kCancel, kClose,  // the loop's and the listener's
  kRecv, kDeadline, kTimer, kSend, kFileToPipe, kPipeToSocket, kWritable,  // a connection's
  kDeadlineTimer, kFileToBuffer, kSendZc, kShutdown,  // (the deadline timer; --send-zc; --fixed-files' shutdown)
};

constexpr std::uint32_t kGenerationMask = 0xFFFFFF;

constexpr std::uint64_t encode(Op op, std::uint32_t generation = 0, std::uint32_t slot = 0) {
  return std::uint64_t(op) << 56 | std::uint64_t(generation & kGenerationMask) << 32 | slot;
}

struct Tag {
  Op op;
  std::uint32_t generation;
  std::uint32_t slot;
};

constexpr Tag decode(std::uint64_t data) {
  return {static_cast<Op>(data >> 56), static_cast<std::uint32_t>(data >> 32) & kGenerationMask,
          static_cast<std::uint32_t>(data)};
}
// [/excerpt:user-data]

// [excerpt:connection]
// One connection's life. Each state has one operation (chain) in flight, whose completion moves it on:
//
//      accept
//        |
//        v      recv + linked request deadline
//     READING ------------- EOF, error, a stop ------------------------------------------------+
//        |  \______________ the request deadline passed (-ECANCELED) ------------------ reset --+
//        | bytes arrived                                                                       |
//        v                                                                                     |
//   +--> parse the buffer --- incomplete ---> READING                                          |
//   |    |       |                                                                             |
//   |    |       +--- malformed ---> SENDING refuse(4xx), then LINGERING                       |
//   |    | a whole request                                                                     |
//   |    v                                                                                     |
//   |  WAITING   IORING_OP_TIMEOUT: the simulated handler (--delay-us)                         |
//   |    | -ETIME: it fired; out = respond(request)                                            |
//   |    v                                                                                     |
//   |  SENDING   the head, then the file (see send_more) ---- error, idle timeout ---- reset --+
//   |    | all sent, keep-alive:      | all sent, not keep-alive (or a stop):                  |
//   +----+ a new request deadline     v shutdown(SHUT_WR)                                      |
//                                  LINGERING   recv + linked lingering deadline, the bytes     |
//                                     |        thrown away (see linger)                        |
//                                     +------- EOF, error, the deadline, kLingerMaxBytes ------+
//                                                                                              v
//                                                      once in_flight == 0: ::close(fd) <-- CLOSING
//                         (a reset sets SO_LINGER {1, 0} first), slot freed, generation + 1
//
// A stop: READING connections close at once, the others go on, and what is still open after kStopGrace is reset
// (cancel_and_close). A reset makes the close send an RST, not a FIN: the ways to end are in common/closing.hpp.
//
// --multishot-recv changes READING and LINGERING: its recv, once armed, stays armed through every state, and their
// deadlines are a timer of its own (see on_received). --send-zc changes how SENDING sends a file (send_file_zc).
//
// Ownership: the Loop owns every Conn, one unique_ptr per slot, so a Conn never moves while the kernel holds
// pointers into it. From the moment an SQE of the connection is queued until its CQE is reaped, the kernel may
// write `chunk` or read `out.head`, and uses its descriptors; in_flight counts those SQEs (+1 queued, -1 when the
// last CQE is reaped: a multishot recv completes several times, with IORING_CQE_F_MORE on all CQEs but its last).
// A connection's fd is closed only once it is CLOSING and in_flight is 0, and its slot is reused only once no
// zero-copy send holds `zc_buffer` either (zc_notifs is 0: see send_file_zc). So a completion never finds its
// buffer freed or its slot reused; the generation check in dispatch() is a second line of defence.
//
// We close with a plain ::close(fd), not IORING_OP_CLOSE: by the rule above nothing of the connection is in
// flight any more, and closing a socket does not block (the FIN goes out in the background). IORING_OP_CLOSE
// would save that system call but add one more completion to wait for before the slot could be reused.
// (--fixed-files: a registered file has no descriptor to close(); there the ring closes it, see close_socket.)
enum class State { kFree, kReading, kWaiting, kSending, kLingering, kClosing };

// How close_conn() ends a connection: a plain close (FIN), or a reset (RST) for one that timed out, whose send
// failed, or that outlived the stop's grace (common/closing.hpp).
enum class End { kClose, kReset };

struct Conn {
  std::uint32_t slot = 0;        // index in Loop::conns_, fixed for the Conn's whole life
  std::uint32_t generation = 0;  // bumped when the slot is freed
  int fd = -1;
  State state = State::kFree;
  Op op = Op::kNone;  // the operation whose CQE moves the state on: the one a stop cancels
  int in_flight = 0;  // SQEs queued for this connection whose CQE has not been reaped yet
  std::string in;     // bytes received and not yet answered; may hold several pipelined requests
  std::array<char, kRecvChunk> chunk;  // where the kernel writes a recv: lives as long as the Conn, never the stack
  __kernel_timespec deadline{};        // READING, LINGERING: when to stop waiting for input (absolute; arm_recv)
                                       // (--send-zc: for notifications, see send_file_zc)
  http::Request request;               // WAITING: the request the timer runs for
  std::size_t request_length = 0;      // bytes of `in` to drop once it is answered
  Outgoing out;                        // SENDING: the response (common/response.hpp)
  Lingering lingering;                 // LINGERING: bytes thrown away, and until when (common/closing.hpp)
  bool reset = false;                  // CLOSING: the close sends an RST (End::kReset)
  Fd pipe_rd, pipe_wr;                 // the pipe files go through: made for the first one, closed with the Conn
  std::size_t piped = 0;               // bytes of the file in the pipe, not yet spliced to the socket
  // --multishot-recv (see on_received):
  bool receiving = false;        // its multishot recv is armed (until the CQE without IORING_CQE_F_MORE)
  bool read_ended = false;       // that recv ended in EOF or an error: close once `in` holds no whole request
  bool deadline_armed = false;   // the deadline timer is in flight (also --send-zc's: see arm_deadline)
  __kernel_timespec timer_at{};  // when that timer fires
  // --send-zc (see send_file_zc):
  std::unique_ptr<char[]> zc_buffer;  // kZcBufferSize bytes, made for the connection's first file
  std::size_t zc_filled = 0;          // bytes of the file read into it
  std::size_t zc_sent = 0;            // ... and sent from it
  int zc_notifs = 0;                  // zero-copy sends that may still read it (until their IORING_CQE_F_NOTIF):
                                      // not in in_flight, as they no longer use the socket
};
// [/excerpt:connection]

// --send-zc, SENDING: every byte of the buffer is sent, and the connection waits for notifications alone.
bool awaits_notifications(const Conn& c) {
  return c.state == State::kSending && c.zc_notifs > 0 && c.zc_sent == c.zc_filled;
}

// Whether c.deadline is the connection's deadline now, for the deadline timer (see arm_deadline).
bool has_deadline(const Conn& c) {
  return c.state == State::kReading || c.state == State::kLingering || awaits_notifications(c);
}

// One sentence on a ring that could not be created with `flags`: io_uring itself, or one of the flags' options.
std::string setup_refused(int error, unsigned flags) {
  io_uring_params params{};
  params.flags = IORING_SETUP_CQSIZE;  // what every ring of ours asks for (see kCqEntries); it came in 5.5
  params.cq_entries = kCqEntries;
  io_uring plain;
  int r = io_uring_queue_init_params(8, &plain, &params);
  if (r == -EINVAL) return "io_uring is unavailable: this kernel is older than 5.7 (it refused IORING_SETUP_CQSIZE)";
  if (flags == IORING_SETUP_CQSIZE || r < 0) return unavailable(r < 0 ? -r : error);
  io_uring_queue_exit(&plain);
  std::string names;
  if (flags & IORING_SETUP_SQPOLL) names += " --sqpoll (IORING_SETUP_SQPOLL)";
  if (flags & IORING_SETUP_ATTACH_WQ) names += " --attach-wq (IORING_SETUP_ATTACH_WQ)";
  if (flags & IORING_SETUP_DEFER_TASKRUN) names += " --defer-taskrun (IORING_SETUP_DEFER_TASKRUN)";
  if (flags & IORING_SETUP_COOP_TASKRUN) names += " --defer-taskrun (its fallback IORING_SETUP_COOP_TASKRUN)";
  return "the kernel refused a ring with" + names + ": " + std::strerror(error);
}

// One event loop: a ring, a listener, and the connections it accepted. Used by one thread only.
class Loop {
 public:
  // Creating the ring is also the probe: the first Loop fails with one sentence if io_uring, or a flag's setup
  // option, cannot be used. `attach_to`: the first ring's descriptor, for --attach-wq (-1: none).
  Loop(const Options& opts, Features& features, int attach_to)
      : opts_(opts), f_(features), delay_(to_kernel_timespec(opts.delay)),
        idle_(to_kernel_timespec(opts.idle_timeout)), grace_(to_kernel_timespec(kStopGrace)),
        backoff_(to_kernel_timespec(kAcceptBackoff)) {
    io_uring_params params = setup(attach_to);
    int r = io_uring_queue_init_params(kRingEntries, &ring_, &params);
    if (r == -EINVAL && f_.defer_taskrun) {  // before Linux 6.1
      std::fputs("--defer-taskrun: the kernel refused IORING_SETUP_DEFER_TASKRUN (EINVAL); "
                 "using IORING_SETUP_COOP_TASKRUN instead\n", stderr);
      features.defer_taskrun = false;  // for the other Loops too
      features.coop_taskrun = true;
      params = setup(attach_to);
      r = io_uring_queue_init_params(kRingEntries, &ring_, &params);
    }
    if (r < 0) fail_startup(setup_refused(-r, params.flags));
    // Without FAST_POLL (5.7) every recv would park a kernel worker thread instead of waiting on the socket.
    if (!(params.features & IORING_FEAT_FAST_POLL))
      fail_startup("io_uring is unavailable: this kernel is older than 5.7 (no IORING_FEAT_FAST_POLL)");
    if (f_.sqpoll_idle_ms > 0 && !(params.features & IORING_FEAT_SQPOLL_NONFIXED))
      fail_startup("--sqpoll: this kernel's SQPOLL thread takes registered files only (before Linux 5.11)");
    if (f_.fixed_files) register_files();
    if (f_.multishot_recv) provide_buffers();
  }
  ~Loop() {
    io_uring_queue_exit(&ring_);
    if (buffer_ring_) ::munmap(buffer_ring_, kBufferCount * sizeof(io_uring_buf));
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  void run(Fd listener);
  int ring_fd() const { return ring_.ring_fd; }

 private:
  io_uring_params setup(int attach_to) const;
  io_uring_sqe* get_sqe(unsigned count = 1);
  void reap();
  void tag(io_uring_sqe* sqe, Op op, Conn* c = nullptr);
  void tag_with_timeout(io_uring_sqe* sqe, Op op, Conn& c, __kernel_timespec& when, unsigned flags = 0);
  void dispatch(std::uint64_t user_data, int res, unsigned flags);
  void register_files();
  void direct(io_uring_sqe* sqe) const;
  void provide_buffers();
  void take_buffer(Conn* c, int res, unsigned flags);
  void on_received(Conn& c, int res, unsigned flags);
  void arm_deadline(Conn& c);
  void cancel(Conn& c, Op op);
  void close_socket(int fd, bool reset = false);
  void arm_accept();
  void arm_listen_wait(Op op);
  void on_accept(int res, unsigned flags);
  void on_stop();
  void open_conn(int fd);
  void process(Conn& c);
  void arm_recv(Conn& c);
  void answer(Conn& c);
  void send_more(Conn& c);
  void send_file_zc(Conn& c);
  void on_sent(Conn& c, Op op, int res);
  void response_sent(Conn& c);
  void linger(Conn& c);
  void discard(Conn& c, int res);
  void cancel_and_close(Conn& c, End end = End::kClose);
  void close_conn(Conn& c, End end = End::kClose);
  void release(Conn& c);

  const Options& opts_;
  const Features& f_;
  // The kernel reads a timespec when it takes the SQE (with SQPOLL: at any time before the CQE), so these live in
  // the Loop, which outlives every operation; one copy serves every connection, as the values are the same.
  __kernel_timespec delay_, idle_, grace_, backoff_;
  io_uring ring_{};
  Fd listener_;
  Op listen_op_ = Op::kNone;  // the one operation in flight for the listener: kAccept, kBackoff or kListenReady
  bool stopping_ = false;
  std::vector<std::unique_ptr<Conn>> conns_;  // the slot table: index = slot
  std::vector<std::uint32_t> free_;           // free slots, reused last-in first-out
  std::size_t live_ = 0;                      // slots in use
  io_uring_buf_ring* buffer_ring_ = nullptr;  // --multishot-recv: the ring of buffers the kernel reads into
  std::vector<char> buffers_;                 // ... and the buffers, kBufferCount x kBufferSize
  struct Completion {
    std::uint64_t user_data;
    int res;
    unsigned flags;  // IORING_CQE_F_MORE: the SQE will complete again (multishot); IORING_CQE_F_BUFFER...
  };
  std::vector<Completion> batch_;  // CQEs reaped and not yet dispatched (see run and get_sqe)
};

// [excerpt:setup]
// The ring's setup options for the flags.
io_uring_params Loop::setup(int attach_to) const {
  io_uring_params params{};
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = kCqEntries;
  if (f_.sqpoll_idle_ms > 0) {
    params.flags |= IORING_SETUP_SQPOLL;
    params.sq_thread_idle = f_.sqpoll_idle_ms;
  }
  if (attach_to >= 0) {  // the io-wq workers (splice runs there) and, with SQPOLL, ONE SQPOLL thread for all rings
    params.flags |= IORING_SETUP_ATTACH_WQ;
    params.wq_fd = static_cast<unsigned>(attach_to);
  }
  // SINGLE_ISSUER promises the kernel that one thread only submits to this ring: true here, with one ring per
  // thread, and what DEFER_TASKRUN requires. The kernel takes the thread that enables the ring as that issuer, so
  // main() creates it disabled (R_DISABLED) and run() enables it, in the loop's own thread.
  if (f_.defer_taskrun)
    params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
  if (f_.coop_taskrun) params.flags |= IORING_SETUP_COOP_TASKRUN;
  return params;
}
// [/excerpt:setup]

// [excerpt:fixed-files]
// --fixed-files: an empty table of registered files, which the accepts fill (the kernel refuses a table larger than
// RLIMIT_NOFILE). A full table fails the accept with -ENFILE, as a full descriptor table does.
void Loop::register_files() {
  rlimit fds{};
  ::getrlimit(RLIMIT_NOFILE, &fds);
  if (int r = io_uring_register_files_sparse(&ring_, std::min<rlim_t>(fds.rlim_cur, 65536)); r < 0)
    fail_startup(std::string("--fixed-files: the kernel refused a sparse table of registered files (") +
                 std::strerror(-r) + "; it needs Linux 5.19)");
}

// A connection's `fd` is then an index in that table, not a descriptor: every SQE that names it says so.
void Loop::direct(io_uring_sqe* sqe) const {
  if (f_.fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
}
// [/excerpt:fixed-files]

// [excerpt:get-sqe]
// A free SQE, for `count` entries queued back to back. When the submission queue is full we submit what is queued
// to make room, rather than dereference the NULL that io_uring_get_sqe() returns. `count` keeps a linked pair (an
// op and its deadline) in one submission: split across two, the link would end at the first entry.
// -EBUSY (5.x kernels): CQEs overflowed the CQ, and the kernel takes no SQE until we reap. reap() moves them to
// batch_, which run() dispatches once the handler that called us returns: never in the middle of a handler.
io_uring_sqe* Loop::get_sqe(unsigned count) {
  while (io_uring_sq_space_left(&ring_) < count) {
    if (io_uring_submit(&ring_) == -EBUSY) reap();  // other errors (-EINTR, -EAGAIN) are transient: retry
    if (f_.sqpoll_idle_ms > 0) {  // submitting only wakes the kernel thread, which (5.x) an overflow stops too
      reap();
      io_uring_sqring_wait(&ring_);  // until it takes some SQEs
    }
  }
  return io_uring_get_sqe(&ring_);
}

// Sets the SQE's user_data and, for a connection's SQE, counts it in flight until its CQE is reaped.
void Loop::tag(io_uring_sqe* sqe, Op op, Conn* c) {
  io_uring_sqe_set_data64(sqe, c ? encode(op, c->generation, c->slot) : encode(op));
  if (!c) return;
  ++c->in_flight;
  if (op != Op::kDeadline && op != Op::kDeadlineTimer && op != Op::kShutdown) c->op = op;
}
// [/excerpt:get-sqe]

// Tags `sqe` (from get_sqe(2)) and links a timeout to it: if `sqe` has not completed by `when`, the kernel cancels
// it (-ECANCELED). The kernel reads `when` as it takes the SQE, so `when` lives in the Conn or the Loop.
void Loop::tag_with_timeout(io_uring_sqe* sqe, Op op, Conn& c, __kernel_timespec& when, unsigned flags) {
  sqe->flags |= IOSQE_IO_LINK;
  tag(sqe, op, &c);
  io_uring_sqe* timeout = get_sqe();
  io_uring_prep_link_timeout(timeout, &when, flags);
  tag(timeout, Op::kDeadline, &c);
}

// [excerpt:loop-turn]
void Loop::run(Fd listener) {
  // --defer-taskrun: enabling the ring makes this thread its single issuer. (liburing 2.3 declares
  // io_uring_enable_rings() but does not export it, hence the system call.)
  if (f_.defer_taskrun && ::syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0))
    fail_startup(std::string("--defer-taskrun: cannot enable the ring: ") + std::strerror(errno));
  listener_ = std::move(listener);
  arm_accept();
  // The stop eventfd stays readable once a stop is requested, so a poll armed after the signal still fires.
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_poll_add(sqe, stop_fd(), POLLIN);
  tag(sqe, Op::kStop);

  while (!(stopping_ && listen_op_ == Op::kNone && live_ == 0)) {
    if (f_.sqpoll_idle_ms > 0) {  // the kernel thread submits: no system call unless it sleeps or we must wait
      io_uring_cqe* cqe;
      io_uring_submit(&ring_);
      io_uring_wait_cqe(&ring_, &cqe);
    } else {
      io_uring_submit_and_wait(&ring_, 1);  // -EINTR (a signal) is fine: the stop poll will report it
    }
    reap();
    for (std::size_t i = 0; i < batch_.size(); ++i) {  // (get_sqe may reap more during the turn: they come last)
      const Completion c = batch_[i];                  // a copy: the vector may grow under the handler
      dispatch(c.user_data, c.res, c.flags);
    }
    batch_.clear();
  }
  // Left in the ring: the grace timer and some cancel results, which point at nothing of ours. ~Loop() ends them.
}

// Copies the CQEs out and hands their slots back before any is handled: the handlers queue new work, whose CQEs
// need free slots.
void Loop::reap() {
  std::size_t before = batch_.size();
  unsigned head;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) batch_.push_back({cqe->user_data, cqe->res, cqe->flags});
  io_uring_cq_advance(&ring_, static_cast<unsigned>(batch_.size() - before));
}

void Loop::dispatch(std::uint64_t user_data, int res, unsigned flags) {
  Tag t = decode(user_data);
  switch (t.op) {
    case Op::kAccept: return on_accept(res, flags);
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
    case Op::kClose: return;   // a registered file's reset or close (see close_socket): nothing waits for it
    default: break;
  }
  bool stale = t.slot >= conns_.size() || conns_[t.slot]->generation != t.generation;  // see user_data
  if (flags & IORING_CQE_F_BUFFER) take_buffer(stale ? nullptr : conns_[t.slot].get(), res, flags);  // even stale
  if (stale) return;
  Conn& c = *conns_[t.slot];
  // An SQE is in flight until its last CQE (a multishot one carries IORING_CQE_F_MORE until then). A zero-copy
  // send stops using the socket at its first CQE; its notification, the last, is counted in zc_notifs alone.
  bool last = !(flags & IORING_CQE_F_MORE);
  if (t.op == Op::kSendZc ? !(flags & IORING_CQE_F_NOTIF) : last) --c.in_flight;
  if (t.op == Op::kSendZc && last) --c.zc_notifs;  // its notification (or a send that will have none)
  if (c.state == State::kClosing) {
    if (c.in_flight == 0) release(c);
    return;
  }
  switch (t.op) {
    case Op::kRecv:
      if (f_.multishot_recv) return on_received(c, res, flags);
      if (c.state == State::kLingering) return discard(c, res);
      // 0: EOF; <0: the client reset, ...; -ECANCELED: the request deadline passed, and the connection is reset
      // (a stop's cancel also ends the recv with -ECANCELED, but finds the connection CLOSING, above).
      if (res == -ECANCELED) return close_conn(c, End::kReset);
      if (res <= 0) return close_conn(c);
      c.in.append(c.chunk.data(), static_cast<std::size_t>(res));
      return process(c);
    case Op::kTimer:  // -ETIME is the normal end of a timeout; -ECANCELED means the stop grace ran out
      return res == -ETIME ? answer(c) : close_conn(c);
    case Op::kDeadline: return;  // -ECANCELED (its op completed first) or -ETIME (its op now ends -ECANCELED)
    case Op::kSendZc:  // the bytes sent (with IORING_CQE_F_MORE), then IORING_CQE_F_NOTIF: see send_file_zc
      if (flags & IORING_CQE_F_NOTIF) return c.zc_notifs == 0 ? send_more(c) : void();
      return on_sent(c, t.op, res);
    case Op::kDeadlineTimer:  // -ETIME: it fired; -ECANCELED: linger() wants it sooner. See arm_deadline
      c.deadline_armed = false;
      if (res == -ETIME && has_deadline(c) && std::tie(c.deadline.tv_sec, c.deadline.tv_nsec) <=
                                                  std::tie(c.timer_at.tv_sec, c.timer_at.tv_nsec))
        return cancel_and_close(c, c.state == State::kLingering ? End::kClose : End::kReset);  // it has passed
      if (f_.multishot_recv || awaits_notifications(c)) arm_deadline(c);
      return;
    case Op::kShutdown:  // --fixed-files' shutdown(SHUT_WR), see linger: on failure, close at once
      return res < 0 ? cancel_and_close(c) : void();
    default: return on_sent(c, t.op, res);
  }
}
// [/excerpt:loop-turn]

// [excerpt:accept]
// Accepted sockets are non-blocking for splice's sake (see send_more): io_uring's recv, send and poll wait for
// readiness themselves whatever the flag. The listener from listen_sockets() is O_NONBLOCK too. Recent kernels
// ignore that for IORING_OP_ACCEPT and wait (checked on 6.18); some 5.x kernels completed the accept with -EAGAIN
// at once, which takes the error path below: no spin either.
//
// --multishot-accept: one SQE accepts every connection, each CQE carrying IORING_CQE_F_MORE while it goes on.
// --fixed-files: the kernel puts the socket in a free entry of the registered table and answers its index
// (registered files have no close-on-exec: there is nothing to exec them into).
void Loop::arm_accept() {
  io_uring_sqe* sqe = get_sqe();
  int fd = listener_.get();
  if (f_.multishot_accept && f_.fixed_files)
    io_uring_prep_multishot_accept_direct(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK);
  else if (f_.multishot_accept)
    io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  else if (f_.fixed_files)  // - 1: liburing 2.3 adds 1 to any index (2.4 and later leave ALLOC as it is)
    io_uring_prep_accept_direct(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK, IORING_FILE_INDEX_ALLOC - 1);
  else
    io_uring_prep_accept(sqe, fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
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
void Loop::arm_listen_wait(Op op) {
  io_uring_sqe* sqe = get_sqe();
  if (op == Op::kBackoff)
    io_uring_prep_timeout(sqe, &backoff_, 0, 0);
  else
    io_uring_prep_poll_add(sqe, listener_.get(), POLLIN);
  tag(sqe, op);
  listen_op_ = op;
}

// A multishot accept ends (no IORING_CQE_F_MORE) after an error, a cancel, or when the kernel chooses (a full CQ):
// then it goes the way of a single accept, re-armed at once or after the backoff.
void Loop::on_accept(int res, unsigned flags) {
  bool more = flags & IORING_CQE_F_MORE;
  if (!more) listen_op_ = Op::kNone;
  if (res >= 0 && stopping_) close_socket(res);  // it slipped in before the cancel: we no longer take connections
  if (res >= 0 && !stopping_) open_conn(res);
  if (res == -EMFILE || res == -ENFILE) shed_pending_connection(listener_.get());  // common/net.hpp's policy
  if (more) return;
  if (stopping_) return listener_.reset();  // nothing references the listener any more: close it
  if (res >= 0) return arm_accept();
  arm_listen_wait(Op::kBackoff);  // any error (EMFILE, ECONNABORTED, ...): try again, never exit
}
// [/excerpt:accept]

// [excerpt:stop]
// Stop: no more accepts, idle (READING) connections close now, WAITING and SENDING ones finish their response and
// linger, LINGERING ones go on, and after kStopGrace whatever is left is reset. run() returns once all are closed.
void Loop::on_stop() {
  stopping_ = true;
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_cancel64(sqe, encode(listen_op_), 0);  // its CQE (-ECANCELED) then closes the listener
  tag(sqe, Op::kCancel);
  for (auto& c : conns_)
    if (c->state == State::kReading) cancel_and_close(*c);
  sqe = get_sqe();
  io_uring_prep_timeout(sqe, &grace_, 0, 0);
  tag(sqe, Op::kGrace);
}

// Cancels the connection's one operation; its CQE (and its timeout's) then find it CLOSING and release it.
void Loop::cancel_and_close(Conn& c, End end) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_cancel64(sqe, encode(c.op, c.generation, c.slot), 0);
  tag(sqe, Op::kCancel);
  close_conn(c, end);
}
// [/excerpt:stop]

void Loop::open_conn(int fd) {
  if (free_.empty()) {
    conns_.push_back(std::make_unique<Conn>());
    conns_.back()->slot = static_cast<std::uint32_t>(conns_.size() - 1);
    free_.push_back(conns_.back()->slot);
  }
  Conn& c = *conns_[free_.back()];
  free_.pop_back();
  c.fd = fd;
  c.deadline = monotonic_in(opts_.idle_timeout);  // the first request must be complete by then
  ++live_;
  arm_recv(c);
}

// [excerpt:protocol]
// The connection protocol: answer what is buffered; read more only when it holds no whole request.
void Loop::process(Conn& c) {
  http::Parse p = http::parse_request(c.in);
  if (p.status == http::Parse::kIncomplete) return stopping_ ? close_conn(c) : arm_recv(c);
  if (p.status == http::Parse::kError) {
    c.out = refuse(p.error);
    return send_more(c);
  }
  c.request = std::move(p.request);
  c.request_length = p.length;
  if (handler_needs_timer(opts_)) {
    c.state = State::kWaiting;
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_timeout(sqe, &delay_, 0, 0);  // relative, fires once
    tag(sqe, Op::kTimer, &c);
    return;
  }
  run_handler_here(opts_);  // --handler sleep or spin (or --delay-us 0): the whole loop waits, on purpose
  answer(c);
}

// A recv, linked to the request deadline: when it passes, the recv completes with -ECANCELED. The deadline is
// absolute (IORING_TIMEOUT_ABS, on CLOCK_MONOTONIC) and set once per request, when we start waiting for it, so all
// the recvs of one request share it: a client that dribbles its head a byte at a time (slowloris) is closed
// --idle-timeout seconds after it began, however often it sends. A relative timeout would restart at every byte.
// LINGERING reads the same way, to its own deadline, which each input moves (kLingerQuiet after the last).
void Loop::arm_recv(Conn& c) {
  if (c.state == State::kLingering)
    c.deadline = to_kernel_timespec(c.lingering.deadline().time_since_epoch());  // steady_clock: CLOCK_MONOTONIC
  else
    c.state = State::kReading;
  if (f_.multishot_recv) {
    if (c.read_ended) return close_conn(c);  // the client is gone, or sends no more: no request can complete
    if (!c.deadline_armed) arm_deadline(c);
    if (c.receiving) return;  // its next CQE brings the bytes
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_recv_multishot(sqe, c.fd, nullptr, 0, 0);  // no buffer of ours: the kernel picks one of the ring's
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    direct(sqe);
    tag(sqe, Op::kRecv, &c);
    c.receiving = true;
    return;
  }
  io_uring_sqe* sqe = get_sqe(2);
  io_uring_prep_recv(sqe, c.fd, c.chunk.data(), c.chunk.size(), 0);
  direct(sqe);
  tag_with_timeout(sqe, Op::kRecv, c, c.deadline, IORING_TIMEOUT_ABS);
}

// The handler is done: build the response and send it. A marked shortcut: with --root, respond() opens the file
// with a synchronous openat2() in the loop thread (quick from the dentry cache, but a cold disk stalls every
// connection of this loop); IORING_OP_OPENAT2 and IORING_OP_STATX would make that asynchronous too.
void Loop::answer(Conn& c) {
  c.out = respond(opts_, c.request);
  send_more(c);
}
// [/excerpt:protocol]

// [excerpt:send-file]
// SENDING: the head from memory, then the file through the connection's pipe. Each arrow is one operation:
//
//     send head + linked idle timeout ---- short send: send the rest
//       | all sent
//       v
//   +-> left == 0? --- yes ---> the response is sent: close, or wait for the next request
//   |     | no
//   |     v
//   |   splice file -> pipe at `offset` ------ 0 (the file shrank), error ---> CLOSING
//   |     | n bytes in the pipe
//   |     v
//   |   splice pipe -> socket ---------------- -EAGAIN ---> poll POLLOUT + linked idle timeout
//   |     | short: splice the rest  <------------------------ room again      (-ECANCELED: CLOSING)
//   +-----+ the pipe is empty
//
// splice() moves page references, not bytes: page cache -> pipe -> socket, never through user space (read() and
// send() would copy each byte twice). io_uring runs every splice in a kernel worker thread (io-wq), and two rules
// keep those workers from ever waiting on a client. The pipe is empty when we fill it, so the file splice never
// waits for room in it. The socket is non-blocking, so the socket splice takes what fits or fails with -EAGAIN,
// and we wait for room with a poll, under the same no-progress timeout as a send. (Into a blocking socket the
// splice would wait in its worker until the client had read it all, and a LINK_TIMEOUT could not end it: seen on
// 6.18.) The two splices are not linked: a chain goes on only if an operation moves all it was asked for, and the
// file splice moves what fits in the pipe, which would end the chain with -ECANCELED.
//
// main.cpp no longer does this: it sends files with sendfile() from the loop, which measured cheaper than two
// splices in io-wq workers (docs/06, "Serving files"). This program keeps the splice path, because --fixed-files
// needs it: a direct descriptor has no number that sendfile() could take, and a splice names it with
// IOSQE_FIXED_FILE. `benchmark.sh --mode files 06 06-io_uring-advanced` measures the two paths side by side.
//
// send_more() queues the next step from what is left: the head, then the bytes in the pipe, then the file.
void Loop::send_more(Conn& c) {
  c.state = State::kSending;
  Outgoing& out = c.out;
  if (out.done() && c.piped == 0 && c.zc_sent == c.zc_filled && c.zc_notifs == 0) return response_sent(c);
  if (f_.send_zc && out.head_sent == out.head.size()) return send_file_zc(c);
  if (!f_.send_zc && out.left > 0 && !c.pipe_wr.valid()) {  // the connection's first file (--send-zc: no pipe)
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return close_conn(c, End::kReset);  // out of descriptors: no response
    c.pipe_rd.reset(fds[0]);
    c.pipe_wr.reset(fds[1]);
    // Refused (EPERM) past fs.pipe-max-size, or once the user's pipes hold fs.pipe-user-pages-soft pages (16,384 by
    // default: 64 pipes of 1 MiB). Past that soft limit a new pipe even starts at 8 KiB, not 64 KiB, and stays so:
    // as uid 65534, 64 connections got 1 MiB and the next 36 got 8 KiB (root is exempt). More splices, no errors.
    ::fcntl(fds[1], F_SETPIPE_SZ, kPipeSize);
  }
  io_uring_sqe* sqe = get_sqe(2);  // 2: room for a linked timeout
  if (out.head_sent < out.head.size()) {
    int more = out.left > 0 ? MSG_MORE : 0;  // a file follows: the head may share a packet with its first bytes
    io_uring_prep_send(sqe, c.fd, out.head.data() + out.head_sent, out.head.size() - out.head_sent,
                       MSG_NOSIGNAL | more);
    direct(sqe);
    tag_with_timeout(sqe, Op::kSend, c, idle_);
  } else if (c.piped > 0) {
    io_uring_prep_splice(sqe, c.pipe_rd.get(), -1, c.fd, -1, static_cast<unsigned>(c.piped), 0);
    direct(sqe);  // IOSQE_FIXED_FILE names the output; the pipe, the input, is an ordinary descriptor
    tag(sqe, Op::kPipeToSocket, &c);
  } else {
    auto count = static_cast<unsigned>(std::min(out.left, kSpliceMax));
    io_uring_prep_splice(sqe, out.file.get(), out.offset, c.pipe_wr.get(), -1, count, 0);
    tag(sqe, Op::kFileToPipe, &c);
  }
}

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
//   |   send_zc the buffer + linked idle timeout ---- short: send_zc the rest at once (those bytes do not change)
//   |     | all n sent
//   |     v
//   +-- every notification in; left > 0   (left == 0: the response is sent)
//
// Copies: one (page cache -> buffer), where splice makes none; what it saves is the copy into the socket, on a
// network card that can send from the pages. Over loopback the kernel copies them anyway when it delivers them to
// the receiving socket (every notification says so: IORING_NOTIF_USAGE_ZC_COPIED, measured on 6.18), so there this
// mode only adds the read.
void Loop::send_file_zc(Conn& c) {
  Outgoing& out = c.out;
  if (c.zc_sent < c.zc_filled) {
    io_uring_sqe* sqe = get_sqe(2);
    io_uring_prep_send_zc(sqe, c.fd, c.zc_buffer.get() + c.zc_sent, c.zc_filled - c.zc_sent, MSG_NOSIGNAL, 0);
    direct(sqe);
    ++c.zc_notifs;
    return tag_with_timeout(sqe, Op::kSendZc, c, idle_);
  }
  if (c.zc_notifs > 0) {  // all sent, but the kernel may still read the buffer: the last notification calls
    // The notifications come once the client has acknowledged the bytes. A client that stops reading never
    // does, and no operation is in flight to time out: the deadline timer bounds the wait (see arm_deadline).
    c.deadline = monotonic_in(opts_.idle_timeout);
    if (!c.deadline_armed) arm_deadline(c);
    return;
  }
  if (!c.zc_buffer) c.zc_buffer = std::make_unique<char[]>(kZcBufferSize);
  io_uring_sqe* sqe = get_sqe();
  auto count = static_cast<unsigned>(std::min<off_t>(out.left, kZcBufferSize));
  io_uring_prep_read(sqe, out.file.get(), c.zc_buffer.get(), count, static_cast<std::uint64_t>(out.offset));
  tag(sqe, Op::kFileToBuffer, &c);
}
// [/excerpt:send-zc]

void Loop::on_sent(Conn& c, Op op, int res) {
  if (op == Op::kPipeToSocket && res == -EAGAIN) {  // the socket is full: wait for room, --idle-timeout at most
    io_uring_sqe* sqe = get_sqe(2);
    io_uring_prep_poll_add(sqe, c.fd, POLLOUT);
    direct(sqe);
    return tag_with_timeout(sqe, Op::kWritable, c, idle_);
  }
  // Reset, EPIPE, -ECANCELED (the idle timeout fired)... or 0 from the file: it shrank, and the Content-Length we
  // promised can no longer be kept. A reset tells the client its copy is short.
  if (res <= 0) return close_conn(c, End::kReset);
  auto n = static_cast<std::size_t>(res);
  if (op == Op::kSend) c.out.head_sent += n;
  if (op == Op::kPipeToSocket) c.piped -= n;
  if (op == Op::kSendZc) c.zc_sent += n;
  if (op == Op::kFileToBuffer) {
    c.zc_filled = n;
    c.zc_sent = 0;
    c.out.offset += res;
    c.out.left -= res;
    if (c.out.left == 0) c.out.file.reset();
  }
  if (op == Op::kFileToPipe) {
    c.piped = n;
    c.out.offset += res;
    c.out.left -= res;
    if (c.out.left == 0) c.out.file.reset();  // the rest is in the pipe: the file can be closed
  }
  send_more(c);  // after kWritable: there is room again
}

// The whole response is out: end the connection, or wait for the next request, whose deadline starts now.
void Loop::response_sent(Conn& c) {
  if (!c.out.keep_alive || stopping_) return linger(c);
  c.in.erase(0, c.request_length);  // the next pipelined request, if any, is now at the front
  c.deadline = monotonic_in(opts_.idle_timeout);
  process(c);
}
// [/excerpt:send-file]

// [excerpt:lingering]
// The graceful end of a connection we do not keep (common/closing.hpp). A close with client bytes unread (the rest
// of a refused upload, a pipelined request) would send an RST, which makes the client's kernel drop the response
// it has not read yet. So our FIN goes out behind the response, and LINGERING reads and throws away what comes,
// until the client's EOF (it has read the response and closed) or a bound. shutdown() is a direct system call, not
// IORING_OP_SHUTDOWN: it never blocks (it queues the FIN), its answer decides the next state now, and the ring
// would hand it to a kernel worker thread (io-wq; seen on 6.18).
// --fixed-files has no descriptor to call it on, so there it is IORING_OP_SHUTDOWN, worker thread and all; the
// reading need not wait for it, and its failure closes the connection (see dispatch).
void Loop::linger(Conn& c) {
  if (f_.fixed_files) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_shutdown(sqe, c.fd, SHUT_WR);
    direct(sqe);
    tag(sqe, Op::kShutdown, &c);
  } else if (!shutdown_writing(c.fd)) {
    return close_conn(c);  // ENOTCONN: the client reset it; nothing to wait for
  }
  c.state = State::kLingering;
  c.lingering = Lingering(Lingering::Clock::now());
  if (c.deadline_armed) cancel(c, Op::kDeadlineTimer);  // --multishot-recv: re-armed for the lingering deadline
  arm_recv(c);  // into `chunk` (or the buffer ring), which nothing reads any more
}

// LINGERING: a recv completed. EOF, an error, the deadline (-ECANCELED) or kLingerMaxBytes: a plain close.
void Loop::discard(Conn& c, int res) {
  if (res > 0 && c.lingering.discarded(static_cast<std::size_t>(res), Lingering::Clock::now())) return arm_recv(c);
  close_conn(c);
}
// [/excerpt:lingering]

void Loop::close_conn(Conn& c, End end) {
  c.state = State::kClosing;
  c.reset = end == End::kReset;
  if (c.receiving) cancel(c, Op::kRecv);  // --multishot-recv: these two outlive every state; end them
  if (c.deadline_armed) cancel(c, Op::kDeadlineTimer);
  if (c.in_flight == 0) release(c);  // otherwise the last CQE of the connection releases it (see dispatch)
}

// Closes the socket once nothing uses it (in_flight is 0), and frees the slot once no notification is missing.
// Zero-copy sends whose notifications are missing: the network stack still holds pages of zc_buffer, for bytes
// the client has not acknowledged, and would hold them as long as the client does not read. A reset drops those
// bytes, and the notifications follow; the last one frees the slot (see dispatch).
void Loop::release(Conn& c) {
  if (c.fd >= 0) close_socket(c.fd, c.reset || c.zc_notifs > 0);  // the one close path (see the ownership rule)
  c.fd = -1;
  if (c.zc_notifs > 0) return;
  c.state = State::kFree;
  c.generation = (c.generation + 1) & kGenerationMask;
  c.in.clear();
  c.receiving = c.read_ended = c.deadline_armed = false;  // (their CQEs came while CLOSING)
  c.zc_buffer.reset();
  c.zc_filled = c.zc_sent = 0;
  c.zc_notifs = 0;
  c.out = Outgoing();  // closes the file of a response cut short
  c.pipe_rd.reset();   // and the pipe, with whatever it still held
  c.pipe_wr.reset();
  c.piped = 0;  // left stale, the slot's next connection would splice from its new, empty pipe, and wait forever
  c.reset = false;
  free_.push_back(c.slot);
  --live_;
}

// [excerpt:multishot-recv]
// --multishot-recv: a ring of kBufferCount buffers that the kernel fills as bytes arrive, on any connection of this
// loop. Each CQE names the buffer it filled; take_buffer() copies the bytes into the connection's `in` and gives
// the buffer back at once, so the ring is full again whenever the loop has caught up. (liburing 2.4 wraps these
// steps in io_uring_setup_buf_ring(); 2.3 has the parts.)
void Loop::provide_buffers() {
  void* mem = ::mmap(nullptr, kBufferCount * sizeof(io_uring_buf), PROT_READ | PROT_WRITE,
                     MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);  // page-aligned, as the kernel requires
  if (mem == MAP_FAILED) fail_startup("--multishot-recv: out of memory for the buffer ring");
  buffer_ring_ = static_cast<io_uring_buf_ring*>(mem);
  buffers_.resize(kBufferCount * kBufferSize);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uintptr_t>(mem);
  reg.ring_entries = kBufferCount;
  reg.bgid = kBufferGroup;
  if (int r = io_uring_register_buf_ring(&ring_, &reg, 0); r < 0)
    fail_startup(std::string("--multishot-recv: the kernel refused a provided buffer ring (") + std::strerror(-r) +
                 "; it needs Linux 5.19)");
  io_uring_buf_ring_init(buffer_ring_);
  for (unsigned id = 0; id < kBufferCount; ++id)
    io_uring_buf_ring_add(buffer_ring_, &buffers_[id * kBufferSize], kBufferSize, static_cast<unsigned short>(id),
                          io_uring_buf_ring_mask(kBufferCount), static_cast<int>(id));
  io_uring_buf_ring_advance(buffer_ring_, kBufferCount);
}

// `c`: nullptr for a stale CQE, whose buffer must go back to the ring all the same. LINGERING, CLOSING: the bytes
// are thrown away (on_received counts them for LINGERING).
void Loop::take_buffer(Conn* c, int res, unsigned flags) {
  auto id = static_cast<unsigned short>(flags >> IORING_CQE_BUFFER_SHIFT);
  char* buffer = &buffers_[id * kBufferSize];
  if (res > 0 && c && c->state != State::kLingering && c->state != State::kClosing)
    c->in.append(buffer, static_cast<std::size_t>(res));
  io_uring_buf_ring_add(buffer_ring_, buffer, kBufferSize, id, io_uring_buf_ring_mask(kBufferCount), 0);
  io_uring_buf_ring_advance(buffer_ring_, 1);
}

// The multishot recv stays armed in every state, so a keep-alive connection costs no SQE per request to read. Bytes
// that come while the connection is WAITING or SENDING are pipelined requests: they wait in `in`, which the parser
// reads once the response is out, as it does in main.cpp. Past kMaxBuffered of them, the recv is cancelled: the
// socket's receive buffer then fills and TCP slows the client down, and arm_recv() re-arms it once `in` is used up.
// (The bound is loose: what the kernel has read before the cancel lands, up to the whole buffer ring, is kept.)
// The recv ends (no IORING_CQE_F_MORE) with EOF or an error; with -ENOBUFS, when the buffer ring was empty; with
// -ECANCELED, after that pause; or when the kernel chooses. arm_recv() re-arms it whenever it is needed again;
// after -ENOBUFS at once, since take_buffer() has given back the buffers of the CQEs before this one.
// LINGERING counts what arrives, and the recv goes on until the end or the deadline timer (see linger).
void Loop::on_received(Conn& c, int res, unsigned flags) {
  if (!(flags & IORING_CQE_F_MORE)) c.receiving = false;
  bool paused = res == -ENOBUFS || res == -ECANCELED;
  if (res == 0 || (res < 0 && !paused)) c.read_ended = true;
  if (c.state == State::kLingering) return paused ? arm_recv(c) : discard(c, res);
  if (c.state != State::kReading) {
    if (c.receiving && c.in.size() > kMaxBuffered) cancel(c, Op::kRecv);
    return;
  }
  if (res > 0) return process(c);  // the bytes are in `in` (take_buffer)
  arm_recv(c);
}

// The multishot recv outlives each request, so a timeout linked to it could not follow each request's deadline
// (moving one takes an SQE per request: IORING_LINK_TIMEOUT_UPDATE). The deadline gets a timer of its own instead,
// armed once and re-armed only when it fires: a connection READING past its deadline is then reset, one LINGERING
// past its deadline closed; otherwise the timer waits again, for c.deadline in those states, else for a whole
// --idle-timeout, since the next request's deadline can only be later than that. A keep-alive connection pays one
// SQE per --idle-timeout, not per request. --send-zc's wait for notifications, which no operation bounds, uses the
// same timer, with or without --multishot-recv: past c.deadline with no notification, the connection is reset.
void Loop::arm_deadline(Conn& c) {
  c.timer_at = has_deadline(c) ? c.deadline : monotonic_in(opts_.idle_timeout);
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_timeout(sqe, &c.timer_at, 0, IORING_TIMEOUT_ABS);
  tag(sqe, Op::kDeadlineTimer, &c);
  c.deadline_armed = true;
}
// [/excerpt:multishot-recv]

// Cancels the connection's operation `op`, if it is in flight: its CQE then ends with -ECANCELED.
void Loop::cancel(Conn& c, Op op) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_cancel64(sqe, encode(op, c.generation, c.slot), 0);
  tag(sqe, Op::kCancel);
}

// A registered file is closed by the ring (IORING_OP_CLOSE on its index), which frees the entry for a new accept.
// Its reset cannot be SO_LINGER: setsockopt() needs a descriptor (io_uring's own setsockopt command needs Linux
// 6.7 and liburing 2.5). connect() to AF_UNSPEC, which the ring can run on a registered file, resets a TCP
// connection the same way: both end in the kernel's tcp_disconnect(), which sends the RST.
void Loop::close_socket(int fd, bool reset) {
  if (!f_.fixed_files) {
    if (reset) reset_connection(fd);  // SO_LINGER {1, 0}: the close sends an RST
    ::close(fd);
    return;
  }
  io_uring_sqe* sqe = get_sqe(2);
  if (reset) {
    io_uring_prep_connect(sqe, fd, &kDisconnect, sizeof kDisconnect);
    sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;  // the close below waits for it, whatever its result
    tag(sqe, Op::kClose);
    sqe = get_sqe();
  }
  io_uring_prep_close_direct(sqe, static_cast<unsigned>(fd));
  tag(sqe, Op::kClose);
}

const std::vector<ExtraFlag> kFlags = {
    {"--defer-taskrun", nullptr, "SINGLE_ISSUER + DEFER_TASKRUN rings (Linux 6.1; else COOP_TASKRUN, 5.19)"},
    {"--sqpoll", "MS", "a kernel thread submits, and sleeps after MS idle ms (its CPU is the server's)"},
    {"--attach-wq", nullptr, "the rings share one pool of kernel workers (and one SQPOLL thread)"},
    {"--multishot-accept", nullptr, "one accept SQE for all the connections of a listener (Linux 5.19)"},
    {"--multishot-recv", nullptr, "one recv SQE per connection, into a ring of provided buffers (Linux 6.0)"},
    {"--fixed-files", nullptr, "registered (direct) descriptors for the connections (Linux 5.19)"},
    {"--send-zc", nullptr, "with --root: files by read + zero-copy send, not splice (Linux 6.0); else no effect"},
};

// The flags of kFlags, checked. A bad value or combination: a sentence and the usage, exit 2.
Features features_or_exit(const Options& opts, const Model& model) {
  Features f;
  auto given = [&](const char* name) { return opts.extra.count(name) > 0; };
  f.defer_taskrun = given("--defer-taskrun");
  f.attach_wq = given("--attach-wq");
  f.multishot_accept = given("--multishot-accept");
  f.multishot_recv = given("--multishot-recv");
  f.fixed_files = given("--fixed-files");
  f.send_zc = given("--send-zc");
  if (given("--sqpoll")) {
    const std::string& ms = opts.extra.at("--sqpoll");
    char* end = nullptr;
    long v = std::strtol(ms.c_str(), &end, 10);
    if (ms.empty() || *end != '\0' || v < 1 || v > 60'000)
      usage_error(model, "--sqpoll takes the idle time in milliseconds, from 1 to 60000, not '" + ms + "'");
    f.sqpoll_idle_ms = static_cast<unsigned>(v);
  }
  // The SQPOLL thread runs the task work itself: the kernel refuses DEFER_TASKRUN and COOP_TASKRUN with it.
  if (f.defer_taskrun && f.sqpoll_idle_ms > 0)
    usage_error(model, "--defer-taskrun and --sqpoll do not combine: the SQPOLL thread completes the operations");
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

// The flags' run-time probes that no ring setup makes: one sentence and exit 1 if the kernel lacks a feature.
void probe_or_exit(const Features& f) {
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
  const Model model{"06-io_uring-advanced", default_thread_count(), "", kFlags};
  const Options opts = options_or_exit(argc, argv, model);
  Features features = features_or_exit(opts, model);
  probe_or_exit(features);
  start_process();
  // [excerpt:threads]
  // One ring per loop, created before listening so that "io_uring is unavailable" comes before "listening on".
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < opts.threads; ++i)
    loops.push_back(std::make_unique<Loop>(opts, features, features.attach_wq && i > 0 ? loops[0]->ring_fd() : -1));
  // One SO_REUSEPORT listener per loop: the kernel spreads new connections over them, and no two loops ever
  // share an accept queue or a connection.
  std::vector<Fd> listeners = listen_sockets(opts, opts.threads);

  std::vector<std::thread> threads;
  for (int i = 0; i < opts.threads; ++i) threads.emplace_back(&Loop::run, loops[i].get(), std::move(listeners[i]));
  for (std::thread& t : threads) t.join();
  // [/excerpt:threads]
  return 0;  // every loop has closed its listener and connections; the rings close with the Loops
}
