// 07-asio: Boost.Asio, one io_context per thread, completion handlers.
//
// The event loops of chapter 05, with Asio running them. Instead of asking "which sockets are ready?" we start an
// operation (accept, read, write, wait for a timer) and hand it a lambda; Asio calls the lambda when the operation
// has completed. On Linux Asio still waits in epoll underneath, so the numbers should match 05's. What changes is
// where a connection's state machine lives: in the chain of handlers, each of which starts the next operation.
// Each thread runs its own io_context with its own SO_REUSEPORT listener, as in 05: the threads share nothing.
//
// Needs:  Linux, g++ with C++17, the Boost 1.74+ headers (Debian 12: apt-get install libboost-dev); nothing to link.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server            (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#if defined(__SANITIZE_THREAD__)
// Asio's fenced blocks use std::atomic_thread_fence, which ThreadSanitizer does not model; GCC warns (-Wtsan) in
// every handler, which -Werror turns into errors. The fences are Asio's business; the races TSan looks for are ours.
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include <signal.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// How long to wait before accepting again after accept() failed: doubled after each failure in a row.
constexpr std::chrono::milliseconds kRetryPauseMin{1}, kRetryPauseMax{100};

class Session;

// One event loop: an io_context, the one thread that runs it, its listener and the sessions it accepted. Nothing in
// it is touched by another thread, so nothing needs a lock. (Other topologies, such as one io_context run by N
// threads or one acceptor handing sockets to N loops, would change Loop and accept(), not Session.)
struct Loop {
  explicit Loop(const Options& options) : opts(options) {}
  void stop();

  const Options& opts;
  asio::io_context ioc{1};  // concurrency hint 1: a single thread runs it
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc, SIGINT, SIGTERM};
  asio::steady_timer accept_retry{ioc};   // the pause after a failed accept
  std::chrono::milliseconds retry_pause = kRetryPauseMin;
  asio::steady_timer grace{ioc};          // bounds how long a stop waits for the responses in flight
  std::unordered_set<Session*> sessions;  // the live sessions: each adds itself at birth, removes itself at death
  bool stopping = false;
};

// [excerpt:session]
// One connection, and its state machine (parse is serve(), which looks at what is buffered):
//
//                 +------------------------ written, keep-alive ---------------------+
//                 v                                                                  |
//   accepted --> parse --complete--> kHandling --delay over--> kWriting --written--+--+
//                 | ^  \                                         ^                 |
//      incomplete | |   +--malformed: error_response -------------+                 +--> close: Connection: close,
//                 v | bytes arrived                                                       a stop, or a write error
//               kReading --EOF, error, idle timeout, stop--> close
//
// Who owns it: the handlers of its pending operations, each holding `self`, a shared_ptr; nothing else does (the
// Loop's list is not owning). Until close(), a read, the delay or a write is always pending, and its handler starts
// the next one. close() closes the socket and cancels both timers, so every handler still pending runs soon with an
// error and starts nothing. The Session dies when the last of them returns: after close(), never before, so no
// operation outlives the buffers it uses.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Loop& loop)
      : socket_(std::move(socket)), idle_(loop.ioc), delay_(loop.ioc), loop_(loop) {
    loop_.sessions.insert(this);
  }
  ~Session() {
    loop_.sessions.erase(this);
    if (loop_.stopping && loop_.sessions.empty()) loop_.grace.cancel();  // the last one is done: stop waiting
  }

  void start() { serve(); }

  void stop_if_idle() {  // a stop closes the connections that are waiting for a request
    if (state_ == State::kReading) close();
  }

  // The one close path. Closing an Asio socket twice is harmless: the second close() does nothing.
  void close() {
    state_ = State::kClosed;
    error_code ignored;
    socket_.close(ignored);  // the pending read or write completes with operation_aborted
    idle_.cancel();
    delay_.cancel();
  }

 private:
  enum class State { kReading, kHandling, kWriting, kClosed };

  // The protocol of every chapter: answer what is buffered; read more only when the next request is incomplete.
  void serve() {
    http::Parse p = http::parse_request(in_);
    if (p.status == http::Parse::kIncomplete) {
      if (loop_.stopping) return close();  // a stop closes a connection as soon as it waits for a request
      return read();
    }
    if (p.status == http::Parse::kError) return write(http::error_response(p.error), false, 0);
    state_ = State::kHandling;
    if (!handler_needs_timer(loop_.opts)) {
      run_handler_here(loop_.opts);  // --handler sleep/spin: stalls this whole loop, on purpose (the labs)
      return respond(p.request, p.length);
    }
    delay_.expires_after(loop_.opts.delay);
    delay_.async_wait([self = shared_from_this(), p](const error_code& ec) {
      if (ec || self->state_ != State::kHandling) return;  // close() came first (the stop's grace ran out)
      self->respond(p.request, p.length);
    });
  }

  void respond(http::Request request, std::size_t consumed) {
    if (loop_.stopping) request.keep_alive = false;  // say "Connection: close": we close after this response
    write(http::response(request), request.keep_alive, consumed);
  }

  void read() {
    state_ = State::kReading;
    arm_idle_timer();
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](const error_code& ec, std::size_t n) {
      self->idle_.cancel();
      // ec: EOF, a reset, or close() by the idle timer or a stop (operation_aborted). A half-closed peer gives EOF
      // too: we close rather than read again, so it cannot make the loop spin.
      if (ec || self->state_ != State::kReading) return self->close();
      self->in_.append(self->chunk_.data(), n);
      self->serve();
    });
  }

  // [excerpt:idle-timeout]
  // Armed while the session waits for request bytes, cancelled when a read completes, re-armed by the next read.
  // The race: the timer and the read can complete in the same turn of the loop. Both handlers are then queued, and
  // cancel() cannot recall the timer's, because it only cancels waits that have not completed yet. So the timer's
  // handler checks the facts rather than the fact that it ran: it closes only if the session still waits for
  // bytes and its deadline has really passed (a read that came first and re-armed the timer moved the expiry
  // later). One thread runs both handlers, one after the other, so each sees what the other left.
  void arm_idle_timer() {
    idle_.expires_after(loop_.opts.idle_timeout);
    idle_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->state_ != State::kReading) return;
      if (self->idle_.expiry() > asio::steady_timer::clock_type::now()) return;  // re-armed meanwhile
      self->close();  // the pending read then completes with operation_aborted
    });
  }
  // [/excerpt:idle-timeout]

  // asio::async_write calls write_some until every byte of out_ is sent (or an error): it handles short writes.
  // out_ is a member because the bytes must stay put until the write completes.
  void write(std::string response, bool keep_open, std::size_t consumed) {
    state_ = State::kWriting;
    out_ = std::move(response);
    auto on_written = [self = shared_from_this(), keep_open, consumed](const error_code& ec, std::size_t) {
      if (ec || !keep_open || self->loop_.stopping) return self->close();
      self->in_.erase(0, consumed);  // the next pipelined request, if any, is now at the front
      self->serve();
    };
    asio::async_write(socket_, asio::buffer(out_), on_written);
  }

  tcp::socket socket_;
  asio::steady_timer idle_;              // the idle timeout, armed only in kReading
  asio::steady_timer delay_;             // the simulated handler's wait
  Loop& loop_;
  State state_ = State::kReading;
  std::string in_;                       // received and not yet answered: maybe several pipelined requests
  std::string out_;                      // the response being written
  std::array<char, 4096> chunk_;         // one read's bytes; at most 4 KiB, like recv_into() in common/net.hpp
};
// [/excerpt:session]

// [excerpt:accept-loop]
// Accepts one connection, then the next, forever: each handler starts the next accept before it returns.
void accept(Loop& loop) {
  loop.acceptor.async_accept([&loop](const error_code& ec, tcp::socket socket) {
    if (loop.stopping) return;  // stop() closed the acceptor; a socket accepted just before that closes here
    if (!ec) {
      loop.retry_pause = kRetryPauseMin;
      error_code ignored;  // TCP_NODELAY: a whole response per write, so Nagle could only delay pipelined replies
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), loop)->start();
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
// Runs in the loop's own thread, from its signal_set. Once everything below has finished, the io_context has no
// operation left, and run() returns by itself: the acceptor is closed, each session either closed now or finishes
// its response and then closes, and the grace timer is cancelled by the last session to go (or fires first).
void Loop::stop() {
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);  // the pending accept (or wait) completes with operation_aborted
  accept_retry.cancel();
  for (Session* s : sessions) s->stop_if_idle();  // close() only cancels: no handler runs, no Session dies, here
  if (sessions.empty()) return;
  grace.expires_after(kStopGrace);
  grace.async_wait([this](const error_code& ec) {
    if (ec) return;                           // cancelled: every session finished in time
    for (Session* s : sessions) s->close();  // out of time: drop the responses still in flight
  });
}
// [/excerpt:stop]

}  // namespace

int main(int argc, char** argv) {
  const Options opts = options_or_exit(argc, argv, {"07-asio", default_thread_count(), ""});

  // Stop signals: asio::signal_set, not start_process(). Both install a SIGINT/SIGTERM handler with sigaction(),
  // and only the last one installed would run. Asio's handler tells every signal_set in the process, so each loop
  // hears the signal in its own thread, as an ordinary completion. So we do start_process()'s other two jobs here.
  ::signal(SIGPIPE, SIG_IGN);  // belt and braces: Asio already sends with MSG_NOSIGNAL
  raise_fd_limit();

  // The loops (and their signal_sets) exist before listen_sockets() prints the "listening on" line, so that a
  // SIGTERM sent as soon as a script reads that line finds Asio's handler and not the default one, which kills.
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < opts.threads; ++i) loops.push_back(std::make_unique<Loop>(opts));
  std::vector<Fd> listeners = listen_sockets(opts, opts.threads);  // one SO_REUSEPORT listener per loop
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
  for (auto& loop : loops) threads.emplace_back([&loop] { loop->ioc.run(); });
  for (std::thread& t : threads) t.join();
  return 0;
}
