// 07-asio: Boost.Asio, completion handlers, in the three classic thread topologies.
//
// The event loops of chapter 05, with Asio running them. Instead of asking "which sockets are ready?" we start an
// operation (accept, read, write, wait for a timer) and hand it a lambda; Asio calls the lambda when the operation
// has completed. On Linux Asio still waits in epoll underneath, so the numbers should match 05's. What changes is
// where a connection's state machine lives: in the chain of handlers, each of which starts the next operation.
//
// --topology: how threads share the work (the three designs of Asio's own HTTP server examples):
//   per-thread  (default) --threads io_contexts, each run by one thread with its own SO_REUSEPORT listener: the
//               kernel spreads the connections and the threads share nothing, as in 05. nginx's workers with
//               `reuseport` and Seastar's shards work this way (Asio's server2 deals sockets from one acceptor).
//   single      one io_context on one thread: no locks at all, one core. Redis and Node.js work this way.
//   pool        one io_context run by --threads threads: any thread runs any handler, so a session's handlers go
//               through its strand, which runs them one at a time. Asio's server3, Beast's async examples and many
//               RPC frameworks work this way: work spreads per handler, not per connection, for some locking.
//
// Needs:  Linux, g++ with C++17, the Boost 1.74+ headers (Debian 12: apt-get install libboost-dev); nothing to link.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server --topology pool    (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#if defined(__SANITIZE_THREAD__)
// Asio's fenced blocks use std::atomic_thread_fence, which ThreadSanitizer does not model; GCC warns (-Wtsan) in
// every handler, which -Werror turns into errors. The fences are Asio's business; the races TSan looks for are ours.
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "../common/closing.hpp"
#include "../common/exchange.hpp"
#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/response.hpp"
#include "../common/workers.hpp"

#if defined(PSP_ASIO_IO_URING)  // build/07-asio-uring: g++ ... -DPSP_ASIO_IO_URING main.cpp -luring
// The same code on standalone Asio 1.22 (Debian: libasio-dev), whose sockets and timers then wait in io_uring, not
// epoll. Boost.Asio has that backend only from Boost 1.78 on; Debian 12's default Boost is 1.74.
#define ASIO_HAS_IO_URING 1
#define ASIO_DISABLE_EPOLL 1
#include <asio/version.hpp>
#if ASIO_VERSION < 102700
// Works around a bug of Asio before 1.27 (chriskohlhoff/asio PR #1215, fixed by commit 0080ec1c9): its cancellation
// SQEs keep the user_data of the slot's previous SQE once the ring's 16,384 slots have all been used. Asio then takes
// a cancellation's completion for another object's (often the acceptor's), queues that object twice in one batch, and
// its intrusive list loses the completions queued in between: a stop with 5,500 idle connections (3 SQEs each) waits
// for them forever. This clears user_data, as 1.27's get_sqe() does; a macro, because get_sqe() is inside Asio.
#include <liburing.h>
inline io_uring_sqe* get_sqe_without_stale_user_data(io_uring* ring) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe != nullptr) io_uring_sqe_set_data(sqe, nullptr);  // Asio ignores a completion whose user_data is null
  return sqe;
}
#define io_uring_get_sqe get_sqe_without_stale_user_data
#endif
#include <asio.hpp>
#undef io_uring_get_sqe
using asio::error_code;
#else
#include <boost/asio.hpp>
namespace asio = boost::asio;
using boost::system::error_code;
#endif
using tcp = asio::ip::tcp;
using Clock = asio::steady_timer::clock_type;

namespace {

// How long to wait before accepting again after accept() failed: doubled after each failure in a row.
constexpr std::chrono::milliseconds kRetryPauseMin{1}, kRetryPauseMax{100};

class Session;

// [excerpt:topology]
// One io_context, its listener, and the sessions it accepted; run by one thread, or by a pool (--topology pool).
// With one thread nothing here is shared. With a pool, the loop's own handlers (accept, signals, stop) run on one
// strand (`executor`), each session's on a strand of its own, and what both touch is a mutex or an atomic.
struct Loop {
  Loop(const Options& options, int threads)
      : opts(options), ioc(threads), pooled(threads > 1), executor(new_executor()) {}
  // The executor of a new session or of the loop itself: with a pool, a new strand; else the io_context's own.
  asio::any_io_executor new_executor() {
    if (pooled) return asio::make_strand(ioc);
    return ioc.get_executor();
  }
  void stop();
  template <class F> void for_each_session(F f);

  const Options& opts;
  asio::io_context ioc;  // its concurrency hint: how many threads will run it
  const bool pooled;
  asio::any_io_executor executor;
  tcp::acceptor acceptor{executor};
  asio::signal_set signals{executor, SIGINT, SIGTERM};
  asio::steady_timer accept_retry{executor};  // the pause after a failed accept
  std::chrono::milliseconds retry_pause = kRetryPauseMin;
  asio::steady_timer grace{executor};         // bounds how long a stop waits for the connections still open
  std::atomic<bool> stopping{false};          // read by the sessions, from any thread of a pool
  std::mutex mutex;                           // guards `sessions`
  std::unordered_set<Session*> sessions;      // the live ones: each adds itself at birth, removes itself at death
};
// [/excerpt:topology]

// [excerpt:session]
// One connection, and its state machine (parse is serve(), which looks at what is buffered):
//
//                 +------------------------ sent, keep-alive --------------------------+
//                 v                                                                    |
//   accepted --> parse --complete--> kHandling --delay over--> kWriting --all sent--+--+
//                 | ^  \                                          ^  |              |
//      incomplete | |   +--malformed: refuse(status) -------------+  |              | the last response: refused,
//                 v | bytes arrived                                  | a send       | Connection: close, or a stop
//               kReading --EOF, peer's reset, stop--> close          | error, or    v
//                 |                                                  | no progress  kLingering: shutdown(send); read,
//                 +--deadline--> reset <-----------------------------+              discard --EOF, error, 16 MiB,
//                                                                                   2 s quiet, 5 s in all--> close
//
//   close: a plain close, a FIN (nothing is left unread that would turn it into an RST). reset: SO_LINGER {on, 0 s}
//   first, so that the close sends an RST: for what timed out or failed, and for what a stop's grace leaves open.
//
// Who owns it: the handlers of its pending operations, each holding `self`, a shared_ptr; nothing else does (the
// Loop's list is not owning). Until close(), the deadline's timer is always pending, and so is a wait for input,
// the delay or a write, whose handler starts the next one. close() cancels them all, so every handler still pending
// runs soon with an error and starts nothing. The Session dies when the last of them returns (after close(), never
// before, so no operation outlives the buffers it uses), and closes its socket then. All its handlers run on its
// executor (its socket's), one at a time: in a pool that executor is a strand, so the Session needs no lock of its
// own.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Loop& loop)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), delay_(socket_.get_executor()), loop_(loop) {
    std::lock_guard<std::mutex> lock(loop_.mutex);
    loop_.sessions.insert(this);
  }
  // The socket closes here, once nothing is pending on it: a descriptor closed under a pending operation can go to
  // the next accept() first, and Asio 1.22 on io_uring then restarts the old operation on the new connection (a
  // read would steal its request). Explicitly: the tcp::socket destructor would turn SO_LINGER off, and a reset()
  // into a plain close.
  ~Session() {
    error_code ignored;
    socket_.close(ignored);
    restore_spare();  // if a shed lost the spare (net.hpp), it takes the number just freed
    std::lock_guard<std::mutex> lock(loop_.mutex);
    loop_.sessions.erase(this);
    // The last session to go ends a stop's grace period. post: the grace timer is the loop's, on the loop's
    // executor, and in a pool this destructor runs on whichever thread let go of the Session last.
    if (loop_.stopping && loop_.sessions.empty()) asio::post(loop_.executor, [&loop = loop_] { loop.grace.cancel(); });
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }

  void start() {
    // Our own recv() and sendfile() on native_handle() (read(), discard(), send_file()) must never block the loop.
    // native_non_blocking(true) sets O_NONBLOCK and tells Asio so; on epoll Asio would set it at our first operation.
    error_code ec;
    socket_.native_non_blocking(true, ec);
    if (ec) return close();  // nothing is pending yet: the Session dies as soon as this handler returns
    deadline_ = Clock::now() + loop_.opts.idle_timeout;  // the request deadline counts from the accept
    watch(deadline_);                                    // pending until close(): see watch()
    serve();
  }

  // A stop ends a wait for a request by cancelling the wait, whose handler then closes. Not close() here: the wait
  // may have completed already, its handler queued behind this one with a request in the kernel, to answer.
  void stop_if_idle() {
    error_code ignored;
    if (state_ == State::kReading) socket_.cancel(ignored);
  }

  // The one way to end the connection (calling it twice is harmless). The FIN, or reset()'s RST, goes out when
  // ~Session closes the socket, after the handlers of what this cancels.
  void close() {
    state_ = State::kClosed;
    error_code ignored;
    socket_.cancel(ignored);  // the pending wait or write completes with operation_aborted
    timer_.cancel();
    delay_.cancel();
  }

  // The abortive end (closing.hpp's reset_connection(), in Asio's words): with SO_LINGER {on, 0 s}, the socket's
  // close sends an RST and drops what is still unsent. For what timed out, failed to send, or outlived a stop's grace.
  void reset() {
    if (state_ == State::kClosed) return;  // already ended: keep the end chosen first
    error_code ignored;
    socket_.set_option(tcp::socket::linger(true, 0), ignored);
    close();
  }

 private:
  enum class State { kReading, kHandling, kWriting, kLingering, kClosed };

  // The protocol of every chapter: answer what is buffered; read more only when the next request is incomplete.
  // No Exchange: nothing is buffered, and nothing of a request has come yet.
  void serve() {
    http::Parse p;  // kIncomplete
    if (x_) p = x_->reader.next(x_->in);  // takes the request (head and body) out of `in` as it reads it
    if (p.status == http::Parse::kIncomplete) {
      if (loop_.stopping) return close();  // a stop closes a connection as soon as it waits for a request
      // Between requests (no byte of a next one has come): the Exchange goes, and the idle connection keeps only
      // the Session. Destroyed, never assigned over (common/exchange.hpp). No operation points into it now: the
      // last one that did, a write, has completed.
      if (x_ && x_->between_requests()) x_.reset();
      return read();
    }
    if (p.status == http::Parse::kError) return send(refuse(loop_.opts, p));
    if (p.status == http::Parse::kContinue) return send(interim_continue());  // then back here, for the body
    state_ = State::kHandling;
    if (!handler_needs_timer(loop_.opts)) {
      run_handler_here(loop_.opts);  // --handler sleep/spin: stalls this loop (or one thread of a pool), on purpose
      x_->request = std::move(p.request);  // moved, not copied: its five strings, on every request
      return answer();
    }
    x_->request = std::move(p.request);  // where the delay's handler finds it
    delay_.expires_after(loop_.opts.delay);
    delay_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->state_ != State::kHandling) return;  // reset() came first (the stop's grace ran out)
      self->answer();
    });
  }

  void answer() {
    http::Request& request = x_->request;
    if (loop_.stopping) request.keep_alive = false;  // say "Connection: close": we close after this response
    send(respond(loop_.opts, request));
  }

  // [excerpt:read]
  // kReading: wait for readability, then read ourselves (recv_into(), common/net.hpp: a 4 KiB array on the stack,
  // appended to the Exchange's `in`). Not async_read_some(): a pending read's buffer must stay put until it
  // completes, so every idle connection would pin one. A wait pins nothing, and misses nothing that came first
  // (pipelined, or sent while we answered): on epoll, each wait re-arms the socket with EPOLL_CTL_MOD under the
  // socket's lock (epoll_reactor::start_op), and the kernel then checks it at once and reports one already readable
  // with a new edge (an edge that came while nothing waited was dropped); on io_uring the wait is a POLL_ADD, which
  // completes at once on a readable socket. Either way, with one thread or a pool.
  void read() {
    state_ = State::kReading;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
      // ec: reset()/close() by the deadline, or a stop (operation_aborted). EOF and a reset show up in the recv.
      if (ec || self->state_ != State::kReading) return self->close();
      if (!self->x_) self->x_ = std::make_unique<Exchange>(self->loop_.opts.max_body);  // a request begins
      const long n = recv_into(self->socket_.native_handle(), self->x_->in);
      // 0: EOF. A half-closed peer gives EOF too: we close rather than read again, so it cannot make the loop spin.
      if (n == 0 || n == -1) return self->close();
      // The deadline does not move: a dribbling client gains nothing. n == -2 (EAGAIN), readable no more (a stale
      // edge): serve() finds nothing new, frees an Exchange with nothing in it, and we wait again.
      self->serve();
    });
  }
  // [/excerpt:read]

  // [excerpt:deadline]
  // One timer per session, for its whole life (a watchdog, as in Asio's timeouts examples), and one deadline_:
  //   kReading    the request must be complete by deadline_ = when we started waiting for it + S; reads do not move it
  //   kWriting    the peer must keep taking bytes: deadline_ = now + S when a write starts and after each progress
  //   kHandling   no deadline: the wait is ours
  //   kLingering  Lingering::deadline(): 2 s after the last bytes came in, 5 s after lingering began at most
  // Past it, a lingering connection closes; one that was reading or writing is reset. Moving the deadline only stores
  // deadline_; re-arming the timer each time would cancel one wait and start another per request. Each new deadline
  // is later than the one the timer waits for (but linger()'s, which re-arms), so the timer can only fire early, and
  // its handler then waits again. A stale handler (the timer fired as close() ran) finds kClosed and does nothing.
  void watch(Clock::time_point until) {
    timer_.expires_at(until);
    timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->state_ == State::kClosed) return;  // cancelled by close(), or by linger()'s re-arming
      const Clock::time_point now = Clock::now();
      if (self->state_ == State::kHandling) return self->watch(now + self->loop_.opts.idle_timeout);
      if (now < self->deadline_) return self->watch(self->deadline_);  // moved on since: wait for the new one
      if (self->state_ == State::kLingering) return self->close();  // we waited long enough for the client's FIN
      self->reset();  // the pending wait or write then completes with operation_aborted
    });
  }
  // [/excerpt:deadline]

  // kWriting: the head with asio::async_write, which calls write_some until every byte is sent (short writes are
  // its job), then the file, if any. The response lives in the Exchange because its bytes must stay put until the
  // writes complete: the Exchange outlives them (serve() frees it only in kReading, ~Session after every handler).
  void send(Outgoing out) {
    state_ = State::kWriting;
    deadline_ = Clock::now() + loop_.opts.idle_timeout;  // a head is a few KB: all of it in S seconds, or reset
    x_->out = std::move(out);
    auto on_head_sent = [self = shared_from_this()](const error_code& ec, std::size_t n) {
      if (ec || self->state_ != State::kWriting) return self->reset();  // (reset() after close() does nothing)
      self->x_->out.head_sent = n;  // all of it
      self->send_file();
    };
    asio::async_write(socket_, asio::buffer(x_->out.head), on_head_sent);
  }

  // [excerpt:sendfile]
  // Asio has no sendfile(), but it lets us make our own non-blocking calls on its socket and wait for writability
  // with it: the pattern of the sendfile example in Asio's documentation. The socket is non-blocking (start());
  // send_some() (response.hpp) sends until the socket is full, with sendfile() from the saved offset;
  // async_wait(wait_write) then waits, as chapter 05 waits for EPOLLOUT. No byte of the file passes through this
  // process.
  void send_file() {
    Outgoing& out = x_->out;
    const off_t before = out.left;
    switch (send_some(socket_.native_handle(), out)) {
      case SendProgress::kDone: return sent();
      case SendProgress::kFailed: return reset();  // an error, or the file shrank: the promised length cannot be kept
      case SendProgress::kBlocked: break;
    }
    if (out.left != before) deadline_ = Clock::now() + loop_.opts.idle_timeout;  // progress: the reader reads
    socket_.async_wait(tcp::socket::wait_write, [self = shared_from_this()](const error_code& ec) {
      if (ec || self->state_ != State::kWriting) return self->reset();  // an error (or the deadline, a stop's grace)
      self->send_file();
    });
  }
  // [/excerpt:sendfile]

  void sent() {  // the whole response has gone out
    if (!x_->out.keep_alive || loop_.stopping) return linger();  // the connection's last response
    x_->out.file.reset();  // closed now, though a pipelined request keeps the Exchange (serve() frees it if not)
    deadline_ = Clock::now() + loop_.opts.idle_timeout;  // and the next request's deadline counts from now
    serve();
  }

  // [excerpt:lingering]
  // The graceful end (closing.hpp; nginx's lingering close). With bytes from the client still unread (the rest of a
  // refused upload, a request pipelined behind Connection: close), closing would send an RST, and the client's kernel
  // would drop the response it has not read yet. So shutdown(send) puts our FIN after the response, and we read and
  // throw away what comes until the client's FIN, an error, 16 MiB, or the deadline. Then close().
  void linger() {
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();  // ENOTCONN: the client has reset the connection; nothing is left to wait for
    state_ = State::kLingering;
    x_->lingering = Lingering(Clock::now());
    deadline_ = x_->lingering.deadline();
    watch(deadline_);  // earlier than the write's deadline that the timer waits for: re-arm it
    discard();
  }

  // Waits for readability, as read() does, then discard_input() (closing.hpp) reads on the stack and throws away
  // what has come, until the socket is empty.
  void discard() {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
      // ec: close()/reset() by the deadline or a stop's grace (operation_aborted)
      if (ec || self->state_ != State::kLingering) return self->close();
      Lingering& lingering = self->x_->lingering;
      // false: the client's EOF (the usual end), its reset, or 16 MiB thrown away: enough
      if (!discard_input(self->socket_.native_handle(), lingering)) return self->close();
      self->deadline_ = lingering.deadline();  // the client is still sending: wait up to 2 s after its last bytes
      self->discard();
    });
  }
  // [/excerpt:lingering]

  tcp::socket socket_;
  asio::steady_timer timer_;             // the deadline's watchdog (watch())
  asio::steady_timer delay_;             // the simulated handler's wait
  Loop& loop_;
  State state_ = State::kReading;
  Clock::time_point deadline_;           // see watch()
  std::unique_ptr<Exchange> x_;          // the request in progress and its response; none while idle (serve())
};

// What an idle connection costs us, besides what Asio keeps per socket (its epoll registration, the pending wait,
// the watchdog's pending wait): this, in one block with make_shared's counts. The socket and the two timers are most
// of it; no buffer, parser or response (those are the Exchange's, 0.7 KB, only while a request is in progress).
static_assert(sizeof(Session) <= 400, "an idle Session should stay a few hundred bytes: see Session::x_");
// [/excerpt:session]

// Runs f(session) for every live session, on the session's own executor: in a pool, a session is only ever touched
// from its strand. lock() fails for a Session already being destroyed (its destructor waits for the mutex). The
// shared_ptrs are collected first and released after the lock: dropping the last one runs ~Session, which locks.
template <class F>
void Loop::for_each_session(F f) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (Session* s : sessions)
      if (std::shared_ptr<Session> p = s->weak_from_this().lock()) live.push_back(std::move(p));
  }
  for (std::shared_ptr<Session>& s : live) asio::dispatch(s->executor(), [s, f] { f(*s); });
}

// [excerpt:accept-loop]
// Accepts one connection, then the next, forever: each handler starts the next accept before it returns. The new
// socket is bound to new_executor(), so all of the new session's handlers run there (with a pool: a new strand).
void accept(Loop& loop) {
  loop.acceptor.async_accept(loop.new_executor(), [&loop](const error_code& ec, tcp::socket socket) {
    if (loop.stopping) return;  // stop() closed the acceptor; a socket accepted just before that closes here
    if (!ec) {
      loop.retry_pause = kRetryPauseMin;
      auto session = std::make_shared<Session>(std::move(socket), loop);
      // start() on the session's executor: in a pool, its first wait could otherwise complete, and its handler
      // run on another thread, while start() is still arming the deadline here.
      asio::dispatch(session->executor(), [session] { session->start(); });
      return accept(loop);
    }
    // Out of descriptors (EMFILE, ENFILE). Linux fails accept() before it even looks at the queue, so accepting
    // again at once would spin, with or without a connection waiting. shed_pending_connection() closes the first
    // connection waiting, if any (see common/net.hpp); if none is left, we wait for the next one to arrive.
    const int fd = loop.acceptor.native_handle();
    if (ec.value() == EMFILE || ec.value() == ENFILE) {  // Asio hands us accept()'s errno as it is
      shed_pending_connection(fd);
      pollfd queue{fd, POLLIN, 0};
      if (::poll(&queue, 1, 0) == 0) {
        loop.acceptor.async_wait(tcp::acceptor::wait_read, [&loop](const error_code& wait_ec) {
          if (!wait_ec) accept(loop);  // wait_ec: stop() closed the acceptor
        });
        return;
      }
    }
    // Connections still queued, or another error that may last (ENOBUFS, ENOMEM...): retry after a pause that
    // doubles with each failure in a row, as Go's http.Server does. Shedding cannot always make progress: another
    // thread may take the descriptor it frees, and then only time (connections closing) will help.
    // (Asio retries ECONNABORTED and EPROTO itself: they never reach this handler.)
    loop.accept_retry.expires_after(loop.retry_pause);
    loop.retry_pause = std::min(2 * loop.retry_pause, kRetryPauseMax);
    loop.accept_retry.async_wait([&loop](const error_code& retry_ec) {
      if (!retry_ec) accept(loop);  // after a stop: cancelled, or the accept fails at once on the closed acceptor
    });
  });
}
// [/excerpt:accept-loop]

// [excerpt:stop]
// Runs on the loop's executor, from its signal_set. Once everything below has finished, the io_context has no
// operation left, and run() returns by itself in every thread: the acceptor is closed, each session either closes
// now (idle) or finishes its response and lingers, and the grace timer is cancelled by the last session to go (or
// fires first, and resets the sessions still open).
void Loop::stop() {
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);  // the pending accept (or wait) completes with operation_aborted
  accept_retry.cancel();
  for_each_session([](Session& s) { s.stop_if_idle(); });
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (sessions.empty()) return;
  }
  grace.expires_after(kStopGrace);
  grace.async_wait([this](const error_code& ec) {
    if (ec) return;                                     // cancelled: every session finished in time
    for_each_session([](Session& s) { s.reset(); });  // out of time: reset every connection still open
  });
}
// [/excerpt:stop]

}  // namespace

int main(int argc, char** argv) {
  const Model model{"07-asio", default_thread_count(), "",
                    {{"--topology", "T", "per-thread (default), single or pool: how threads share the work"},
                     kProcessesFlag}};
  const Options opts = options_or_exit(argc, argv, model);
  const auto flag = opts.extra.find("--topology");
  const std::string topology = flag == opts.extra.end() ? "per-thread" : flag->second;
  if (topology != "per-thread" && topology != "single" && topology != "pool")
    usage_error(model, "--topology takes per-thread, single or pool, not '" + topology + "'");
  // single ignores the default thread count, but refuses to ignore an explicit --threads N other than 1.
  const bool threads_given = std::find(argv + 1, argv + argc, std::string_view("--threads")) != argv + argc;
  if (topology == "single" && threads_given && opts.threads != 1)
    usage_error(model, "--topology single runs one thread: --threads must be 1 (or left out)");
  const int loop_count = topology == "per-thread" ? opts.threads : 1;
  const int threads_per_loop = topology == "pool" ? opts.threads : 1;
  start_workers(opts, model, loop_count);  // --processes P: from here on, in each of P workers (workers.hpp)

  // Stop signals: asio::signal_set, not start_process(). Both install a SIGINT/SIGTERM handler with sigaction(),
  // and only the last one installed would run. Asio's handler tells every signal_set in the process, so each loop
  // hears the signal on its own executor, as an ordinary completion. So we do start_process()'s other two jobs here.
  ::signal(SIGPIPE, SIG_IGN);  // Asio sends with MSG_NOSIGNAL, but sendfile() to a closed peer raises SIGPIPE
  raise_fd_limit();

  // The loops (and their signal_sets) exist before listen_sockets() prints the "listening on" line, so that a
  // SIGTERM sent as soon as a script reads that line finds Asio's handler and not the default one, which kills.
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < loop_count; ++i) loops.push_back(std::make_unique<Loop>(opts, threads_per_loop));
  std::vector<Fd> listeners = worker_listen_sockets(opts, loop_count);  // one SO_REUSEPORT listener per loop
  const tcp protocol = opts.host.find(':') == std::string::npos ? tcp::v4() : tcp::v6();
  for (std::size_t i = 0; i < loops.size(); ++i) {
    Loop& loop = *loops[i];
    error_code ec;
    loop.acceptor.assign(protocol, listeners[i].release(), ec);  // the acceptor now owns (and will close) the fd
    if (ec) fail_startup("cannot hand the listener to Asio: " + ec.message());
    loop.signals.async_wait([&loop](const error_code& signal_ec, int) {
      if (!signal_ec) loop.stop();
    });
    accept(loop);
  }

  // Each run() returns once its io_context has no operation left, which happens only after a stop (until then
  // there is always an accept and a signal wait pending). No session is left then, so destroying the loops at the
  // end of main() destroys no Session, and nothing touches a Loop after it is gone.
  std::vector<std::thread> threads;
  for (auto& loop : loops)
    for (int i = 0; i < threads_per_loop; ++i) threads.emplace_back([&loop] { loop->ioc.run(); });
  for (std::thread& t : threads) t.join();
  return 0;
}
