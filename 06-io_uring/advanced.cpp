// 06-io_uring/advanced.cpp: main.cpp's event loops, plus the io_uring features that make servers like it fast,
// each behind its own flag and probed at run time.
//
// Why two programs: main.cpp is the chapter's lesson, one plain batched completion loop. The features below are what
// public io_uring servers advertise; each changes one thing, but together they would bury that loop. So this program
// includes main.cpp and derives from its Loop: AdvancedLoop overrides the methods main.cpp marks `virtual`, and each
// override does main.cpp's plain thing (it calls Loop's) unless its flag is given. Without flags it is main.cpp.
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
#define PSP_06_ADVANCED  // main.cpp's Loop, without its main()
#include "main.cpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstdlib>

namespace {

// The flags' own constants:
constexpr off_t kSpliceMax = 1 << 30;  // --splice: the most one file splice asks for; the pipe takes what fits
constexpr int kPipeSize = 1 << 20;  // not the default 64 KiB: wrk -c100 then fetched a 1 MB file ~1.5x as often
// --multishot-recv: more buffers in the loop's ring, and how much a connection may buffer while it answers
// (pipelined requests) before its recv is paused. A recv that stays armed takes a buffer for every read, also while
// its connection is busy: with 256 buffers of 2 KiB, wrk -c300 met an empty ring (-ENOBUFS) on 4 % of its requests;
// with 1024, none up to -c1000.
constexpr unsigned kMultishotBufferCount = 1024;
constexpr std::size_t kMaxBuffered = 8192;  // as main.cpp's reads: a head is at most 8 KiB; see on_multishot
constexpr unsigned kZcBufferSize = 256 * 1024;  // --send-zc: a connection's file buffer, made for its first file
constexpr sockaddr kDisconnect{AF_UNSPEC, {}};  // --fixed-files: connect() to it resets a connection (close_direct)

// The flags' operations, after main.cpp's in user_data's Op field (main.cpp's dispatch() hands every connection
// operation it does not know to on_completion(), which AdvancedLoop overrides).
constexpr Op kShutdown = Op(16), kClose = Op(17), kFileToPipe = Op(18), kPipeToSocket = Op(19), kFileToBuffer = Op(20),
             kSendZc = Op(21);

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

// [excerpt:setup]
// The ring's setup options for the flags, on top of main.cpp's (Loop's `tune`).
void set_up_flags(io_uring_params& params) {
  if (features.sqpoll_idle_ms > 0) {  // the SQPOLL thread runs the task work: the kernel refuses COOP_TASKRUN with it
    params.flags = (params.flags & ~IORING_SETUP_COOP_TASKRUN) | IORING_SETUP_SQPOLL;
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

// The flags' state of one connection, kept beside main.cpp's Conn (AdvancedLoop::extra_, by slot), so that an idle
// connection of main.cpp stays 40 bytes. main.cpp's rule, one operation in flight (`op`), still holds for what the
// engine asks; the flags add operations that run beside it, counted here, and a connection is released only once
// none is left (busy()).
struct Extra {
  bool cancelled = false;   // CLOSING: the cancels are queued (close_conn runs again for every CQE that follows)
  bool receiving = false;   // --multishot-recv: its recv is armed (until the CQE without IORING_CQE_F_MORE)
  bool read_ended = false;  // ... and ended with EOF or an error while no input was asked for
  std::size_t buffered = 0;  // ... bytes it brought while the engine was not reading (pipelined requests)
  int shutting = 0;         // --fixed-files: an IORING_OP_SHUTDOWN in flight
  Fd pipe_rd, pipe_wr;      // --splice: the pipe files go through, made for the first one, closed with the slot
  std::size_t piped = 0;    // ... bytes of the file in the pipe, not yet spliced to the socket
  std::unique_ptr<char[]> zc_buffer;  // --send-zc: kZcBufferSize bytes, made for the connection's first file
  std::size_t zc_filled = 0;          // ... bytes of the file read into it
  std::size_t zc_sent = 0;            // ... and sent from it
  int zc_notifs = 0;  // ... zero-copy sends that may still read it, until their IORING_CQE_F_NOTIF
};

// One event loop with the flags: main.cpp's Loop, and an override where a flag changes what it does.
class AdvancedLoop final : public Loop {
 public:
  explicit AdvancedLoop(const Options& opts)
      : Loop(opts, set_up_flags, features.multishot_recv ? kMultishotBufferCount : kBufferCount) {
    if (features.attach_wq && first_ring_fd < 0) first_ring_fd = ring_.ring.ring_fd;  // main() keeps this Loop
    if (features.fixed_files) register_files();
  }

  void run() {
    // --defer-taskrun: enabling the ring makes this thread its single issuer. (liburing 2.3 declares
    // io_uring_enable_rings() but does not export it, hence the system call.)
    if (features.defer_taskrun &&
        ::syscall(__NR_io_uring_register, ring_.ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) != 0)
      fail_startup(std::string("--defer-taskrun: cannot enable the ring: ") + std::strerror(errno));
    Loop::run();
  }

 private:
  Extra& extra(const Conn& c) {
    if (c.slot >= extra_.size()) extra_.resize(c.slot + 1);
    return extra_[c.slot];
  }
  // Anything in flight for the connection: main.cpp's one operation, or one of the flags'.
  bool busy(Conn& c) {
    const Extra& e = extra(c);
    return c.op != Op::kNone || e.receiving || e.shutting > 0 || e.zc_notifs > 0;
  }

  // --sqpoll: the SQPOLL thread, not this one, runs the task work that posts the completion of a recv whose socket
  // already holds bytes, so the stop's look, which does not wait, can miss a request that was there (1 stop in about
  // 30 in Signals.ARequestWaitingAtAStopIsAnswered). Give that thread up to 50 ms to post it, once per turn of a stop.
  void look_before_deadlines() override {
    if (features.sqpoll_idle_ms > 0) {
      __kernel_timespec look{0, 50'000'000};
      io_uring_cqe* first;  // unused: the look below reaps them all
      io_uring_submit_and_wait_timeout(&ring_.ring, &first, 1, &look, nullptr);
    }
    Loop::look_before_deadlines();
  }

  // --multishot-accept: a CQE with IORING_CQE_F_MORE brings a connection, and the accept goes on. Its last CQE (an
  // error, the stop's cancel, or when the kernel chooses, as with a full CQ) goes to on_accept like a single one's.
  // --fixed-files: the results of close_direct(), which point at nothing of ours.
  void dispatch(const Completion& done) override {
    const Op op = decode(done.user_data).op;
    if (op == Op::kAccept && (done.flags & IORING_CQE_F_MORE))
      return stopping_ ? close_socket(done.res) : open_conn(done.res);
    if (op == kClose) return;
    Loop::dispatch(done);
  }

  // --fixed-files: every SQE that names the connection's socket says that `fd` is an index in the ring's table of
  // registered files, not a descriptor. (A file splice's input is an ordinary descriptor: see send_file.)
  void tag(io_uring_sqe* sqe, Op op, Conn* c = nullptr) override {
    if (features.fixed_files && c && op != kFileToPipe && op != kFileToBuffer) sqe->flags |= IOSQE_FIXED_FILE;
    Loop::tag(sqe, op, c);
  }

  // [excerpt:accept]
  // --multishot-accept: one SQE accepts every connection, each CQE carrying IORING_CQE_F_MORE while it goes on.
  // --fixed-files: the kernel puts the socket in a free entry of the registered table and answers its index
  // (registered files have no close-on-exec: there is nothing to exec them into).
  void arm_accept() override {
    if (!features.multishot_accept && !features.fixed_files) return Loop::arm_accept();
    io_uring_sqe* sqe = ring_.get_sqe();
    int fd = listener_.get();
    if (features.multishot_accept && features.fixed_files)
      io_uring_prep_multishot_accept_direct(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK);
    else if (features.multishot_accept)
      io_uring_prep_multishot_accept(sqe, fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    else  // - 1: liburing 2.3 adds 1 to any index (2.4 and later leave ALLOC as it is)
      io_uring_prep_accept_direct(sqe, fd, nullptr, nullptr, SOCK_NONBLOCK, IORING_FILE_INDEX_ALLOC - 1);
    Loop::tag(sqe, Op::kAccept);
    listen_op_ = Op::kAccept;
  }
  // [/excerpt:accept]

  // The flags' completions; main.cpp's own go to Loop::on_completion.
  void on_completion(Conn& c, Op op, const Completion& done) override {
    if (op == Op::kRecv && features.multishot_recv) return on_multishot(c, done);
    if (op == kSendZc) return on_send_zc(c, done);
    if (op == kShutdown) {  // --fixed-files: its failure (ENOTCONN: the client reset it) ends the connection
      --extra(c).shutting;
      if (closing(c)) return close_conn(c);
      return done.res < 0 ? apply(c, engine_.on_peer_gone(c.life)) : void();
    }
    if (op != kFileToPipe && op != kPipeToSocket && op != kFileToBuffer) return Loop::on_completion(c, op, done);
    c.op = Op::kNone;
    if (closing(c)) return close_conn(c);
    Extra& e = extra(c);
    const int res = done.res;
    const Clock::time_point now = Clock::now();
    // --splice: the socket is full. A splice runs in a worker, never by poll: issued again at once, it would spin.
    if (op == kPipeToSocket && res == -EAGAIN) return apply(c, engine_.on_sent(c.life, SendProgress::kBlocked, now));
    if (res == -EAGAIN) return apply(c, Next{});
    if (res <= 0) return apply(c, engine_.on_sent(c.life, SendProgress::kFailed, now));  // 0: the file shrank
    const auto n = static_cast<std::size_t>(res);
    if (op == kPipeToSocket) e.piped -= n;
    if (op == kFileToPipe) e.piped = n;
    if (op == kFileToBuffer) e.zc_filled = n, e.zc_sent = 0;
    // The engine counts a file's bytes when they leave for the socket, not when they enter the pipe or the buffer.
    apply(c, op == kPipeToSocket ? engine_.on_sent_bytes(c.life, n, now) : Next{});
  }

  // [excerpt:multishot-recv]
  // --multishot-recv: the loop's ring of provided buffers, the one main.cpp's recvs read into (common/uring.hpp's
  // BufferRing), with kMultishotBufferCount buffers, and one recv per connection that the kernel completes for every
  // read: each CQE names the buffer it filled, the engine copies the bytes (on_bytes) and main.cpp's dispatch() gives
  // the buffer back at once, so the ring is full again whenever the loop has caught up.
  //
  // The recv stays armed in every state, so a keep-alive connection costs no SQE per request to read. `op` is kRecv
  // while the engine asks for input (main.cpp's rule: that is the operation a close cancels); bytes that come while
  // it does not (WAITING, SENDING) are pipelined requests, which the engine keeps for later (contract 4). But the
  // kernel reads a socket as fast as bytes come, and a client that pipelines without reading the answers would fill
  // the engine's buffer without end. Two bounds:
  // - From Linux 6.17 the recv ends by itself after kMaxBuffered bytes (recv_cap), and arm_recv() re-arms it only
  //   when the engine asks for input again: the socket's receive buffer then fills and TCP slows the client down.
  // - Before, we cancel it once kMaxBuffered bytes came while the engine was not reading. The cancel lands late: the
  //   CQEs the kernel has posted by then, up to a whole socket receive buffer (~160 KiB per client measured on 6.18),
  //   are kept.
  void arm_recv(Conn& c) override {
    if (!features.multishot_recv) return Loop::arm_recv(c);
    Extra& e = extra(c);
    if (e.read_ended) return apply(c, engine_.on_peer_gone(c.life));  // EOF came while the engine was busy
    e.buffered = 0;
    c.op = Op::kRecv;  // the engine's input comes from it
    if (e.receiving) return;  // its next CQE brings the bytes
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_recv_multishot(sqe, c.fd, nullptr, 0, 0);  // no buffer of ours: the kernel picks one of the ring's
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    if (features.recv_cap) sqe->file_index = kMaxBuffered;  // `optlen` in newer headers: end after this many bytes
    tag(sqe, Op::kRecv, &c);
    e.receiving = true;
  }

  // The recv ends (no IORING_CQE_F_MORE) with EOF or an error; with -ENOBUFS, when the buffer ring was empty; with
  // -ECANCELED, after a pause; at the cap; or when the kernel chooses. arm_recv() re-arms it whenever the engine asks
  // for input again; after -ENOBUFS at once, since dispatch() has given back the buffers of the CQEs before this one.
  void on_multishot(Conn& c, const Completion& done) {
    Extra& e = extra(c);
    const bool reading = c.op == Op::kRecv;  // the engine asked for input
    if (!(done.flags & IORING_CQE_F_MORE)) {  // it ended: arm_recv() arms a new one if input is still wanted
      e.receiving = false;
      if (reading) c.op = Op::kNone;
    }
    if (closing(c)) return close_conn(c);
    const int res = done.res;
    if (res > 0) {
      std::string_view bytes(buffers_.data(BufferRing::id(done.flags)), static_cast<std::size_t>(res));
      if (reading) c.op = Op::kNone;  // the input asked for has come: the engine says what next
      if (!reading) e.buffered += bytes.size();
      apply(c, engine_.on_bytes(c.life, bytes, Clock::now()));  // (not reading: kept, and kUnchanged)
      if (!reading && e.receiving && !features.recv_cap && e.buffered > kMaxBuffered) cancel(c, Op::kRecv);
      return;
    }
    const bool paused = res == -ENOBUFS || res == -ECANCELED || res == -EAGAIN;  // -EAGAIN: see main.cpp
    if (!paused) e.read_ended = true;  // 0: EOF; < 0: a reset, ...
    if (reading) apply(c, Next{});  // kRead goes on: arm_recv() re-arms, or reports the end
  }
  // [/excerpt:multishot-recv]

  void cancel(Conn& c, Op op) {
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_cancel64(sqe, encode(op, c.generation, c.slot), 0);
    Loop::tag(sqe, Op::kCancel);
  }

  // [excerpt:splice]
  // --splice and --send-zc: the file through the ring, instead of sendfile() from the loop (main.cpp's send() keeps
  // the head). --splice sends it through the connection's pipe, one operation per arrow (--send-zc: send_file_zc):
  //
  //   +-> the pipe empty? splice file -> pipe at the engine's `offset` ---- 0 (the file shrank), error: kReset
  //   |     | n bytes in the pipe
  //   |     v
  //   |   splice pipe -> socket ------------------ -EAGAIN: kBlocked, and the engine asks for a poll (kWaitWritable)
  //   |     | n bytes out: on_sent_bytes(n)   <-------------------------- room again: kSend
  //   +-----+ the engine asks for more (kSend), or the response is sent
  //
  // splice() moves page references, not bytes: page cache -> pipe -> socket, never through user space. io_uring runs
  // every splice in a kernel worker thread (io-wq), and two rules keep those workers from ever waiting on a client.
  // The pipe is empty when we fill it, so the file splice never waits for room in it. The socket is non-blocking,
  // so the socket splice takes what fits or fails with -EAGAIN, and we wait for room with a poll, under SENDING's
  // deadline. (Into a blocking socket the splice would wait in its worker until the client had read it all, and no
  // cancel could end it: seen on 6.18.) The two splices are not linked: a chain goes on only if an operation moves
  // all it was asked for, and the file splice moves what fits in the pipe, which would end the chain.
  // main.cpp's sendfile() measured level with two splices in workers (docs/io_uring-advanced.md), but --fixed-files
  // needs this path: a registered file has no descriptor number for sendfile(), and a splice names it with
  // IOSQE_FIXED_FILE. `benchmark.sh --mode files 06 06-io_uring-advanced:--splice` measures the two side by side.
  Next send(Conn& c) override {
    SendSpan span = engine_.send_span(c.life);
    if (!span.head.empty() || span.file < 0 || !(features.splice || features.send_zc)) return Loop::send(c);
    if (features.send_zc) return send_file_zc(c, span);
    Extra& e = extra(c);
    if (!e.pipe_wr.valid()) {  // the connection's first file
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) return engine_.on_sent(c.life, SendProgress::kFailed, Clock::now());
      e.pipe_rd.reset(fds[0]);
      e.pipe_wr.reset(fds[1]);
      // Refused (EPERM) past fs.pipe-max-size, or once the user's pipes hold fs.pipe-user-pages-soft pages (16,384 by
      // default: 64 pipes of 1 MiB). Past that soft limit a new pipe even starts at 8 KiB, not 64 KiB, and stays so:
      // as uid 65534, 64 connections got 1 MiB and the next 36 got 8 KiB (root is exempt). More splices, no errors.
      ::fcntl(fds[1], F_SETPIPE_SZ, kPipeSize);
    }
    io_uring_sqe* sqe = ring_.get_sqe();
    if (e.piped > 0) {
      io_uring_prep_splice(sqe, e.pipe_rd.get(), -1, c.fd, -1, static_cast<unsigned>(e.piped), 0);
      tag(sqe, kPipeToSocket, &c);  // IOSQE_FIXED_FILE names the output; the pipe, the input, is an ordinary fd
    } else {
      auto count = static_cast<unsigned>(std::min<off_t>(static_cast<off_t>(span.count), kSpliceMax));
      io_uring_prep_splice(sqe, span.file, span.offset, e.pipe_wr.get(), -1, count, 0);
      tag(sqe, kFileToPipe, &c);
    }
    return Next{};
  }
  // [/excerpt:splice]

  // [excerpt:send-zc]
  // --send-zc: the file goes through the connection's buffer, and the socket takes the buffer's pages themselves
  // (IORING_OP_SEND_ZC) instead of a copy. Each zero-copy send completes twice: first with the bytes sent
  // (IORING_CQE_F_MORE: more to come), then with IORING_CQE_F_NOTIF once the network stack has let go of the pages.
  // Until then the buffer must not change, so it is read into again, and the slot is freed, only when every
  // notification is in (on a real network that is when the client has acknowledged the bytes):
  //
  //   +-> read file -> buffer at the engine's `offset` -------- 0 (the file shrank), error: kReset
  //   |     | n bytes
  //   |     v
  //   |   send_zc the buffer: on_sent_bytes ------------------- short: send_zc the rest at once (those bytes stay)
  //   |     | all n sent
  //   |     v
  //   +-- every notification in (kWait until then), and the engine asks for more (kSend)
  //
  // A client that stops reading acknowledges nothing, so no notification comes: SENDING's deadline, from the last
  // progress, resets the connection, and the notifications follow (close_conn). Copies: one (page cache -> buffer),
  // where splice makes none; what it saves is the copy into the socket, on a network card that can send from the
  // pages. Over loopback the kernel copies them anyway when it delivers them to the receiving socket (every
  // notification says so: IORING_NOTIF_USAGE_ZC_COPIED, measured on 6.18), so there this mode only adds the read.
  Next send_file_zc(Conn& c, const SendSpan& span) {
    Extra& e = extra(c);
    io_uring_sqe* sqe;
    if (e.zc_sent < e.zc_filled) {
      sqe = ring_.get_sqe();
      io_uring_prep_send_zc(sqe, c.fd, e.zc_buffer.get() + e.zc_sent, e.zc_filled - e.zc_sent, MSG_NOSIGNAL, 0);
      ++e.zc_notifs;
      tag(sqe, kSendZc, &c);
      return Next{};
    }
    if (e.zc_notifs > 0) {  // all sent, but the kernel may still read the buffer: the last notification goes on
      Next wait;
      wait.what = Do::kWait;
      return wait;
    }
    if (!e.zc_buffer) e.zc_buffer = std::make_unique<char[]>(kZcBufferSize);
    sqe = ring_.get_sqe();
    auto count = static_cast<unsigned>(std::min<std::size_t>(span.count, kZcBufferSize));
    io_uring_prep_read(sqe, span.file, e.zc_buffer.get(), count, static_cast<std::uint64_t>(span.offset));
    tag(sqe, kFileToBuffer, &c);
    return Next{};
  }

  // The send's CQE (IORING_CQE_F_MORE: a notification follows), or its notification (IORING_CQE_F_NOTIF).
  void on_send_zc(Conn& c, const Completion& done) {
    Extra& e = extra(c);
    if (done.flags & IORING_CQE_F_NOTIF) {
      --e.zc_notifs;
      if (closing(c)) return close_conn(c);
      if (e.zc_notifs == 0 && c.doing == Do::kWait && c.op == Op::kNone) {  // send_file_zc's wait is over
        c.doing = Do::kSend;
        apply(c, Next{});
      }
      return;
    }
    if (!(done.flags & IORING_CQE_F_MORE)) --e.zc_notifs;  // no notification will come for this one
    c.op = Op::kNone;
    if (closing(c)) return close_conn(c);
    const Clock::time_point now = Clock::now();
    if (done.res == -EAGAIN) return apply(c, Next{});
    if (done.res <= 0) return apply(c, engine_.on_sent(c.life, SendProgress::kFailed, now));
    e.zc_sent += static_cast<std::size_t>(done.res);
    apply(c, engine_.on_sent_bytes(c.life, static_cast<std::size_t>(done.res), now));
  }
  // [/excerpt:send-zc]

  // --fixed-files: no descriptor to call shutdown() on, so IORING_OP_SHUTDOWN, which runs in a kernel worker thread.
  // The reading need not wait for it; its failure ends the connection (on_completion).
  bool shut_down(Conn& c) override {
    if (!features.fixed_files) return Loop::shut_down(c);
    io_uring_sqe* sqe = ring_.get_sqe();
    io_uring_prep_shutdown(sqe, c.fd, SHUT_WR);
    sqe->flags |= IOSQE_FIXED_FILE;
    Loop::tag(sqe, kShutdown);  // not the connection's `op`: the recv that follows is
    io_uring_sqe_set_data64(sqe, encode(kShutdown, c.generation, c.slot));
    ++extra(c).shutting;
    return true;
  }

  // CLOSING: main.cpp cancels its one operation; the flags' operations beside it are cancelled too, once, and the
  // connection is released when none is left. --send-zc: notifications that are missing mean the network stack still
  // holds pages of zc_buffer, for bytes the client has not acknowledged, and would hold them as long as the client
  // does not read: a reset drops those bytes, and the notifications follow; the last one frees the slot.
  void close_conn(Conn& c) override {
    Extra& e = extra(c);
    if (!e.cancelled) {
      e.cancelled = true;
      if (c.op != Op::kNone) cancel(c, c.op);
      if (e.receiving && c.op != Op::kRecv) cancel(c, Op::kRecv);
    }
    if (c.op == Op::kNone && !e.receiving && e.shutting == 0 && e.zc_notifs > 0 && c.fd >= 0) {
      close_socket(c.fd, true);
      c.fd = -1;
    }
    if (!busy(c)) release(c);
  }

  void release(Conn& c) override {
    extra(c) = Extra();  // the pipe closes, the buffer goes: the slot's next connection starts afresh
    Loop::release(c);
  }

  // --fixed-files: a registered file is closed by the ring (IORING_OP_CLOSE on its index), which frees the entry for
  // a new accept. Its reset cannot be SO_LINGER: setsockopt() needs a descriptor (io_uring's own setsockopt command
  // needs Linux 6.7 and liburing 2.5). connect() to AF_UNSPEC, which the ring can run on a registered file, resets a
  // TCP connection the same way: both end in the kernel's tcp_disconnect(), which sends the RST.
  void close_socket(int fd, bool reset = false) override {
    if (fd < 0) return;  // --send-zc: closed already, before the notifications (see close_conn)
    if (!features.fixed_files) return Loop::close_socket(fd, reset);
    io_uring_sqe* sqe = ring_.get_sqe(2);
    if (reset) {
      io_uring_prep_connect(sqe, fd, &kDisconnect, sizeof kDisconnect);
      sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;  // the close below waits for it, whatever its result
      Loop::tag(sqe, kClose);
      sqe = ring_.get_sqe();
    }
    io_uring_prep_close_direct(sqe, static_cast<unsigned>(fd));
    Loop::tag(sqe, kClose);
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

  std::deque<Extra> extra_;  // the flags' state of each slot (by Conn::slot); a deque: growing moves no Extra
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

// The flags' run-time probes: one sentence and exit 1 if the kernel lacks a feature or refuses a ring with the
// flags' setup options, and what the kernel offers beyond them (recv_cap).
void probe_or_exit(Features& f) {
  io_uring_params params{};
  params.flags = IORING_SETUP_COOP_TASKRUN;
  set_up_flags(params);
  io_uring ring;
  if (int r = io_uring_queue_init_params(8, &ring, &params); r < 0) {
    io_uring plain;
    if (int p = io_uring_queue_init(8, &plain, 0); p < 0) fail_startup(unavailable(-p));  // io_uring itself
    io_uring_queue_exit(&plain);
    std::string names;
    if (params.flags & IORING_SETUP_SQPOLL) names += " --sqpoll (IORING_SETUP_SQPOLL)";
    if (params.flags & IORING_SETUP_DEFER_TASKRUN) names += " --defer-taskrun (IORING_SETUP_DEFER_TASKRUN, Linux 6.1)";
    if (!names.empty()) fail_startup("the kernel refused a ring with" + names + ": " + std::strerror(-r));
  } else {
    io_uring_queue_exit(&ring);
  }
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
  const Options opts = options_or_exit(argc, argv, kModel);
  features = features_or_exit(opts);
  probe_or_exit(features);
  run_loops<AdvancedLoop>(opts, kModel, opts.threads);  // as main.cpp's main(), with AdvancedLoop
  return 0;  // every loop has closed its listener and connections; the rings close with the Loops
}
