// common/handler.hpp: the simulated request handler, defined once for all seven servers.
//
// Each request "waits" --delay-us microseconds, as if for a database. Blocking models (01, 02, 04) call
// run_handler_here() in the thread that handles the request. Event loops (03, 05, 06, 07) must not block their loop:
// when handler_needs_timer() they arm a timer for opts.delay and answer when it fires; otherwise (no delay, or the
// --handler sleep/spin labs) they call run_handler_here() in the loop thread, which is exactly the mistake the
// sleep lab wants learners to see.
#pragma once

#include <chrono>
#include <thread>

#include "options.hpp"

// True when an event loop should arm a timer instead of calling run_handler_here().
inline bool handler_needs_timer(const Options& opts) {
  return opts.handler == Handler::kWait && opts.delay.count() > 0;
}

// Spends the delay in the calling thread: sleeping (wait, sleep) or burning CPU (spin).
inline void run_handler_here(const Options& opts) {
  if (opts.delay.count() == 0) return;
  if (opts.handler != Handler::kSpin) {
    std::this_thread::sleep_for(opts.delay);
    return;
  }
  auto until = std::chrono::steady_clock::now() + opts.delay;
  while (std::chrono::steady_clock::now() < until) {
  }
}
