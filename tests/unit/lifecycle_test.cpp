// Unit tests of common/lifecycle.hpp: how a stop reaches the threads blocked in recv() (OpenConnections), and the
// blocking models' accept loop (accept_or_stop) at the descriptor limit.
#include "common/lifecycle.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/loopback.hpp"

namespace {

using namespace std::chrono_literals;

// A connected TCP pair on the loopback: `client`, and `server` as accept() returned it (blocking).
struct Pair {
  Fd listener, client, server;
};

Pair connected_pair() {
  Pair p;
  p.listener = std::move(listen_sockets(any_port())[0]);
  p.client = connect_to(port_of(p.listener.get()));
  if (p.client.valid()) p.server = accept_client(p.listener.get(), Blocking::kYes);
  return p;
}

// A blocking model's thread in miniature: puts its connection in `all`, says so, reads until end of file, answers
// with what it read, and returns that.
std::string serve_until_eof(OpenConnections& all, int fd, std::promise<void>& registered) {
  const OpenConnections::Entry entry(all, fd);
  registered.set_value();
  if (!entry) return "(refused)";
  std::string in;
  while (recv_into(fd, in) > 0) {
  }
  if (!in.empty()) send_all(fd, "read: " + in);
  return in;
}

TEST(OpenConnections, StopEndsAWaitInRecvWithEndOfFile) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  OpenConnections all;
  std::promise<void> registered;
  auto served = std::async(std::launch::async, serve_until_eof, std::ref(all), p.server.get(), std::ref(registered));
  registered.get_future().wait();
  EXPECT_TRUE(all.stop_and_wait());
  ASSERT_EQ(served.wait_for(5s), std::future_status::ready) << "recv() did not return";
  EXPECT_EQ(served.get(), "");
}

// The race the stop must not lose: a request that has reached the server, whether its thread read it just before
// the stop or reads it just after, is answered before the connection closes.
TEST(OpenConnections, ARequestAlreadyReceivedIsAnswered) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  const std::string request = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_TRUE(send_all(p.client.get(), request));
  pollfd arrived{p.server.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&arrived, 1, 5000), 1) << "the request did not reach the server";
  OpenConnections all;
  std::promise<void> registered;
  auto served = std::async(std::launch::async, serve_until_eof, std::ref(all), p.server.get(), std::ref(registered));
  registered.get_future().wait();
  EXPECT_TRUE(all.stop_and_wait());
  EXPECT_EQ(served.get(), request);
  p.server.reset();  // the end of the answer
  std::string answer;
  while (recv_into(p.client.get(), answer) > 0) {
  }
  EXPECT_EQ(answer, "read: " + request);
}

TEST(OpenConnections, NoEntryOnceStopping) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  OpenConnections all;
  EXPECT_TRUE(all.stop_and_wait());  // nothing open: returns at once
  const OpenConnections::Entry late(all, p.server.get());
  EXPECT_FALSE(late);
}

TEST(OpenConnections, StopGivesUpAfterTheGrace) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  OpenConnections all;
  const OpenConnections::Entry held(all, p.server.get());  // never closed during the stop, as a slow reader's
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(all.stop_and_wait());
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, kStopGrace);
  EXPECT_LT(waited, kStopGrace + 2s);
}

// Out of descriptors with the spare lost (another thread took its number: a worker opening a file, or a sanitizer's
// own thread), a pending client can be neither accepted nor shed, and the listener stays readable. The blocking
// models' accept loop must then wait (kAcceptPause) between tries instead of spinning on poll() and accept().
// Runs in a child process, which uses up its descriptors; its exit status says which step failed.
[[noreturn]] void stuck_accept_scenario() {
  rlimit small{64, 64};
  if (::setrlimit(RLIMIT_NOFILE, &small) != 0) std::_Exit(2);
  ::testing::internal::CaptureStdout();
  std::vector<Fd> socks = listen_sockets(any_port());
  Fd client = connect_to(port_of(socks[0].get()));
  detail::stop_eventfd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // what start_process() makes
  std::thread stopper([] {
    std::this_thread::sleep_for(500ms);
    detail::on_stop_signal(SIGTERM);  // what the signal would do
  });
  {
    std::lock_guard<std::mutex> lock(detail::spare_mutex);  // lose the spare, as a shed does when it is outrun
    ::close(detail::spare_fd);
    detail::spare_fd = -1;
  }
  std::vector<int> hog;  // every descriptor left, the spare's number first
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) hog.push_back(fd);
  timespec start{}, end{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  Fd got = accept_or_stop(socks[0].get());  // returns at the stop, 500 ms from now
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
  stopper.join();
  if (got.valid()) std::_Exit(3);
  const double cpu_ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
  if (cpu_ms > 150) std::_Exit(4);  // a spin takes all of the 500 ms; waiting takes a few
  std::_Exit(0);
}

TEST(AcceptOrStop, WaitsInsteadOfSpinningWhenStuckAtTheLimit) {
  EXPECT_EXIT(stuck_accept_scenario(), ::testing::ExitedWithCode(0), "");
}

// 01's race, made certain: the stop signal comes after serve() checked stop_requested() and before its recv()
// begins. The handler shuts the registered connection's reading side, so the recv() returns end of file at once
// instead of waiting for the request deadline. (In a child process: the stop flag stays set for good.)
[[noreturn]] void stop_between_check_and_recv() {
  start_process();
  Pair p = connected_pair();
  if (!p.server.valid()) std::_Exit(2);
  const OnlyConnection registered(p.server.get());
  if (stop_requested()) std::_Exit(3);  // serve()'s check: no stop yet
  ::raise(SIGTERM);                     // ...and here it comes
  std::string in;
  const auto start = std::chrono::steady_clock::now();
  RequestDeadline deadline(10s, start);
  const long n = recv_before(p.server.get(), in, deadline, false);
  if (n != 0) std::_Exit(4);  // -2: it waited for the deadline
  if (std::chrono::steady_clock::now() - start > 1s) std::_Exit(5);
  std::_Exit(0);
}

TEST(OnlyConnection, AStopBetweenTheCheckAndTheRecvEndsTheWait) {
  EXPECT_EXIT(stop_between_check_and_recv(), ::testing::ExitedWithCode(0), "");
}

// A signal that is not a stop (here SIGUSR1 with a handler and no SA_RESTART; after Ctrl-Z and fg the kernel
// gives the same EINTR with no handler at all) does not end the wait for a request, nor move its deadline: the
// recv() starts again with the time that is left.
extern "C" void ignore_signal(int) {}

TEST(RecvBefore, RetriesEintrWithTheTimeLeft) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  struct sigaction sa {}, old {};
  sa.sa_handler = ignore_signal;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  const auto start = std::chrono::steady_clock::now();
  std::promise<pthread_t> waiter;
  auto waited = std::async(std::launch::async, [&] {
    waiter.set_value(::pthread_self());
    std::string in;
    RequestDeadline deadline(1s, start);
    return recv_before(p.server.get(), in, deadline, false);
  });
  const pthread_t thread = waiter.get_future().get();
  std::this_thread::sleep_for(500ms);  // the thread is in recv() by now, half way to its deadline
  ::pthread_kill(thread, SIGUSR1);
  ASSERT_EQ(waited.wait_for(5s), std::future_status::ready);
  const auto elapsed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  ::sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(waited.get(), -2) << "the interrupted recv() ended the wait";
  EXPECT_GE(elapsed_ms, 1000);
  EXPECT_LT(elapsed_ms, 1400) << "a second full timeout after the interruption would end near 1500 ms";
}

}  // namespace
