// Unit tests of common/options.hpp, common/timers.hpp and common/handler.hpp.
#include "common/options.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>

#include "common/handler.hpp"
#include "common/timers.hpp"

namespace {

const Model kLoop{"05-epoll", 4, nullptr};
const Model kSingle{"03-select", 0, "it has one thread by design"};

ParsedOptions parse(std::vector<std::string> args, const Model& m = kLoop) { return parse_options(args, m); }

TEST(Options, Defaults) {
  ParsedOptions r = parse({});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.options.host, "127.0.0.1");
  EXPECT_EQ(r.options.port, 8080);
  EXPECT_EQ(r.options.threads, 4);
  EXPECT_EQ(r.options.delay.count(), 1000);
  EXPECT_EQ(r.options.handler, Handler::kWait);
  EXPECT_EQ(r.options.idle_timeout.count(), 5);
  EXPECT_GE(r.options.backlog, 1024);
  EXPECT_EQ(parse({}, kSingle).options.threads, 1);
}

TEST(Options, ReadsEveryFlag) {
  ParsedOptions r = parse({"--host", "::1", "--port", "0", "--threads", "3", "--delay-us", "0", "--handler", "spin",
                           "--idle-timeout", "2", "--backlog", "128"});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.options.host, "::1");
  EXPECT_EQ(r.options.port, 0);
  EXPECT_EQ(r.options.threads, 3);
  EXPECT_EQ(r.options.delay.count(), 0);
  EXPECT_EQ(r.options.handler, Handler::kSpin);
  EXPECT_EQ(r.options.idle_timeout.count(), 2);
  EXPECT_EQ(r.options.backlog, 128);
  EXPECT_TRUE(parse({"--help"}).help);
}

TEST(Options, RefusesBadInputWithASentence) {
  const std::vector<std::vector<std::string>> bad = {
      {"--bogus"},          {"--port"},          {"--port", "abc"},      {"--port", "65536"},
      {"--port", "-1"},     {"--port", "80x"},   {"--delay-us", "-1"},   {"--handler", "nope"},
      {"--threads", "0"},   {"--host", "local"}, {"--idle-timeout", "0"}, {"--backlog", ""},
  };
  for (const auto& args : bad) EXPECT_NE(parse(args).error, "") << args[0];
  std::string why = parse({"--threads", "2"}, kSingle).error;
  EXPECT_NE(why.find("one thread by design"), std::string::npos) << why;
}

TEST(Options, UsageListsTheFlags) {
  std::string u = usage(kLoop);
  for (const char* flag :
       {"--host", "--port", "--threads", "--delay-us", "--handler", "--idle-timeout", "--backlog", "--root"})
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
}

const Model kWithFlags{"06-io_uring", 2, nullptr, {{"--no-splice", nullptr, "send files with read and send"},
                                                   {"--pipe-kib", "N", "the splice pipe's size in KiB"}}};

TEST(Options, RootIsRecordedNotOpened) {
  ParsedOptions r = parse({"--root", "/no/such/dir"});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.options.root, "/no/such/dir");
  EXPECT_EQ(r.options.root_fd, -1);  // options_or_exit() opens it, so the parser needs no real directory
  EXPECT_EQ(parse({}).options.root, "");
  EXPECT_NE(parse({"--root"}).error, "");
  EXPECT_NE(parse({"--root", ""}).error, "");
}

TEST(Options, ModelFlagsAreRecorded) {
  ParsedOptions r = parse({"--pipe-kib", "64", "--no-splice", "--port", "0"}, kWithFlags);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.options.extra.size(), 2u);
  EXPECT_EQ(r.options.extra["--no-splice"], "");  // a switch
  EXPECT_EQ(r.options.extra["--pipe-kib"], "64");
  EXPECT_EQ(r.options.port, 0);
  EXPECT_TRUE(parse({}, kWithFlags).options.extra.empty());
  EXPECT_NE(parse({"--pipe-kib"}, kWithFlags).error, "");   // a value is needed
  EXPECT_NE(parse({"--no-splice"}, kLoop).error, "");       // another model's flag is unknown
}

TEST(Options, UsageListsRootAndTheModelFlags) {
  std::string u = usage(kWithFlags);
  for (const char* text : {"--root DIR", "[--no-splice]", "[--pipe-kib N]", "--no-splice         send files",
                           "--pipe-kib N        the splice pipe's size"})
    EXPECT_NE(u.find(text), std::string::npos) << text << "\n" << u;
  EXPECT_EQ(usage(kLoop).find("--no-splice"), std::string::npos);
}

TEST(Options, UsageErrorExits2WithTheSentence) {
  EXPECT_EXIT(usage_error(kWithFlags, "--pipe-kib takes a power of two"), ::testing::ExitedWithCode(2),
              "error: --pipe-kib takes a power of two\n\nusage: ");
}

// The command line as main() gets it.
Options run_options_or_exit(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return options_or_exit(static_cast<int>(argv.size()), argv.data(), kLoop);
}

TEST(Options, OptionsOrExitOpensTheRoot) {
  Options o = run_options_or_exit({"run_server", "--root", "/tmp"});
  EXPECT_GE(o.root_fd, 0);
  EXPECT_TRUE(::fcntl(o.root_fd, F_GETFL) & O_PATH);
  ::close(o.root_fd);
  EXPECT_EQ(run_options_or_exit({"run_server"}).root_fd, -1);
  EXPECT_EXIT(run_options_or_exit({"run_server", "--root", "/no/such/dir"}), ::testing::ExitedWithCode(2),
              "error: --root: cannot open directory '/no/such/dir': No such file or directory");
  EXPECT_EXIT(run_options_or_exit({"run_server", "--root", "/etc/hostname"}), ::testing::ExitedWithCode(2),
              "cannot open directory '/etc/hostname': Not a directory");
}

TEST(Handler, TimerOnlyForTheWaitHandlerWithADelay) {
  Options o;
  EXPECT_TRUE(handler_needs_timer(o));
  o.delay = std::chrono::microseconds(0);
  EXPECT_FALSE(handler_needs_timer(o));
  o.delay = std::chrono::microseconds(1000);
  o.handler = Handler::kSleep;
  EXPECT_FALSE(handler_needs_timer(o));
}

TEST(Handler, SpinAndSleepTakeAtLeastTheDelay) {
  for (Handler h : {Handler::kSleep, Handler::kSpin}) {
    Options o;
    o.handler = h;
    o.delay = std::chrono::microseconds(2000);
    auto start = std::chrono::steady_clock::now();
    run_handler_here(o);
    EXPECT_GE(std::chrono::steady_clock::now() - start, o.delay);
  }
}

TEST(Timers, PopsInDeadlineOrder) {
  using Clock = TimerQueue<int>::Clock;
  TimerQueue<int> q;
  auto t0 = Clock::now();
  EXPECT_FALSE(q.time_to_next(t0).has_value());
  q.add(t0 + std::chrono::milliseconds(30), 3);
  q.add(t0 + std::chrono::milliseconds(10), 1);
  q.add(t0 + std::chrono::milliseconds(20), 2);
  EXPECT_EQ(*q.time_to_next(t0), std::chrono::milliseconds(10));
  EXPECT_FALSE(q.pop_due(t0).has_value());
  auto later = t0 + std::chrono::milliseconds(25);
  EXPECT_EQ(q.pop_due(later), 1);
  EXPECT_EQ(q.pop_due(later), 2);
  EXPECT_FALSE(q.pop_due(later).has_value());
  EXPECT_EQ(*q.time_to_next(later), std::chrono::nanoseconds(0) + std::chrono::milliseconds(5));
  EXPECT_EQ(*q.time_to_next(t0 + std::chrono::seconds(1)), std::chrono::nanoseconds(0));
}

// Timers of closed connections (odd numbers here) are dropped once they outnumber twice the live limit; the live
// ones stay, still in deadline order.
TEST(Timers, PruneDropsStaleTimersOnlyPastTheLimit) {
  using Clock = TimerQueue<int>::Clock;
  TimerQueue<int> q;
  auto t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) q.add(t0 + std::chrono::milliseconds(1000 - i), i);
  auto odd = [](int what) { return what % 2 == 1; };
  q.prune_over(500, odd);
  EXPECT_EQ(q.size(), 1000U) << "at twice the limit, nothing is pruned yet";
  q.prune_over(499, odd);
  EXPECT_EQ(q.size(), 500U);
  auto end = t0 + std::chrono::seconds(2);
  for (int expect = 998; expect >= 0; expect -= 2) EXPECT_EQ(q.pop_due(end), expect);
  EXPECT_TRUE(q.empty());
}

TEST(Timers, ConversionsRoundUpToTheMicrosecond) {
  timeval tv = to_timeval(std::chrono::nanoseconds(1'500'000'001));
  EXPECT_EQ(tv.tv_sec, 1);
  EXPECT_EQ(tv.tv_usec, 500'001);
  timespec ts = to_timespec(std::chrono::nanoseconds(2'000'000'007));
  EXPECT_EQ(ts.tv_sec, 2);
  EXPECT_EQ(ts.tv_nsec, 7);
}

}  // namespace
