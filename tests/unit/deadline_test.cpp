// RequestDeadline (common/deadline.hpp): the head's deadline does not move; the body's follows its bytes, within a
// bound on the whole request. Made-up times, no socket.
#include "common/deadline.hpp"

#include <gtest/gtest.h>

namespace {

using Clock = RequestDeadline::Clock;
using std::chrono::milliseconds;
const Clock::time_point t0{};
constexpr std::chrono::seconds T{1};

TEST(RequestDeadline, TheHeadHasTFromTheStartHoweverOftenBytesCome) {
  RequestDeadline d(T, t0);
  for (int i = 1; i <= 9; ++i) {
    d.arrived(1, t0 + milliseconds(100 * i));  // a slowloris: a byte every 100 ms
    EXPECT_EQ(d.due(false), t0 + T);
  }
}

TEST(RequestDeadline, ABodyThatKeepsComingIsNeverCutOffWithinTheBound) {
  RequestDeadline d(T, t0);
  d.arrived(100, t0 + milliseconds(900));  // the whole head, just before T
  Clock::time_point now = t0 + milliseconds(900);
  for (int i = 0; i < 14; ++i) {  // 1,000 bytes every 600 ms: 8.4 s, far past T
    Clock::time_point due = d.due(true);
    EXPECT_EQ(due, now + T);  // the gap rule
    now += milliseconds(600);
    ASSERT_LT(now, due) << "cut off at read " << i;
    d.arrived(1000, now);
  }
}

TEST(RequestDeadline, ATrickleEndsAtTheWholeRequestsBound) {
  RequestDeadline d(T, t0);
  d.arrived(100, t0);  // the head, at once
  Clock::time_point now = t0;
  while (now + milliseconds(900) < d.due(true)) {  // a byte every 900 ms: each gap within T
    now += milliseconds(900);
    d.arrived(1, now);
  }
  EXPECT_EQ(d.due(true), t0 + kBodyTimeouts * T);
}

TEST(RequestDeadline, AGapLongerThanTEndsTheBody) {
  RequestDeadline d(T, t0);
  d.arrived(100'000, t0 + milliseconds(10));
  EXPECT_EQ(d.due(true), t0 + milliseconds(10) + T);
}

TEST(RequestDeadline, TheNextRequestStartsAgainFromItsHead) {
  RequestDeadline d(T, t0);
  d.arrived(10, t0 + milliseconds(500));
  const Clock::time_point later = t0 + std::chrono::seconds(30);
  d.next_request(later);
  d.arrived(5, later + milliseconds(100));  // head bytes: the head's deadline does not move
  EXPECT_EQ(d.due(false), later + T);
  d.arrived(5, later + milliseconds(200));
  EXPECT_EQ(d.due(true), later + milliseconds(200) + T);  // the bound counts from this request's first byte
}

}  // namespace
