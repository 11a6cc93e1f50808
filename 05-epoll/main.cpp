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
#include <sys/epoll.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/readiness.hpp"
#include "../common/timers.hpp"
#include "../common/workers.hpp"

namespace {

// At most this many new connections per turn: enough to empty a busy listen queue, few enough that a flood of
// connects cannot starve the connections already open. Readiness is level-triggered, so the rest wait one turn.
constexpr int kAcceptBatch = 64;

constexpr int kMaxEvents = 256;  // ready fds taken per epoll_pwait2(); more stay reported for the next turn

// Each connection's life (reading, the handler's timer, writing, keeping it or ending it, its deadlines, the stop)
// is the connection engine's (common/connection.hpp: its diagram shows the states); what to do once a socket is
// ready is shared by 03 and 05 (common/readiness.hpp). What is left here is how the loop waits, and how it tells
// the kernel what each fd waits for.
class Loop : public ReadinessLoop<Loop> {
 public:
  explicit Loop(const Options& opts) : ReadinessLoop(opts), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    // epoll_pwait2() is Linux 5.11+, and a container's seccomp profile may refuse it: try it before listening.
    epoll_event probe{};
    timespec zero{};
    if (!epoll_.valid() || ::epoll_pwait2(epoll_.get(), &probe, 1, &zero, nullptr) < 0)
      fail_startup(std::string("epoll_pwait2() is not available here (it needs Linux 5.11+): ") + std::strerror(errno));
    if (!control(EPOLL_CTL_ADD, stop_fd(), EPOLLIN)) fail_startup("cannot watch the stop fd");  // SIGINT, SIGTERM
  }
  void listen_on(Fd listener) {
    listener_ = std::move(listener);
    if (!control(EPOLL_CTL_ADD, listener_.get(), 0)) fail_startup("cannot add the listener to an epoll instance");
    watch_listener(true);
  }

  // [excerpt:loop]
  // Runs until a stop has been requested and the responses in flight are written (or kStopGrace has passed).
  void run() {
    while (begin_turn()) {  // the due timers and the stop (readiness.hpp)
      // The watched set lives in the kernel; only the timeout is ours, in nanoseconds. (epoll_wait() counts whole
      // milliseconds: rounded up, a 1 ms handler could take 2 ms; rounded down, the loop would spin until due.)
      epoll_event events[kMaxEvents];
      std::optional<std::chrono::nanoseconds> wait = time_to_next();
      timespec timeout = to_timespec(wait.value_or(std::chrono::nanoseconds(0)));
      int ready = ::epoll_pwait2(epoll_.get(), events, kMaxEvents, wait ? &timeout : nullptr, nullptr);
      if (ready < 0) continue;  // EINTR: a signal arrived; the next turn looks at the stop flag

      // O(ready): epoll hands back only the fds that are ready, with the fd we stored in each.
      bool listener_ready = false;
      for (int i = 0; i < ready; ++i) {
        if (events[i].data.fd == listener_.get()) listener_ready = true;
        auto it = conns_.find(events[i].data.fd);
        if (it == conns_.end()) continue;  // the listener, the stop fd, or a connection closed earlier this turn
        if (events[i].events & (EPOLLERR | EPOLLHUP)) on_hangup(it->second);  // even when not asked for
        else if (events[i].events & EPOLLIN) on_readable(it->second);
        else if (events[i].events & EPOLLOUT) on_writable(it->second);
      }
      // Accept last: a new connection may get the fd number of one closed above, and must not inherit its readiness.
      if (listener_ready) accept_clients();
    }
  }
  // [/excerpt:loop]

  // [excerpt:watch]
  // What the kernel watches a connection for: input while it reads (or lingers), output only while a response waits
  // for room (a socket is writable nearly always), nothing while the handler works.
  // Level-triggered (no EPOLLET), as readiness.hpp needs: the price is an epoll_ctl() per change, two per request.
  bool watch(int fd, std::uint32_t before, std::uint32_t want) {
    std::uint32_t events = 0;
    if (want & kWantRead) events |= EPOLLIN;
    if (want & kWantWrite) events |= EPOLLOUT;
    return control(before == kUnwatched ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, events);
  }
  void forget(int) {}  // closing the fd takes it out of the epoll set (nothing dup()s our sockets)
  // [/excerpt:watch]

  void watch_listener(bool on) {  // off: it stays in the set, but quiet
    if (listener_.valid()) control(EPOLL_CTL_MOD, listener_.get(), on ? std::uint32_t{EPOLLIN} : 0);
  }
  void stop_listening() {
    control(EPOLL_CTL_DEL, stop_fd(), 0);  // it stays readable: still watching it would wake us every turn
    listener_.reset();                     // closing an fd also takes it out of the epoll set
  }

 private:
  // [excerpt:accept]
  void accept_clients() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      Fd client = accept_client(listener_.get(), Blocking::kNo);
      if (!client.valid()) {  // the queue is empty (EAGAIN), or the connection was lost or shed (EMFILE)
        if (errno == EMFILE || errno == ENFILE) pause_accepting();  // stuck: see readiness.hpp
        return;
      }
      add(std::move(client));  // watched for input, with the head's deadline (readiness.hpp)
    }
  }
  // [/excerpt:accept]

  // Adds fd to this loop's epoll set, changes what it is watched for, or takes it out (op: EPOLL_CTL_ADD/MOD/DEL).
  bool control(int op, int fd, std::uint32_t events) {
    epoll_event ev{events, {}};
    ev.data.fd = fd;  // what epoll_pwait2() hands back with this fd's events
    return ::epoll_ctl(epoll_.get(), op, fd, &ev) == 0;
  }

  Fd listener_;
  Fd epoll_;  // this loop's epoll instance: the kernel keeps what each fd waits for
};

}  // namespace

int main(int argc, char** argv) {
  const Model model{"05-epoll", default_thread_count(), "", {kProcessesFlag}};
  const Options opts = options_or_exit(argc, argv, model);
  run_loops<Loop>(opts, model, opts.threads);  // one loop per thread, in each --processes worker (workers.hpp)
  return 0;
}
