// common/loops.hpp: start an event-loop server's loops, in P processes (--processes), with one call from main().
//
//   run_loops<Loop>(opts, model, loops, threads_per_loop)
//     start_workers()          --processes P: from here on, in each of P worker processes (workers.hpp)
//     start_process()          the stop's signal handler, SIGPIPE ignored, the descriptor limit (lifecycle.hpp)
//     Loop(opts, threads) x loops      each loop's kernel objects (epoll, rings, timers) belong to its process
//     worker_listen_sockets()  one listener per loop (SO_REUSEPORT when several); "listening on" is printed now,
//                              so each loop already exists: a SIGTERM sent as soon as a script reads that line
//                              finds the server whole
//     loop.listen(fd), then loop.run() on threads_per_loop threads each; returns when every run() has returned
//
// A Loop provides Loop(const Options&, int threads), void listen(Fd) and void run(). Only the loops' own state is
// theirs; what the threads share (a stop flag, a loop run by a pool) is the Loop's to guard.
#pragma once

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "lifecycle.hpp"
#include "net.hpp"
#include "options.hpp"
#include "workers.hpp"

template <class Loop>
void run_loops(const Options& opts, const Model& model, int loops, int threads_per_loop = 1) {
  start_workers(opts, model, loops);
  start_process();
  std::vector<std::unique_ptr<Loop>> made;
  for (int i = 0; i < loops; ++i) made.push_back(std::make_unique<Loop>(opts, threads_per_loop));
  std::vector<Fd> listeners = worker_listen_sockets(opts, loops);
  for (int i = 0; i < loops; ++i) made[i]->listen(std::move(listeners[i]));
  std::vector<std::thread> threads;
  for (auto& loop : made)
    for (int t = 0; t < threads_per_loop; ++t) threads.emplace_back([&loop] { loop->run(); });
  for (std::thread& t : threads) t.join();  // the loops are destroyed after every thread that ran them has ended
}
