// common/workers.hpp: --processes P, nginx's shape for the event loops (05, 06, 07): P worker processes, each
// running the server's loops under a descriptor limit of its own (RLIMIT_NOFILE counts per process, so P workers
// hold P times as many connections).
//
//   main() calls run_loops() (at the end of this file), which calls
//     start_workers(opts, model, loops)
//       P = 1 (the default): returns at once; nothing forks, the server is the one process it always was.
//       P > 1: listen_sockets(opts, P x loops): every listener exists before the fork, all in one SO_REUSEPORT
//              group, so "listening on" is printed once, with one port, even for --port 0. Then:
//
//         parent (never returns)                        worker k, k = 0 .. P-1 (fork() returns 0)
//         fork worker k ------------------------------> start_workers() returns into main(), which goes on as
//         wait: signals (signalfd), readiness, the      usual: start_process(), its loops... and
//           next restart                                worker_listen_sockets() hands it its `loops` listeners
//         SIGINT/SIGTERM: passed on to every worker;      (k x loops onwards) and tells the parent it is ready
//           exit 0 once all have stopped gracefully
//         a worker ends before it was ready: a start-up error (its own sentence), the others stop, exit 1
//         a worker ends later, not in a stop: a new one after a backoff (100 ms, doubling to 5 s; back to 100 ms
//           when the one that ended had run 10 s)
//
// The parent keeps every listener open and never accepts. So connections that the kernel gives a dead worker's
// listener wait in its accept queue for the new worker instead of being refused. The parent starts no thread
// (fork() copies only the calling thread: a lock another thread held would stay locked in the child), and each
// worker makes its own epoll instances, rings, eventfds and threads after the fork: an epoll instance or an
// eventfd inherited across fork() would be shared by every worker.
//
// With P > 1 the "listening on" line comes before the workers' start-up: a worker that cannot start (06 where
// io_uring is not available, say) then says why in its one sentence after that line, and the server exits 1.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "lifecycle.hpp"
#include "net.hpp"
#include "options.hpp"

inline const ExtraFlag kProcessesFlag{"--processes", "P",
                                      "worker processes, each running the loops under its own descriptor limit "
                                      "(default 1)"};

namespace detail {
inline bool in_worker = false;            // set in a worker right after the fork
inline std::vector<Fd> worker_listeners;  // a worker's share of the parent's listeners
inline int worker_ready_fd = -1;          // a worker's end of its readiness pipe
}  // namespace detail

// --processes, checked: a whole number from 1 to 1024, or the usage and exit 2.
inline int processes_or_exit(const Options& opts, const Model& model) {
  const auto flag = opts.extra.find(kProcessesFlag.name);
  if (flag == opts.extra.end()) return 1;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(flag->second.c_str(), &end, 10);
  if (flag->second.empty() || *end != '\0' || errno != 0 || value < 1 || value > 1024)
    usage_error(model, "--processes takes a whole number from 1 to 1024, not '" + flag->second + "'");
  return static_cast<int>(value);
}

// In a worker: its listeners (and the parent learns that its start-up went well). Otherwise listen_sockets().
// Call it where the server would call listen_sockets(opts, count): after everything that can fail at start-up.
inline std::vector<Fd> worker_listen_sockets(const Options& opts, int count) {
  if (!detail::in_worker) return listen_sockets(opts, count);
  const char ready = 1;
  [[maybe_unused]] ssize_t n = ::write(detail::worker_ready_fd, &ready, 1);
  ::close(std::exchange(detail::worker_ready_fd, -1));
  return std::move(detail::worker_listeners);
}


namespace detail {

using WorkerClock = std::chrono::steady_clock;

struct Worker {
  pid_t pid = -1;                   // -1: not running (ended, a new one due at restart_at unless stopping)
  Fd ready;                         // the read end of its readiness pipe, until it has said it is ready
  bool started = false;             // it reached worker_listen_sockets()
  WorkerClock::time_point born;     // when it was forked
  WorkerClock::time_point restart_at;
  std::chrono::milliseconds backoff{100};
};

inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

}  // namespace detail

// See the top of this file. `loops`: the listeners each worker needs (its event loops).
inline void start_workers(const Options& opts, const Model& model, int loops) {
  using namespace std::chrono;
  using detail::WorkerClock;
  const int processes = processes_or_exit(opts, model);
  if (processes == 1) return;
  std::vector<Fd> listeners = listen_sockets(opts, processes * loops);

  // The parent's signals arrive through a signalfd, read in its loop: no handler, so nothing async-signal-unsafe.
  // Blocked before the first fork; each worker puts the mask back as it was.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  Fd signals(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals.valid()) fail_startup(std::string("cannot create a signalfd: ") + std::strerror(errno));
  const pid_t parent = ::getpid();

  std::vector<detail::Worker> workers(static_cast<std::size_t>(processes));
  bool stopping = false, clean = true;
  WorkerClock::time_point stop_deadline;

  auto signal_all = [&](int signal) {
    for (const detail::Worker& w : workers)
      if (w.pid > 0) ::kill(w.pid, signal);
  };
  auto stop_all_and_exit_1 = [&] {  // a start-up error: the workers already started stop gracefully
    signal_all(SIGTERM);
    for (const detail::Worker& w : workers)
      if (w.pid > 0) ::waitpid(w.pid, nullptr, 0);
    std::exit(1);
  };

  // Forks worker k. True in the worker (start_workers() then returns: the parent's fds it does not keep close as
  // the locals here are destroyed); false in the parent. When pipe2() or fork() fails: at start-up, one sentence
  // and exit 1; later (out of memory or processes for a moment), another try after the backoff.
  auto fork_worker = [&](std::size_t k, bool at_startup) -> bool {
    detail::Worker& w = workers[k];
    w.born = WorkerClock::now();
    int ready[2] = {-1, -1};
    const pid_t pid = ::pipe2(ready, O_CLOEXEC | O_NONBLOCK) == 0 ? ::fork() : -1;
    if (pid < 0) {
      const int error = errno;
      if (ready[0] >= 0) ::close(ready[0]), ::close(ready[1]);
      if (at_startup) {
        std::fprintf(stderr, "error: cannot start worker %zu: %s\n", k, std::strerror(error));
        stop_all_and_exit_1();
      }
      std::fprintf(stderr, "cannot start worker %zu: %s; trying again in %lld ms\n", k, std::strerror(error),
                   static_cast<long long>(w.backoff.count()));
      w.restart_at = w.born + w.backoff;
      w.backoff = std::min(2 * w.backoff, std::chrono::milliseconds(5000));
      return false;
    }
    if (pid == 0) {
      ::sigprocmask(SIG_SETMASK, &original, nullptr);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the parent gone (even killed): stop gracefully too
      if (::getppid() != parent) ::_exit(1);
      ::close(ready[0]);
      detail::worker_ready_fd = ready[1];
      for (int i = 0; i < loops; ++i)
        detail::worker_listeners.push_back(std::move(listeners[k * static_cast<std::size_t>(loops) + i]));
      detail::in_worker = true;
      return true;
    }
    ::close(ready[1]);
    w.pid = pid;
    w.ready = Fd(ready[0]);
    w.started = false;
    return false;
  };
  auto note_ready = [](detail::Worker& w) {  // its byte, if it has written it (the pipe is non-blocking)
    char byte;
    if (w.ready.valid() && ::read(w.ready.get(), &byte, 1) == 1) w.started = true;
  };

  for (std::size_t k = 0; k < workers.size(); ++k)
    if (fork_worker(k, true)) return;

  for (;;) {
    // Wait for a signal, a worker's readiness (or the EOF of one that died first), a restart or the stop's end.
    const WorkerClock::time_point now = WorkerClock::now();
    std::vector<pollfd> watched{{signals.get(), POLLIN, 0}};
    std::vector<detail::Worker*> waiting_ready;
    WorkerClock::time_point wake = WorkerClock::time_point::max();
    for (detail::Worker& w : workers) {
      if (w.pid > 0 && !w.started && w.ready.valid()) {
        watched.push_back({w.ready.get(), POLLIN, 0});
        waiting_ready.push_back(&w);
      }
      if (w.pid < 0 && !stopping) wake = std::min(wake, w.restart_at);
    }
    if (stopping) wake = std::min(wake, stop_deadline);
    const int timeout = wake == WorkerClock::time_point::max()
                            ? -1
                            : static_cast<int>(std::max<long long>(
                                  0, duration_cast<milliseconds>(wake - now).count() + 1));
    ::poll(watched.data(), watched.size(), timeout);

    for (std::size_t i = 1; i < watched.size(); ++i) {
      if (watched[i].revents == 0) continue;
      note_ready(*waiting_ready[i - 1]);  // its byte; or else the EOF of a worker that died first, reaped below
      waiting_ready[i - 1]->ready.reset();
    }

    signalfd_siginfo info{};
    while (::read(signals.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGCHLD) continue;  // reaped below, whoever it was
      if (!stopping) stop_deadline = WorkerClock::now() + kStopGrace + seconds(3);
      stopping = true;
      signal_all(static_cast<int>(info.ssi_signo));  // a second Ctrl-C is passed on as well
    }

    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      auto w = std::find_if(workers.begin(), workers.end(), [pid](const detail::Worker& x) { return x.pid == pid; });
      if (w == workers.end()) continue;
      const std::size_t k = static_cast<std::size_t>(w - workers.begin());
      w->pid = -1;
      note_ready(*w);
      w->ready.reset();
      const bool stopped_by_us = WIFSIGNALED(status) && (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT);
      if (stopping) {  // a worker our signal ended before it had installed its handler had nothing to finish
        clean = clean && ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || stopped_by_us);
        continue;
      }
      if (!w->started) {
        // A start-up error. A worker that ended through fail_startup() (exit status 1) has said why already.
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 1))
          std::fprintf(stderr, "error: worker %zu did not start (%s)\n", k, detail::describe_status(status).c_str());
        stop_all_and_exit_1();
      }
      if (WorkerClock::now() - w->born >= seconds(10)) w->backoff = milliseconds(100);  // it had been running
      w->restart_at = WorkerClock::now() + w->backoff;
      std::fprintf(stderr, "worker %zu (pid %d) ended unexpectedly (%s): a new one in %lld ms\n", k,
                   static_cast<int>(pid), detail::describe_status(status).c_str(),
                   static_cast<long long>(w->backoff.count()));
      w->backoff = std::min(2 * w->backoff, milliseconds(5000));
    }

    const bool any_running =
        std::any_of(workers.begin(), workers.end(), [](const detail::Worker& w) { return w.pid > 0; });
    if (stopping && !any_running) std::exit(clean ? 0 : 1);
    if (stopping && WorkerClock::now() >= stop_deadline) {  // their own grace is 2 s: something is stuck
      std::fprintf(stderr, "error: a worker did not stop within %lld s of the signal: killed\n",
                   static_cast<long long>(duration_cast<seconds>(kStopGrace).count() + 3));
      signal_all(SIGKILL);
      clean = false;
      stop_deadline = WorkerClock::time_point::max();
    }
    if (stopping) continue;
    for (std::size_t k = 0; k < workers.size(); ++k)
      if (workers[k].pid < 0 && WorkerClock::now() >= workers[k].restart_at && fork_worker(k, false)) return;
  }
}

// [excerpt:run-loops]
// An event-loop server's main(), after its options (05, 06, 07): --processes P workers (start_workers(): from here
// on, in each of them), the stop's signal handler (start_process()), then `loops` Loops, each with its own
// listener (SO_REUSEPORT when there are several: the kernel spreads new connections across them), its own
// connections and timers, run by `threads_per_loop` threads (more than one only for 07's pool). Each Loop is built
// before the listeners exist, so that what can fail at start-up (an epoll instance, a ring) fails before "listening
// on"; then listen_on(listener), then run() on threads of its own (the calling thread only waits: a worker that
// runs its threads has started, see tests/integration/processes_test.cpp). Returns once every loop has stopped and
// drained. A Loop is built from the Options, and from its thread count too when it takes one (07's io_context).
template <class Loop>
void run_loops(const Options& opts, const Model& model, int loops, int threads_per_loop = 1) {
  start_workers(opts, model, loops);
  start_process();
  std::vector<std::unique_ptr<Loop>> made;  // a running loop must not move
  for (int i = 0; i < loops; ++i) {
    if constexpr (std::is_constructible_v<Loop, const Options&, int>)
      made.push_back(std::make_unique<Loop>(opts, threads_per_loop));
    else
      made.push_back(std::make_unique<Loop>(opts));
  }
  std::vector<Fd> listeners = worker_listen_sockets(opts, loops);
  for (int i = 0; i < loops; ++i) made[i]->listen_on(std::move(listeners[i]));
  std::vector<std::thread> threads;
  for (auto& loop : made)
    for (int t = 0; t < threads_per_loop; ++t) threads.emplace_back(&Loop::run, loop.get());
  for (std::thread& t : threads) t.join();  // the loops go after every thread that ran them has ended
}
// [/excerpt:run-loops]
