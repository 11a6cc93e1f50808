// RequestDeadline (common/deadline.hpp): the head's deadline does not move; the body's follows its bytes, within a
// bound on the whole body. Made-up times, no socket.
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
    EXPECT_EQ(d.due(false, t0 + milliseconds(100 * i)), t0 + T);
  }
}

TEST(RequestDeadline, ABodyThatKeepsComingIsNeverCutOff) {
  RequestDeadline d(T, t0);
  Clock::time_point now = t0 + milliseconds(900);  // the head ends just before T
  Clock::time_point due = d.due(true, now);
  EXPECT_EQ(due, now + T);  // the body's own T begins with it
  for (int i = 0; i < 100; ++i) {  // 1,000 bytes every 600 ms, for a minute: 1,667 bytes/s
    now += milliseconds(600);
    ASSERT_LT(now, due) << "cut off at read " << i;
    d.arrived(1000, now);
    due = d.due(true, now);
    EXPECT_EQ(due, now + T);  // the gap rule, every time: the whole-body bound is far away
  }
}

TEST(RequestDeadline, ATrickleIsCutOffAtTPlusWhatItEarned) {
  RequestDeadline d(T, t0);
  Clock::time_point now = t0;
  Clock::time_point due = d.due(true, now);
  int reads = 0;
  while (now + milliseconds(900) < due) {  // a byte every 900 ms: each gap within T
    now += milliseconds(900);
    d.arrived(1, now);
    due = d.due(true, now);
    ++reads;
  }
  // T plus 2 ms a byte: the second read's gap rule would allow 2.8 s, the whole-body bound allows 1.002 s.
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(due, t0 + T + milliseconds(2));
}

TEST(RequestDeadline, AGapLongerThanTEndsTheBody) {
  RequestDeadline d(T, t0);
  d.due(true, t0);
  d.arrived(100'000, t0 + milliseconds(10));
  EXPECT_EQ(d.due(true, t0 + milliseconds(10)), t0 + milliseconds(10) + T);
}

TEST(RequestDeadline, TheNextRequestStartsAgainFromItsHead) {
  RequestDeadline d(T, t0);
  d.due(true, t0);
  d.arrived(10, t0 + milliseconds(500));
  const Clock::time_point later = t0 + std::chrono::seconds(30);
  d.next_request(later);
  d.arrived(5, later + milliseconds(100));  // head bytes: nothing moves
  EXPECT_EQ(d.due(false, later + milliseconds(100)), later + T);
}

}  // namespace
