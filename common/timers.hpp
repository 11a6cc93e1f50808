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
#include <optional>
#include <vector>

template <class T>
class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;

  void add(Clock::time_point when, T what) {
    heap_.push_back(Entry{when, std::move(what)});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }

  // The earliest timer that is due at `now`, removed from the queue; std::nullopt when none is due.
  std::optional<T> pop_due(Clock::time_point now) {
    if (heap_.empty() || heap_.front().when > now) return std::nullopt;
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    T what = std::move(heap_.back().what);
    heap_.pop_back();
    return what;
  }

  // How long until the next timer (zero if one is due), or std::nullopt when there is none: wait without limit.
  std::optional<std::chrono::nanoseconds> time_to_next(Clock::time_point now) const {
    if (heap_.empty()) return std::nullopt;
    return std::max(std::chrono::nanoseconds(0), std::chrono::nanoseconds(heap_.front().when - now));
  }

  // The price of lazy deletion: a connection that closes leaves its timers behind until they come due, so with a
  // long --idle-timeout the heap would grow with the traffic (a timer per connection closed in the last timeout),
  // not with the connections open. Once more than `live_limit` timers wait, this drops those `stale(what)` calls
  // stale and gives their memory back: O(n), but only after n / 2 more timers, so amortised O(1) per timer.
  template <class Stale>
  void prune_over(std::size_t live_limit, Stale stale) {
    if (heap_.size() <= 2 * live_limit) return;
    heap_.erase(std::remove_if(heap_.begin(), heap_.end(), [&](const Entry& e) { return stale(e.what); }),
                heap_.end());
    std::make_heap(heap_.begin(), heap_.end(), Later{});
    if (heap_.capacity() > 4 * heap_.size() + 64) heap_.shrink_to_fit();
  }

 private:
  struct Entry {
    Clock::time_point when;
    T what;
  };
  struct Later {  // std::*_heap keep the greatest first: "greatest" here is the earliest
    bool operator()(const Entry& a, const Entry& b) const { return a.when > b.when; }
  };
  std::vector<Entry> heap_;  // a binary heap (std::push_heap/pop_heap), earliest at the front
};

inline timespec to_timespec(std::chrono::nanoseconds d) {
  return timespec{static_cast<time_t>(d.count() / 1'000'000'000), static_cast<long>(d.count() % 1'000'000'000)};
}

inline timeval to_timeval(std::chrono::nanoseconds d) {  // rounded up, so a loop never wakes just before a timer
  auto us = (d.count() + 999) / 1000;
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}
