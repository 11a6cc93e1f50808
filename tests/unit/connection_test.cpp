// Unit tests of common/connection.hpp: the connection engine driven without any socket, with a clock of our own.
// A tiny driver plays the event loop: it sends whatever the engine asks to send onto `wire`, and fires timers by
// their epoch, so that each test reads as a transcript of events and answers.
#include "common/connection.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kGet = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
constexpr const char* kGetClose = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

static_assert(sizeof(Connection) <= 24, "an idle connection is a few words");

class Engine : public ::testing::Test {
 protected:
  Engine() : opts(make_options()), engine(opts) {}
  static Options make_options() {
    Options o;
    o.idle_timeout = std::chrono::seconds(1);  // T
    o.delay = std::chrono::microseconds(1000);
    return o;
  }
  const Clock::duration T = std::chrono::seconds(1);

  // Plays a loop: remembers the timer asked for, and sends everything asked to send, whole, at once.
  Next handle(Next n) {
    for (;;) {
      if (n.arm) {
        timer_epoch = n.epoch;
        timer_at = n.deadline;
        armed = true;
      }
      if (n.shutdown) shut = true;
      if (n.what != Do::kSend) return last = n;
      SendSpan span = engine.send_span(c);
      wire.append(span.head);
      n = engine.on_sent_bytes(c, span.head.size() + span.count, now);
    }
  }
  Next start() { return handle(engine.start(c, now)); }
  Next bytes(const std::string& b) { return handle(engine.on_bytes(c, b, now)); }
  // Moves the clock to the pending timer and fires it (it is then no longer pending).
  Next fire() {
    EXPECT_TRUE(armed);
    armed = false;
    if (timer_at > now) now = timer_at;
    return handle(engine.on_timer(c, timer_epoch, now));
  }
  // Fires the pending timer until the connection does something other than ask again later.
  Next fire_until_due() {
    Next n = fire();
    for (int i = 0; i < 100 && n.what == Do::kUnchanged && n.arm; ++i) n = fire();  // bounded: a bug must not hang
    return n;
  }
  int responses() const {
    int count = 0;
    for (std::size_t at = wire.find("HTTP/1.1 "); at != std::string::npos; at = wire.find("HTTP/1.1 ", at + 1))
      ++count;
    return count;
  }

  const Options opts;  // the engine keeps a reference: it must outlive the engine
  ConnectionEngine engine;
  Connection c;
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  std::string wire;
  Next last;
  bool armed = false, shut = false;
  std::uint32_t timer_epoch = 0;
  Clock::time_point timer_at;
};

TEST_F(Engine, StartsReadingWithTheHeadDeadline) {
  Next n = start();
  EXPECT_EQ(n.what, Do::kRead);
  EXPECT_TRUE(n.arm);
  EXPECT_EQ(n.deadline, now + T);
  EXPECT_FALSE(c.busy()) << "no Exchange before the first byte";
}

TEST_F(Engine, AWholeRequestWaitsForTheHandlerThenIsAnsweredAndKept) {
  start();
  const std::uint32_t head_epoch = timer_epoch;
  Next n = bytes(kGet);
  EXPECT_EQ(n.what, Do::kWait);
  EXPECT_TRUE(n.arm);
  EXPECT_EQ(n.deadline, now + milliseconds(1));
  EXPECT_NE(n.epoch, head_epoch) << "an earlier deadline needs a new epoch";
  // The head's timer, armed before, is stale now.
  EXPECT_EQ(engine.on_timer(c, head_epoch, now + T).what, Do::kUnchanged);
  EXPECT_FALSE(engine.on_timer(c, head_epoch, now + T).arm);
  n = fire();
  EXPECT_EQ(n.what, Do::kRead);
  EXPECT_EQ(responses(), 1);
  EXPECT_NE(wire.find("HTTP/1.1 200 OK"), std::string::npos);
  EXPECT_NE(wire.find("Connection: keep-alive"), std::string::npos);
  EXPECT_FALSE(c.busy()) << "between requests the Exchange is gone";
  EXPECT_FALSE(shut);
}

TEST_F(Engine, ARequestAByteAtATime) {
  start();
  const std::string get = kGet;
  for (std::size_t i = 0; i + 1 < get.size(); ++i) {
    EXPECT_EQ(bytes(get.substr(i, 1)).what, Do::kRead) << i;
    EXPECT_TRUE(c.busy());
  }
  EXPECT_EQ(bytes(get.substr(get.size() - 1)).what, Do::kWait);
  fire();
  EXPECT_EQ(responses(), 1);
}

TEST_F(Engine, PipelinedRequestsAreAnsweredInOrderWithoutMoreInput) {
  start();
  EXPECT_EQ(bytes(std::string(kGet) + kGet + kGetClose).what, Do::kWait);
  EXPECT_EQ(fire().what, Do::kWait) << "the second request was already in `in`";
  EXPECT_EQ(fire().what, Do::kWait);
  Next n = fire();
  EXPECT_EQ(responses(), 3);
  EXPECT_EQ(n.what, Do::kRead) << "LINGERING reads";
  EXPECT_TRUE(n.shutdown) << "after Connection: close, our FIN";
}

TEST_F(Engine, ConnectionCloseLingersUntilTheClientsFin) {
  start();
  bytes(kGetClose);
  Next n = fire();
  EXPECT_TRUE(shut);
  EXPECT_EQ(n.what, Do::kRead);
  EXPECT_NE(wire.find("Connection: close"), std::string::npos);
  EXPECT_EQ(bytes("more bytes are thrown away").what, Do::kUnchanged);
  EXPECT_EQ(responses(), 1);
  EXPECT_EQ(engine.on_peer_gone(c).what, Do::kClose);
  EXPECT_TRUE(c.done());
  EXPECT_EQ(engine.on_peer_gone(c).what, Do::kUnchanged) << "done for ever";
}

TEST_F(Engine, LingeringEndsAtItsDeadlineWithAPlainClose) {
  start();
  bytes(kGetClose);
  fire();
  const Clock::time_point began = now;
  EXPECT_EQ(fire_until_due().what, Do::kClose);
  EXPECT_EQ(now, began + kLingerQuiet);
}

TEST_F(Engine, BadRequestIsAnsweredAndTheConnectionLingers) {
  start();
  Next n = bytes("BLAH\r\n\r\n");
  EXPECT_TRUE(n.shutdown);
  EXPECT_NE(wire.find("HTTP/1.1 400"), std::string::npos);
}

TEST_F(Engine, ExpectContinueGetsTheInterimResponseThenTheFinalOne) {
  start();
  EXPECT_EQ(bytes("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n").what, Do::kRead);
  EXPECT_NE(wire.find("100 Continue"), std::string::npos);
  EXPECT_EQ(bytes("abc").what, Do::kWait);
  fire();
  EXPECT_NE(wire.find("HTTP/1.1 200"), std::string::npos);
}

TEST_F(Engine, AHeadThatDribblesIsResetAtTheHeadDeadline) {
  start();
  const Clock::time_point began = now;
  for (int i = 0; i < 5; ++i) {
    now += milliseconds(150);
    EXPECT_EQ(bytes("G").what, Do::kRead);
  }
  EXPECT_EQ(fire_until_due().what, Do::kReset) << "reads do not move the head's deadline";
  EXPECT_EQ(now, began + T);
}

TEST_F(Engine, AnIdleKeepAliveConnectionIsResetAfterTheIdleTimeout) {
  start();
  bytes(kGet);
  fire();
  const Clock::time_point answered = now;
  EXPECT_EQ(fire_until_due().what, Do::kReset);
  EXPECT_EQ(now, answered + T);
}

// Defect (b) of issue 34: a body that keeps coming is timed by its gaps, not cut off by the head's deadline...
TEST_F(Engine, ABodyArrivingSteadilyIsNotCutOff) {
  start();
  EXPECT_EQ(bytes("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n").what, Do::kRead);
  for (int i = 0; i < 15; ++i) {  // a byte every 0.6 T: 9 T in all, far past the head's deadline
    const Clock::time_point next_byte = now + T * 6 / 10;
    while (armed && timer_at <= next_byte) ASSERT_EQ(fire().what, Do::kUnchanged) << "cut off at byte " << i;
    now = next_byte;
    bytes("x");
  }
  EXPECT_EQ(last.what, Do::kWait);
  fire();
  EXPECT_NE(wire.find("HTTP/1.1 200"), std::string::npos);
}

// ...while a trickle is still bounded: kBodyTimeouts x T from the request's first byte, however steady.
TEST_F(Engine, ATrickleIsBoundedOverall) {
  start();
  const Clock::time_point first_byte = now;
  EXPECT_EQ(bytes("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n").what, Do::kRead);
  Next n;
  for (int i = 0; i < 1000 && n.what != Do::kReset; ++i) {
    const Clock::time_point next_byte = now + T * 6 / 10;
    while (armed && timer_at <= next_byte && n.what != Do::kReset) n = fire();
    if (n.what == Do::kReset) break;
    now = next_byte;
    ASSERT_EQ(bytes("x").what, Do::kRead);
  }
  EXPECT_EQ(n.what, Do::kReset);
  EXPECT_EQ(now, first_byte + kBodyTimeouts * T);
}

TEST_F(Engine, ABodyWithinTheWholeBoundIsAnswered) {
  start();
  EXPECT_EQ(bytes("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n").what, Do::kRead);
  for (int i = 0; i < 5; ++i) {
    now += T * 9 / 10;  // each gap just under T: 4.5 T in all
    while (armed && timer_at <= now) ASSERT_EQ(fire().what, Do::kUnchanged);
    bytes("x");
  }
  EXPECT_EQ(last.what, Do::kWait);
  fire();
  EXPECT_NE(wire.find("HTTP/1.1 200"), std::string::npos);
}

TEST_F(Engine, ABodyGapLongerThanTheTimeoutIsReset) {
  start();
  bytes("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab");
  const Clock::time_point last_read = now;
  EXPECT_EQ(fire_until_due().what, Do::kReset);
  EXPECT_EQ(now, last_read + T);
}

TEST_F(Engine, ASlowReaderIsTimedFromItsLastProgress) {
  start();
  bytes(kGet);
  armed = false;
  now += milliseconds(1);
  Next n = engine.on_timer(c, timer_epoch, now);
  ASSERT_EQ(n.what, Do::kSend);
  timer_epoch = n.epoch;
  timer_at = n.deadline;
  armed = n.arm;
  EXPECT_TRUE(armed);
  ASSERT_NE(engine.outgoing(c), nullptr);
  EXPECT_EQ(engine.on_sent(c, SendProgress::kBlocked, now).what, Do::kWaitWritable);
  EXPECT_EQ(engine.outgoing(c), nullptr);
  now += T / 2;
  EXPECT_EQ(engine.on_writable(c).what, Do::kSend);
  EXPECT_EQ(engine.on_sent(c, SendProgress::kBlocked, now).what, Do::kWaitWritable);  // progress: T from now
  const Clock::time_point progress = now;
  EXPECT_EQ(fire_until_due().what, Do::kReset);
  EXPECT_EQ(now, progress + T);
}

TEST_F(Engine, AFailedSendResets) {
  start();
  bytes(kGet);
  armed = false;
  now += milliseconds(1);
  ASSERT_EQ(engine.on_timer(c, timer_epoch, now).what, Do::kSend);
  EXPECT_EQ(engine.on_sent(c, SendProgress::kFailed, now).what, Do::kReset);
  EXPECT_TRUE(c.done());
}

TEST_F(Engine, APartialSendGoesOnFromWhereItStopped) {
  start();
  bytes(kGet);
  armed = false;
  now += milliseconds(1);
  ASSERT_EQ(engine.on_timer(c, timer_epoch, now).what, Do::kSend);
  const std::string whole(engine.send_span(c).head);
  EXPECT_EQ(engine.on_sent_bytes(c, 10, now).what, Do::kSend);
  EXPECT_EQ(std::string(engine.send_span(c).head), whole.substr(10));
  EXPECT_EQ(engine.on_sent_bytes(c, whole.size() - 10, now).what, Do::kRead);
}

TEST_F(Engine, PeerGoneWhileTheHandlerWaitsCloses) {
  start();
  bytes(kGet);
  EXPECT_EQ(engine.on_peer_gone(c).what, Do::kClose);
  EXPECT_EQ(engine.on_timer(c, timer_epoch, now + T).what, Do::kUnchanged) << "a DONE connection ignores timers";
  EXPECT_TRUE(c.busy()) << "the Exchange stays until release(): a completion may still point into it";
  engine.release(c);
  EXPECT_FALSE(c.busy());
}

// The stop. Defect (a) of issue 34: a request that arrives after the stop (it was already in the socket) is read
// and answered, with Connection: close.
TEST_F(Engine, StopGivesAReadingConnectionOneLookAndAnswersWhatIsThereWithClose) {
  start();
  bytes(kGet);
  fire();  // one keep-alive request served
  Next n = handle(engine.on_stop(c, now));
  EXPECT_EQ(n.what, Do::kRead);
  EXPECT_TRUE(n.arm);
  EXPECT_EQ(n.deadline, now) << "due at once: the loop peeks, then its timer closes";
  EXPECT_EQ(bytes(kGet).what, Do::kWait);
  n = fire();
  EXPECT_EQ(responses(), 2);
  EXPECT_NE(wire.rfind("Connection: close"), std::string::npos);
  EXPECT_GT(wire.rfind("Connection: close"), wire.find("Connection: keep-alive"));
  EXPECT_TRUE(n.shutdown) << "and the connection ends gracefully";
}

TEST_F(Engine, StopAnswersACompleteRequestAlreadyInInWithClose) {
  start();
  bytes(std::string(kGet) + kGet);  // pipelined: the second waits in `in`
  ASSERT_EQ(engine.on_timer(c, timer_epoch, now + milliseconds(1)).what, Do::kSend);
  armed = false;
  now += milliseconds(1);
  EXPECT_EQ(engine.on_stop(c, now).what, Do::kUnchanged) << "a response being sent is finished first";
  SendSpan span = engine.send_span(c);
  wire.append(span.head);
  Next n = handle(engine.on_sent_bytes(c, span.head.size(), now));
  EXPECT_EQ(n.what, Do::kWait) << "the request already in `in` is answered";
  fire();
  EXPECT_EQ(responses(), 2);
  EXPECT_NE(wire.find("Connection: keep-alive"), std::string::npos) << "the first was answered before the stop";
  EXPECT_NE(wire.rfind("Connection: close"), std::string::npos);
  EXPECT_TRUE(shut);
}

TEST_F(Engine, StopWhileTheHandlerWaitsAnswersWithClose) {
  start();
  bytes(kGet);
  EXPECT_EQ(engine.on_stop(c, now).what, Do::kUnchanged);
  fire();
  EXPECT_NE(wire.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(shut);
}

TEST_F(Engine, StopClosesAnIdleConnectionPlainly) {
  start();
  handle(engine.on_stop(c, now));
  EXPECT_EQ(fire().what, Do::kClose) << "nothing pending: a plain close, not a reset";
  EXPECT_EQ(responses(), 0);
}

TEST_F(Engine, StopClosesAPartialRequestAtItsTimer) {
  start();
  bytes("GET / HT");
  handle(engine.on_stop(c, now));
  EXPECT_EQ(bytes("TP/1.1\r\nHost").what, Do::kRead);
  EXPECT_EQ(fire().what, Do::kClose);
}

TEST_F(Engine, GraceOverResetsWhatRemainsAndIsCalledOnce) {
  start();
  bytes(kGet);
  EXPECT_EQ(engine.on_stop(c, now).what, Do::kUnchanged);
  EXPECT_EQ(engine.on_stop(c, now).what, Do::kUnchanged) << "a second stop changes nothing";
  EXPECT_EQ(engine.on_grace_over(c).what, Do::kReset);
  EXPECT_EQ(engine.on_grace_over(c).what, Do::kUnchanged);
}

TEST_F(Engine, ADeadlineThatMovesLaterOnlyAsksAgain) {
  start();
  bytes(kGet);
  fire();  // answered: a timer is pending, T after the response
  const Clock::time_point answered = now;
  now += T / 2;
  bytes("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab");  // a body: T from this read
  Next n = fire();
  EXPECT_EQ(now, answered + T);
  EXPECT_EQ(n.what, Do::kUnchanged) << "not due yet";
  EXPECT_TRUE(n.arm) << "the timer fired: a new one for the later deadline";
  EXPECT_EQ(n.deadline, answered + T / 2 + T);
}

}  // namespace
