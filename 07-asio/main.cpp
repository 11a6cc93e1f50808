// 07-asio: Boost.Asio, completion handlers, in the three classic thread topologies.
//
// The event loops of chapter 05, with Asio running them. Instead of asking "which sockets are ready?" we start an
// operation (accept, read, write, wait for a timer) and hand it a lambda; Asio calls the lambda when the operation
// has completed, and the lambda tells the connection engine (common/connection.hpp) what happened, then starts what
// it answers. On Linux Asio still waits in epoll underneath, so the numbers should match 05's.
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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <string_view>

#include "../common/asio_support.hpp"  // Boost.Asio on epoll, or standalone Asio on io_uring (-DPSP_ASIO_IO_URING)
#include "../common/connection.hpp"
#include "../common/net.hpp"
#include "../common/response.hpp"
#include "../common/workers.hpp"

namespace {

constexpr std::size_t kReadSize = 4096;  // one read: the parser answers before a head grows far past its 8 KiB limit

class Session;

// [excerpt:topology]
// One io_context, its listener, and the sessions it accepted; run by one thread, or by a pool (--topology pool).
// With one thread nothing here is shared. With a pool, the loop's own handlers (accept, the stop) run on one
// strand (`executor`), each session's on a strand of its own, and what both touch is a mutex, an atomic or const:
// the engine is read-only, and each Connection it is handed is touched on its session's strand only.
struct Loop {
  Loop(const Options& options, int threads)
      : engine(options), ioc(threads), pooled(threads > 1), executor(new_executor()) {}
  // The executor of a new session or of the loop itself: with a pool, a new strand; else the io_context's own.
  asio::any_io_executor new_executor() {
    if (pooled) return asio::make_strand(ioc);
    return ioc.get_executor();
  }
  void listen_on(Fd listener);
  void run() { ioc.run(); }  // returns when nothing is pending: after a stop, once every session has gone
  void stop();

  const ConnectionEngine engine;  // every connection's HTTP life (connection.hpp)
  asio::io_context ioc;           // its concurrency hint: how many threads will run it
  const bool pooled;
  asio::any_io_executor executor;
  tcp::acceptor acceptor{executor};
  asio::posix::stream_descriptor stop_signal{executor};  // readable once SIGINT or SIGTERM came (lifecycle.hpp)
  AcceptRetry accept_retry{executor};  // what a failed accept does (asio_support.hpp)
  asio::steady_timer grace{executor};  // bounds how long a stop waits for the connections still open
  std::atomic<bool> stopping{false};   // read by the sessions, from any thread of a pool
  SessionSet<Session> sessions;        // the live ones, for the stop: a mutex inside (asio_support.hpp)
};
// [/excerpt:topology]

// [excerpt:session]
// One connection: a socket, two timers, and the Connection that the engine reads and changes. What to do next is
// always the engine's answer, a Next; apply() starts the operation it asks for, whose handler tells the engine:
//
//   Do::kRead          idle: async_wait(wait_read), then recv(); mid-request: async_read_some    -> on_bytes()
//   Do::kSend          the head: async_write; a file: sendfile() until the socket is full        -> on_sent*()
//   Do::kWaitWritable  async_wait(wait_write)                                                    -> on_writable()
//   Do::kWait          nothing: the delay_ timer is the handler at work; Next::arm: timer_        -> on_timer()
//
// Who owns it: the handlers of its pending operations, each holding `self`, a shared_ptr; nothing else does (the
// Loop's list is not owning). Until the engine says kClose or kReset, some handler is always pending; close() then
// cancels them all, and each runs soon, finds the connection done and starts nothing. The Session dies when the last
// returns, never earlier, so no operation outlives what it uses (the Exchange that send_span() points into goes with
// the Session: the engine's release()). Its handlers run on its executor, one at a time: in a pool, a strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Loop& loop)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), delay_(socket_.get_executor()), loop_(loop) {
    loop_.sessions.add(this);
  }
  // The socket closes here, once nothing is pending on it: a descriptor closed under a pending operation can go to
  // the next accept() first, and Asio 1.22 on io_uring then restarts the old operation on the new connection.
  // Explicitly: the tcp::socket destructor would turn SO_LINGER off, and a reset into a plain close.
  ~Session() {
    error_code ignored;
    socket_.close(ignored);
    restore_spare();  // if a shed lost the spare (net.hpp), it takes the number just freed
    // The last session to go ends a stop's grace period: on the loop's executor, as this may run on any thread.
    if (loop_.sessions.remove_and_empty(this) && loop_.stopping)
      asio::post(loop_.executor, [&loop = loop_] { loop.grace.cancel(); });
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }
  // These three run on the session's executor, like every handler below.
  void start() {
    error_code ec;  // our own recv() and sendfile() must never block the loop: O_NONBLOCK, and Asio told so
    socket_.native_non_blocking(true, ec);
    if (!ec) apply(engine().start(life_, Clock::now()));  // else nothing is pending: the Session dies at once
  }
  void stop() { apply(engine().on_stop(life_, Clock::now())); }
  void grace_over() { apply(engine().on_grace_over(life_)); }

 private:
  const ConnectionEngine& engine() const { return loop_.engine; }

  // Carries out what the engine answered (THE CONTRACT in connection.hpp), until an operation is pending.
  void apply(Next next) {
    for (;;) {
      if (next.arm) arm(next);
      error_code ec;
      if (next.shutdown) socket_.shutdown(tcp::socket::shutdown_send, ec);  // LINGERING begins: our FIN
      if (ec) {  // ENOTCONN: the client has reset the connection
        next = engine().on_peer_gone(life_);
        continue;
      }
      if (next.what != Do::kUnchanged) doing_ = next.what;
      switch (next.what) {
        case Do::kUnchanged:  // go on: after a read's handler (LINGERING threw the bytes away), read again
          if (doing_ == Do::kRead && !reading_ && !life_.done()) read();
          return;
        case Do::kRead: return read();
        case Do::kSend:
          if (engine().send_span(life_).head.empty()) {  // the file: see wait_writable()
            next = engine().on_sent(life_, send_some(socket_.native_handle(), *engine().outgoing(life_)), Clock::now());
            continue;
          }
          return write_head();
        case Do::kWaitWritable: return wait_writable();
        case Do::kWait: return;  // arm() has set delay_: the simulated handler works; bytes wait in the kernel
        case Do::kReset:         // closing.hpp: with SO_LINGER {on, 0 s} the close sends an RST
          socket_.set_option(tcp::socket::linger(true, 0), ec);
          return close();
        case Do::kClose: return close();
      }
    }
  }

  // Do::kRead. Idle between requests (no Exchange: life_.busy() is false), the connection waits for readability
  // and then reads itself, into the stack. Not async_read_some(): a pending read's buffer must stay put until it
  // completes, so every idle connection would pin one, and a million idle connections a million buffers; a wait
  // pins nothing. It misses nothing that came first (pipelined, or sent while we answered): on epoll each wait
  // re-arms the socket with EPOLL_CTL_MOD, and the kernel then reports one already readable; on io_uring the wait
  // is a POLL_ADD, which completes at once on a readable socket. Once a request is under way (its Exchange exists),
  // async_read_some() carries the rest of it, into a buffer that exists only while the request is in progress.
  void read() {
    const bool due = engine().deadline(life_) <= Clock::now();  // the stop's deadline is now (see receive())
    // The stop: the pending wait or read is taken back, and its handler calls receive(). (Asio 1.22 on io_uring
    // retries a cancelled read, see close(): a request under way then ends when its bytes come, or at the grace.)
    error_code ignored;
    if (reading_ && due) socket_.cancel(ignored);
    if (reading_) return;  // one read or wait at a time
    if (due) return receive();
    reading_ = true;
    if (!life_.busy()) {
      buffer_.reset();  // the last request's, if it needed one
      socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
        self->reading_ = false;
        if (ec && ec != asio::error::operation_aborted) return self->apply(self->engine().on_peer_gone(self->life_));
        self->receive();  // operation_aborted: close() (receive() does nothing) or the stop (it looks)
      });
      return;
    }
    if (!buffer_) buffer_ = std::make_unique<char[]>(kReadSize);
    socket_.async_read_some(asio::buffer(buffer_.get(), kReadSize),
                            [self = shared_from_this()](const error_code& ec, std::size_t n) {
                              self->reading_ = false;
                              if (ec == asio::error::operation_aborted) return self->receive();  // as above
                              if (ec) return self->apply(self->engine().on_peer_gone(self->life_));  // EOF, reset
                              const std::string_view bytes(self->buffer_.get(), n);  // copied by the engine
                              self->apply(self->engine().on_bytes(self->life_, bytes, Clock::now()));
                            });
  }

  // One recv() of what is there, without waiting: after a wait said readable, or once the deadline has come. The
  // stop makes a READING connection's deadline now (connection.hpp), so a request already sent is read and answered
  // (Connection: close) before on_timer() ends the connection, as its timer would. No read is pending meanwhile.
  void receive() {
    if (life_.done()) return;  // close() cancelled the read: nothing more to do
    char bytes[kReadSize];
    const ssize_t n = ::recv(socket_.native_handle(), bytes, sizeof bytes, 0);
    const Clock::time_point now = Clock::now();
    if (n > 0) return apply(engine().on_bytes(life_, std::string_view(bytes, static_cast<std::size_t>(n)), now));
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))  // EOF (a half-close too), an error
      return apply(engine().on_peer_gone(life_));
    if (now < engine().deadline(life_)) return read();  // a stale readiness: wait again
    apply(engine().on_timer(life_, life_.epoch(), now));
  }

  // [excerpt:deadline]
  // Next::arm (THE CONTRACT, 3). Two timers: delay_ for the handler's delay, timer_ for every deadline. The delay
  // comes on every request and ends long before the deadline timer_ waits for; on one timer it would cancel that
  // wait and start a new one each time. A deadline that moves later needs nothing: timer_ fires early, on_timer()
  // says so and asks for a new one. So timer_ is re-armed early only when a deadline moves earlier than its pending
  // wait (LINGERING's), and a deadline already past (the stop's) is not armed at all: receive() decides at once.
  void arm(const Next& next) {
    if (next.what == Do::kWait) {  // the handler's delay: a new epoch; nothing else is pending on delay_
      delay_.expires_at(next.deadline);
      delay_.async_wait([self = shared_from_this(), epoch = next.epoch](const error_code& ec) {
        if (!ec) self->apply(self->engine().on_timer(self->life_, epoch, Clock::now()));  // ec: close() cancelled it
      });
      return;
    }
    if (next.what == Do::kRead && next.deadline <= Clock::now()) return;
    timer_epoch_ = next.epoch;  // a pending wait that ends earlier is this epoch's timer now
    if (timer_due_ <= next.deadline) return;
    timer_due_ = next.deadline;
    timer_.expires_at(next.deadline);  // cancels the pending wait, if any
    timer_.async_wait([self = shared_from_this(), due = next.deadline](const error_code& ec) {
      if (ec || due != self->timer_due_) return;  // cancelled by close(), or by the expires_at() above
      self->timer_due_ = Clock::time_point::max();
      self->apply(self->engine().on_timer(self->life_, self->timer_epoch_, Clock::now()));
    });
  }
  // [/excerpt:deadline]

  // The head: async_write writes until every byte has gone (short writes are its job). Its bytes are the Exchange's.
  void write_head() {
    const std::string_view head = engine().send_span(life_).head;
    asio::async_write(socket_, asio::buffer(head.data(), head.size()),
                      [self = shared_from_this()](const error_code& ec, std::size_t n) {
                        const Clock::time_point now = Clock::now();
                        self->apply(ec ? self->engine().on_sent(self->life_, SendProgress::kFailed, now)
                                       : self->engine().on_sent_bytes(self->life_, n, now));
                      });
  }

  // [excerpt:sendfile]
  // A file's bytes: Asio has no sendfile(), but it lets us make our own non-blocking calls on its socket and wait
  // for writability with it (the pattern of the sendfile example in Asio's documentation). In apply(), send_some()
  // (response.hpp) sends with sendfile() from the saved offset until the socket is full; the engine then answers
  // kWaitWritable, and this waits, as chapter 05 waits for EPOLLOUT. No byte of the file passes through here.
  void wait_writable() {
    socket_.async_wait(tcp::socket::wait_write, [self = shared_from_this()](const error_code& ec) {
      if (ec) return self->apply(self->engine().on_sent(self->life_, SendProgress::kFailed, Clock::now()));
      self->apply(self->engine().on_writable(self->life_));
    });
  }
  // [/excerpt:sendfile]

  // kClose, kReset: each pending handler runs soon, with operation_aborted or its result. ~Session closes the socket.
  void close() {
    error_code ignored;
    // Standalone Asio 1.22 on io_uring does not end a cancelled read of a non-blocking socket: it tries the recv()
    // again and waits anew (io_uring_socket_recv_op's do_perform). After shutdown(receive) that recv() says EOF.
    if (reading_) socket_.shutdown(tcp::socket::shutdown_receive, ignored);
    socket_.cancel(ignored);
    timer_.cancel();
    delay_.cancel();
  }

  tcp::socket socket_;
  asio::steady_timer timer_;  // the deadlines (arm())
  asio::steady_timer delay_;  // the simulated handler's wait
  Loop& loop_;
  Connection life_;                 // its HTTP state, the engine's: 24 bytes while idle (connection.hpp)
  std::unique_ptr<char[]> buffer_;  // async_read_some()'s, only while a request is in progress (read())
  Clock::time_point timer_due_ = Clock::time_point::max();  // when timer_'s pending wait ends; max: none pending
  std::uint32_t timer_epoch_ = 0;  // the epoch that wait reports to on_timer()
  Do doing_ = Do::kRead;           // the last thing the engine asked for (kUnchanged: go on with it)
  bool reading_ = false;           // a read or a wait for input is pending: it alone may take the socket's input
};
// What an idle connection costs us, besides Asio's per-socket state and the pending waits: this, in one block with
// make_shared's counts; no buffer, parser or response (those are the Exchange's, while a request is in progress).
static_assert(sizeof(Session) <= 400, "an idle Session should stay a few hundred bytes: see Connection");
// [/excerpt:session]

// [excerpt:accept-loop]
// Accepts one connection, then the next, forever: each handler starts the next accept before it returns. The new
// socket is bound to new_executor(), so all of the new session's handlers run there (with a pool: a new strand).
void accept(Loop& loop) {
  loop.acceptor.async_accept(loop.new_executor(), [&loop](const error_code& ec, tcp::socket socket) {
    if (loop.stopping) return;  // stop() closed the acceptor; a socket accepted just before that closes here
    if (ec) return loop.accept_retry.after(loop.acceptor, ec, [&loop] { accept(loop); });  // EMFILE: shed, pause
    loop.accept_retry.accepted();
    auto session = std::make_shared<Session>(std::move(socket), loop);
    // start() on the session's executor: in a pool, its first wait could otherwise complete, and its handler run
    // on another thread, while start() is still arming the deadline here.
    asio::dispatch(session->executor(), [session] { session->start(); });
    accept(loop);
  });
}
// [/excerpt:accept-loop]

// The loop's listener and its stop. The stop is lifecycle.hpp's, as in 05: the signal handler sets the flag that
// respond() reads, so a response made after the signal says "Connection: close" even before this loop hears of it,
// and makes stop_fd() readable, which each loop waits for (an asio::signal_set would run after our handlers only).
void Loop::listen_on(Fd listener) {
  error_code ec;
  acceptor.assign(engine.options().host.find(':') == std::string::npos ? tcp::v4() : tcp::v6(), listener.release(),
                  ec);  // the acceptor now owns (and will close) the fd
  if (!ec) stop_signal.assign(::dup(stop_fd()), ec);  // a descriptor of its own: Asio closes what it is given
  if (ec) fail_startup("cannot hand the listener or the stop to Asio: " + ec.message());
  stop_signal.async_wait(asio::posix::stream_descriptor::wait_read, [this](const error_code& stop_ec) {
    if (!stop_ec) stop();
  });
  accept(*this);
}

// [excerpt:stop]
// Runs on the loop's executor, once stop_fd() is readable. Once everything below has finished, the io_context has no
// operation left, and run() returns by itself in every thread: the acceptor is closed, each session hears the stop
// (the engine's on_stop()) and closes now (idle, after a last look for a request already sent) or finishes its
// response, with Connection: close, and lingers; the last session to go cancels the grace timer (or it fires first,
// and the engine resets the sessions still open).
void Loop::stop() {
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);  // the pending accept (or wait) completes with operation_aborted
  accept_retry.cancel();
  if (sessions.for_each([](Session& s) { s.stop(); })) return;  // none open
  grace.expires_after(kStopGrace);
  grace.async_wait([this](const error_code& ec) {
    if (!ec) sessions.for_each([](Session& s) { s.grace_over(); });  // ec: cancelled, all finished in time
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
  // per-thread: --threads loops of one thread; single: one of one; pool: one of --threads (each loop, in each of
  // the --processes workers). Each run() returns after a stop, once no session is left.
  run_loops<Loop>(opts, model, topology == "per-thread" ? opts.threads : 1, topology == "pool" ? opts.threads : 1);
  return 0;
}
