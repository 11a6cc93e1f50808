// The connection engine's stop (common/connection.hpp) without lifecycle.hpp's stop flag, as 07 drives it: its
// stop is an asio::signal_set, so respond() cannot see it, and the engine alone must make the last response say
// "Connection: close".
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/connection.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(ConnectionStop, ARequestInTheHandlerAtTheStopIsAnsweredWithClose) {
  Options opts;
  opts.delay = 1000us;
  const ConnectionEngine engine(opts);
  Connection c;
  const Clock::time_point t0 = Clock::now();
  engine.start(c, t0);
  const Next waiting = engine.on_bytes(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", t0);
  ASSERT_EQ(waiting.what, Do::kWait);
  EXPECT_EQ(engine.on_stop(c, t0).what, Do::kUnchanged);  // the handler goes on
  const Next sending = engine.on_timer(c, waiting.epoch, waiting.deadline);
  ASSERT_EQ(sending.what, Do::kSend);
  const std::string head(engine.send_span(c).head);
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  const Next after = engine.on_sent_bytes(c, head.size(), waiting.deadline);
  EXPECT_TRUE(after.shutdown);  // the graceful end: LINGERING, not READING again
}

}  // namespace
