// common/timers.hpp: a timer heap for the loops that compute their own wait timeout (03 select, 05 epoll).
//
// The loop asks time_to_next() for how long it may sleep in select()/epoll_pwait2(), then pops the timers that are
// due. Timers are never cancelled: a connection that closes or moves on leaves its timer in the heap, and the loop
// ignores it when it fires (check a generation number or the connection's state). That lazy deletion keeps every
// operation O(log n) with no bookkeeping of positions in the heap.
#pragma once

#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

template <class T>
class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;

  void add(Clock::time_point when, T what) { heap_.push(Entry{when, std::move(what)}); }
  bool empty() const { return heap_.empty(); }

  // The earliest timer that is due at `now`, removed from the queue; std::nullopt when none is due.
  std::optional<T> pop_due(Clock::time_point now) {
    if (heap_.empty() || heap_.top().when > now) return std::nullopt;
    T what = heap_.top().what;
    heap_.pop();
    return what;
  }

  // How long until the next timer (zero if one is due), or std::nullopt when there is none: wait without limit.
  std::optional<std::chrono::nanoseconds> time_to_next(Clock::time_point now) const {
    if (heap_.empty()) return std::nullopt;
    return std::max(std::chrono::nanoseconds(0), std::chrono::nanoseconds(heap_.top().when - now));
  }

 private:
  struct Entry {
    Clock::time_point when;
    T what;
    bool operator>(const Entry& other) const { return when > other.when; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
};

inline timespec to_timespec(std::chrono::nanoseconds d) {
  return timespec{static_cast<time_t>(d.count() / 1'000'000'000), static_cast<long>(d.count() % 1'000'000'000)};
}

inline timeval to_timeval(std::chrono::nanoseconds d) {  // rounded up, so a loop never wakes just before a timer
  auto us = (d.count() + 999) / 1000;
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}
