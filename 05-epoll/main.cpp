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
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

// One epoll loop. Each connection's life (reading, the handler's timer, writing, keeping it or ending it, its
// deadlines, the stop) is the connection engine's (common/connection.hpp); what to do once a socket is ready is
// shared with 03 (common/readiness.hpp). What is left here is epoll: how the loop waits, and how it tells the
// kernel what each fd waits for.
class Loop : public ReadinessLoop<Loop> {
 public:
  Loop(const Options& opts, Fd listener, Fd epoll)
      : ReadinessLoop(opts), listener_(std::move(listener)), epoll_(std::move(epoll)) {
    if (!control(EPOLL_CTL_ADD, listener_.get(), EPOLLIN) ||
        !control(EPOLL_CTL_ADD, stop_fd(), EPOLLIN))  // becomes readable on SIGINT/SIGTERM, and so wakes every loop
      fail_startup("cannot add the listener to an epoll instance");
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
        // ERR and HUP are reported even when not asked for, e.g. while the handler waits: the peer is gone.
        if (events[i].events & (EPOLLERR | EPOLLHUP)) on_hangup(it->second);
        else if (events[i].events & EPOLLIN) on_readable(it->second);
        else if (events[i].events & EPOLLOUT) on_writable(it->second);
      }
      // Accept last: a new connection may get the fd number of one closed above, and must not inherit its event.
      if (listener_ready) accept_clients();
    }
  }
  // [/excerpt:loop]

  // [excerpt:watch]
  // What epoll watches a connection for: input while it reads (or lingers), output only while a response waits
  // for room (a socket is writable nearly always), nothing while the handler works.
  //
  // Level-triggered (no EPOLLET): like select(), epoll reports an fd for as long as it is ready. So a handler may
  // do one recv() and return, and what is left is reported next turn: no connection starves the others, and no
  // missed edge can hang one. The price is this epoll_ctl() on every change of state, two per request. With
  // EPOLLET the interest could stay fixed, but every handler must read and write until EAGAIN: that is a lab.
  bool watch(int fd, std::uint32_t before, std::uint32_t want) {
    std::uint32_t events = 0;
    if (want & kWantRead) events |= EPOLLIN;
    if (want & kWantWrite) events |= EPOLLOUT;
    return control(before == kUnwatched ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, events);
  }
  // Closing the fd takes it out of the epoll set (nothing dup()s our sockets, so that close is the last reference).
  void forget(int) {}
  // [/excerpt:watch]

  void stop_listening() {
    control(EPOLL_CTL_DEL, stop_fd(), 0);  // it stays readable: it would wake us every turn
    listener_.reset();                     // closing an fd also takes it out of the epoll set
  }
  void on_loop_timer() {  // the pause below is over
    if (listener_.valid()) control(EPOLL_CTL_MOD, listener_.get(), EPOLLIN);
  }

 private:
  // [excerpt:accept]
  void accept_clients() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      Fd client = accept_client(listener_.get(), Blocking::kNo);
      if (!client.valid()) {  // the queue is empty (EAGAIN), or the connection was lost or shed (EMFILE)
        if (errno == EMFILE || errno == ENFILE) pause_accepting();  // stuck: see accept_client() in net.hpp
        return;
      }
      add(std::move(client));  // registered with epoll for input, with the head's deadline (readiness.hpp)
    }
  }
  // [/excerpt:accept]

  // Out of descriptors with a connection we can neither accept nor shed: the listener stays readable, so a
  // level-triggered loop would spin on it. Stop watching it for kAcceptPause; a timer turns it back on.
  void pause_accepting() {
    control(EPOLL_CTL_MOD, listener_.get(), 0);  // no events: the listener stays in the set, but quiet
    add_loop_timer(Clock::now() + kAcceptPause);
  }

  // Adds fd to this loop's epoll set, changes what it is watched for, or takes it out (op: EPOLL_CTL_ADD/MOD/DEL).
  bool control(int op, int fd, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    return ::epoll_ctl(epoll_.get(), op, fd, &ev) == 0;
  }

  Fd listener_;
  Fd epoll_;  // this loop's epoll instance: the kernel keeps what each fd waits for
};
// What an idle connection costs us, besides its table entry and its timer: the kernel's socket costs several KiB.
static_assert(sizeof(Loop::Conn) <= 40, "an idle connection's state is a few words; a request's lives in its Exchange");

}  // namespace

int main(int argc, char** argv) {
  const Model model{"05-epoll", default_thread_count(), "", {kProcessesFlag}};
  const Options opts = options_or_exit(argc, argv, model);
  start_workers(opts, model, opts.threads);  // --processes P: from here on, in each of P workers (workers.hpp)
  start_process();
  // Every loop's epoll instance exists before listen_sockets() prints "listening on", so the server is whole when
  // scripts see that line. epoll_pwait2() is Linux 5.11+, and a container's seccomp profile may refuse it: try it now.
  std::vector<Fd> epolls;
  for (int i = 0; i < opts.threads; ++i) {
    epolls.emplace_back(::epoll_create1(EPOLL_CLOEXEC));
    if (!epolls.back().valid()) fail_startup(std::string("cannot create an epoll instance: ") + std::strerror(errno));
  }
  epoll_event probe{};
  timespec zero{};
  if (::epoll_pwait2(epolls[0].get(), &probe, 1, &zero, nullptr) < 0)
    fail_startup(std::string("epoll_pwait2() is not available here (it needs Linux 5.11+): ") + std::strerror(errno));

  // [excerpt:threads]
  // One loop per thread, each with its own listener (SO_REUSEPORT when there are several: the kernel spreads new
  // connections across them) and its own epoll, connections and timers. Only the stop flag is shared.
  std::vector<Fd> listeners = worker_listen_sockets(opts, opts.threads);
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < opts.threads; ++i)
    loops.push_back(std::make_unique<Loop>(opts, std::move(listeners[i]), std::move(epolls[i])));
  std::vector<std::thread> threads;
  for (auto& loop : loops) threads.emplace_back(&Loop::run, loop.get());
  for (std::thread& t : threads) t.join();  // each loop returns once a stop has been requested and it has drained
  // [/excerpt:threads]
  return 0;
}
