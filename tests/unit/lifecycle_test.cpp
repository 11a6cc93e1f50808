// Unit tests of common/lifecycle.hpp's OpenConnections: how a stop reaches the threads blocked in recv().
#include "common/lifecycle.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;

// A connected TCP pair on the loopback: `client`, and `server` as accept() returned it (blocking).
struct Pair {
  Fd listener, client, server;
};

Pair connected_pair() {
  Options opts;
  opts.port = 0;
  Pair p;
  p.listener = std::move(listen_sockets(opts)[0]);
  p.client = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(detail::bound_port(p.listener.get())));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(p.client.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
    p.server = accept_client(p.listener.get(), Blocking::kYes);
  return p;
}

// What a blocking model's thread does with its connection: read until the peer or a stop ends the stream, then
// answer with what it read. Returns what recv() returned last.
long read_until_eof_then_answer(OpenConnections& all, Fd& fd) {
  const OpenConnections::Entry entry(all, fd.get());
  if (!entry) return -2;
  std::string in;
  long n;
  while ((n = recv_into(fd.get(), in)) > 0) {
  }
  if (!in.empty()) send_all(fd.get(), "read: " + in);
  return n;
}

TEST(OpenConnections, StopEndsAWaitInRecvWithEndOfFile) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  OpenConnections all;
  auto served = std::async(std::launch::async, [&] { return read_until_eof_then_answer(all, p.server); });
  std::this_thread::sleep_for(50ms);  // time to block in recv(); if it is late, its Entry is refused (-2) below
  EXPECT_TRUE(all.stop_and_wait());
  ASSERT_EQ(served.wait_for(5s), std::future_status::ready) << "recv() did not return";
  const long last = served.get();
  EXPECT_TRUE(last == 0 || last == -2) << last;
}

TEST(OpenConnections, ARequestAlreadyReceivedIsStillReadAndAnswered) {
  Pair p = connected_pair();
  ASSERT_TRUE(p.server.valid());
  OpenConnections all;
  std::promise<void> registered;
  std::promise<void> may_read;
  auto served = std::async(std::launch::async, [&] {
    const OpenConnections::Entry entry(all, p.server.get());
    registered.set_value();
    may_read.get_future().wait();  // the stop comes while the request waits, unread, in the kernel
    std::string in;
    while (recv_into(p.server.get(), in) > 0) {
    }
    return in.empty() ? false : send_all(p.server.get(), "read: " + in);
  });
  registered.get_future().wait();
  ASSERT_TRUE(send_all(p.client.get(), "GET / HTTP/1.1\r\n\r\n"));
  std::this_thread::sleep_for(20ms);  // the bytes reach the server's receive queue
  auto stopped = std::async(std::launch::async, [&] { return all.stop_and_wait(); });
  std::this_thread::sleep_for(20ms);  // the stop has shut the reading side down
  may_read.set_value();
  EXPECT_TRUE(served.get()) << "the request received before the stop was not read and answered";
  EXPECT_TRUE(stopped.get());
  p.server.reset();  // the end of the answer
  std::string answer;
  while (recv_into(p.client.get(), answer) > 0) {
  }
  EXPECT_EQ(answer, "read: GET / HTTP/1.1\r\n\r\n");
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
