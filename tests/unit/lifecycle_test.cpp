// Unit tests of common/lifecycle.hpp's OpenConnections: how a stop reaches the threads blocked in recv().
#include "common/lifecycle.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <future>
#include <string>

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

}  // namespace
