// common/asio_support.hpp: what chapter 07 needs around its lesson: which Asio it is built on (and the workaround
// that one needs), what it does after a failed accept, and the set of sessions a stop must reach.
//
//   g++ ... main.cpp                               Boost.Asio (Boost 1.74+ headers), waiting in epoll
//   g++ ... -DPSP_ASIO_IO_URING main.cpp -luring   standalone Asio 1.22 (Debian: libasio-dev), whose sockets and
//                                                  timers then wait in io_uring (build/07-asio-uring)
//
// Boost.Asio has the io_uring backend only from Boost 1.78 on; Debian 12's default Boost is 1.74. Either way the
// names below are the same: `asio::`, `error_code`, `tcp`, `Clock`.
#pragma once

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "net.hpp"

#if defined(__SANITIZE_THREAD__)
// Asio's fenced blocks use std::atomic_thread_fence, which ThreadSanitizer does not model; GCC warns (-Wtsan) in
// every handler, which -Werror turns into errors. The fences are Asio's business; the races TSan looks for are ours.
#pragma GCC diagnostic ignored "-Wtsan"
#endif

#if defined(PSP_ASIO_IO_URING)
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

// After accept() failed: when to accept again. Out of descriptors (EMFILE, ENFILE), Linux fails accept() before it
// looks at the queue, so accepting again at once would spin: shed the first connection waiting, if any (net.hpp),
// and if none is left, wait for the next to arrive. Connections still queued, or another error that may last
// (ENOBUFS...): a pause that doubles with each failure in a row, as Go's http.Server does (another thread may take
// the descriptor a shed freed). Asio retries ECONNABORTED and EPROTO itself: they never come here.
class AcceptRetry {
 public:
  explicit AcceptRetry(const asio::any_io_executor& executor) : timer_(executor) {}
  void accepted() { pause_ = kPauseMin; }
  void cancel() { timer_.cancel(); }  // the stop

  template <class Again>
  void after(tcp::acceptor& acceptor, const error_code& ec, Again again) {
    const int fd = acceptor.native_handle();
    if (ec.value() == EMFILE || ec.value() == ENFILE) {  // Asio hands us accept()'s errno as it is
      shed_pending_connection(fd);
      pollfd queue{fd, POLLIN, 0};
      if (::poll(&queue, 1, 0) == 0) {
        acceptor.async_wait(tcp::acceptor::wait_read, [again](const error_code& wait_ec) {
          if (!wait_ec) again();  // wait_ec: the stop closed the acceptor
        });
        return;
      }
    }
    timer_.expires_after(pause_);
    pause_ = std::min(2 * pause_, kPauseMax);
    timer_.async_wait([again](const error_code& retry_ec) {
      if (!retry_ec) again();  // after a stop: cancelled, or the accept fails at once on the closed acceptor
    });
  }

 private:
  static constexpr std::chrono::milliseconds kPauseMin{1}, kPauseMax{100};
  asio::steady_timer timer_;
  std::chrono::milliseconds pause_ = kPauseMin;
};

// The live sessions of one loop, so that a stop reaches each: every Session adds itself at birth and removes itself
// at death; the set does not own them. A mutex, since with a pool births, deaths and the stop run on any thread.
template <class Session>
class SessionSet {
 public:
  void add(Session* s) {
    std::lock_guard<std::mutex> lock(mutex_);
    sessions_.insert(s);
  }
  bool remove_and_empty(Session* s) {  // true when s was the last
    std::lock_guard<std::mutex> lock(mutex_);
    sessions_.erase(s);
    return sessions_.empty();
  }
  // Runs f(session) for each, on its own executor (in a pool, its strand, the only place a session is touched).
  // lock() fails for a Session being destroyed; the shared_ptrs are released after the lock, as releasing the last
  // one runs ~Session, which removes it. True if there was none.
  template <class F>
  bool for_each(F f) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (sessions_.empty()) return true;
      for (Session* s : sessions_)
        if (std::shared_ptr<Session> p = s->weak_from_this().lock()) live.push_back(std::move(p));
    }
    for (std::shared_ptr<Session>& s : live) asio::dispatch(s->executor(), [s, f] { f(*s); });
    return false;
  }

 private:
  std::mutex mutex_;
  std::unordered_set<Session*> sessions_;
};
