// How a connection ends (common/closing.hpp), on every server and variant: gracefully after a last response, so
// that no RST destroys a response the client has not read yet; with a reset on a timeout; and within the stop's
// grace whatever the client does.
//
// Before the close protocol, each of these failed somewhere: a refused 4 MB upload ended in a reset or a broken
// pipe instead of the 413 (03, 05, 06, 07), a file followed by a pipelined request lost its tail (01, 04), and a
// slow reader held 01's stop for as long as it kept reading.

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/support/proc.hpp"
#include "tests/support/server_fixture.hpp"
#include "tests/support/static_root.hpp"

namespace psp::test {
namespace {

constexpr std::size_t kUpload = 4'000'000;

class Closing : public ServerTest {};

std::string get(std::string_view target, std::string_view extra_headers = "") {
  return request("GET", target, "HTTP/1.1", extra_headers);
}

// What Python's http.client does with a POST: the whole body first, then the response. The server refuses the
// body (413) as soon as it has the head, so it must keep reading and throwing away the 4 MB that follow, or its
// close resets the connection and the client never reads the 413.
TEST_P(Closing, RefusedUploadIsAnsweredAndReadInFull) {
  if (!launch({"--delay-us", "0"})) return;
  for (int round = 0; round < 3; ++round) {
    Client c = connect();
    ASSERT_TRUE(c.ok()) << c.error();
    const std::string head = request("POST", "/upload", "HTTP/1.1",
                                     "Content-Length: " + std::to_string(kUpload) + "\r\n");
    ASSERT_TRUE(c.send(head + std::string(kUpload, 'x'), deadline_in(2 * kIoTimeout)))
        << "round " << round << ": " << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "round " << round << ": " << c.error();
    EXPECT_EQ(r->status, 413) << r->head_text();
    const Client::Closed end = c.wait_closed(deadline_in(kIoTimeout));
    EXPECT_EQ(end, Client::Closed::eof) << "round " << round << ": the connection was " << Client::describe(end);
  }
  EXPECT_TRUE(serves_new_client());
}

// A file asked for with Connection: close, and a request pipelined behind it while the file is still on its way
// (04's fairness rule closes such connections too). The server never reads that request; it must still deliver
// every byte of the file and end with a FIN, not an RST that cuts the file short.
TEST_P(Closing, FileThenAPipelinedRequestArrivesWhole) {
  if (!launch_static()) return;
  Client c = connect({false, /*rcvbuf=*/256 * 1024});
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(get("/big.bin", "Connection: close\r\n"), deadline_in(kIoTimeout))) << c.error();
  Download d(std::move(c), false);
  const auto deadline = deadline_in(30s);
  while (d.received() < (1 << 20) && !d.finished() && Clock::now() < deadline) {
    pollfd p{d.client().fd(), POLLIN, 0};
    ::poll(&p, 1, poll_timeout_ms(deadline));
    d.on_readable();
  }
  std::this_thread::sleep_for(200ms);  // the property under test: the second request comes while the file is sent
  ASSERT_TRUE(d.client().send(get("/notes.txt"), deadline_in(kIoTimeout))) << d.client().error();
  ASSERT_TRUE(d.finish(deadline)) << d.error();
  EXPECT_EQ(d.length(), StaticRoot::kBigSize);
  EXPECT_EQ(d.hash(), static_root().big_hash()) << "the bytes differ from the file's";
  const Client::Closed end = d.client().wait_closed(deadline_in(kIoTimeout));
  EXPECT_EQ(end, Client::Closed::eof) << "after the file, the connection was " << Client::describe(end);
}

// A request head that does not arrive whole by the deadline: the connection timed out, and is reset.
TEST_P(Closing, RequestDeadlineEndsWithAReset) {
  if (!launch({"--idle-timeout", "1", "--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\n", deadline_in(kIoTimeout))) << c.error();
  const auto start = Clock::now();
  const Client::Closed end = c.wait_closed(deadline_in(6s));
  EXPECT_EQ(end, Client::Closed::reset) << "after " << ms_since(start) << " ms the connection was "
                                        << Client::describe(end);
  EXPECT_TRUE(serves_new_client());
}

// Downloads abandoned after a few bytes (the client resets), then another file: each is answered whole, and the
// abandoned connections are all given back.
TEST_P(Closing, AbandonedDownloadsThenAnotherFile) {
  if (!launch_static({"--idle-timeout", "2"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  for (int round = 0; round < 5; ++round) {
    Client big = connect();
    ASSERT_TRUE(big.ok()) << big.error();
    ASSERT_TRUE(big.send(get("/big.bin"), deadline_in(kIoTimeout))) << big.error();
    while (big.buffered().size() < 1000 && big.read_available()) {
      pollfd p{big.fd(), POLLIN, 0};
      ::poll(&p, 1, poll_timeout_ms(deadline_in(kIoTimeout)));
    }
    big.reset();
    Client small = connect();
    ASSERT_TRUE(small.ok()) << small.error();
    ASSERT_TRUE(small.send(get("/notes.txt", "Connection: close\r\n"), deadline_in(kIoTimeout))) << small.error();
    const auto r = small.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "round " << round << ": " << small.error();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, static_root().file("/notes.txt").body) << "round " << round;
  }
  const int now = wait_fd_count_at_most(server_->pid(), baseline, deadline_in(6s));
  EXPECT_LE(now, baseline) << "the abandoned downloads were not all given back:\n" << describe_fds(server_->pid());
}

// Clients that ask for a large file and never read it: each is closed (reset) once it has taken nothing for the
// idle timeout, and a stop does not wait for them past its grace.
TEST_P(Closing, NeverReadingClientsOfAFileAreClosedAndDoNotHoldTheStop) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!launch_static({"--idle-timeout", "2"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  // 01 serves one connection at a time: a second stalled client would wait for the first to be reset.
  const int clients = server_info().number == 1 ? 1 : 3;
  std::vector<Client> stalled;
  for (int i = 0; i < clients; ++i) {
    stalled.push_back(connect({false, /*rcvbuf=*/4096}));
    ASSERT_TRUE(stalled.back().ok()) << stalled.back().error();
    ASSERT_TRUE(stalled.back().send(get("/big.bin"), deadline_in(kIoTimeout))) << stalled.back().error();
  }
  const auto start = Clock::now();
  // A blocking send (01, 02, 04) fails after SO_SNDTIMEO without progress, which may follow a first timeout that
  // moved a few bytes: up to twice the idle timeout, plus the margin.
  const int now = wait_fd_count_at_most(server_->pid(), baseline, deadline_in(10s));
  EXPECT_LE(now, baseline) << "clients that read nothing for the 2 s idle timeout are still open after "
                           << ms_since(start) << " ms:\n" << describe_fds(server_->pid());

  for (Client& c : stalled) {
    c = connect({false, /*rcvbuf=*/4096});
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(c.send(get("/big.bin"), deadline_in(kIoTimeout))) << c.error();
  }
  std::this_thread::sleep_for(200ms);  // the property under test: they are stalled when the stop comes
  const auto stop = Clock::now();
  const ExitStatus status = server_->stop(SIGTERM, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
  EXPECT_LT(ms_since(stop), 5000) << "stalled readers held the stop past its 2 s grace";
}

// A reader that keeps taking a large file slowly, when the stop comes: it gets the stop's grace (2 s), then the
// connection is reset and the server exits. (01 used to keep sending for as long as the reader kept reading.)
TEST_P(Closing, SlowReaderDoesNotHoldTheStopPastTheGrace) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!launch_static()) return;
  Client c = connect({false, /*rcvbuf=*/16 * 1024});
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(get("/big.bin", "Connection: close\r\n"), deadline_in(kIoTimeout))) << c.error();
  Download d(std::move(c), false);
  auto read_a_little = [&d] {  // 16 KiB, then a pause: about 1.5 MB/s, so 50 MiB would take half a minute
    pollfd p{d.client().fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) d.on_readable(16 * 1024);
    std::this_thread::sleep_for(10ms);
  };
  for (int i = 0; i < 20 && !d.finished(); ++i) read_a_little();
  ASSERT_FALSE(d.finished()) << d.error();
  const auto stop = Clock::now();
  server_->send_signal(SIGTERM);
  while (server_->running() && ms_since(stop) < 10'000 && !d.finished()) read_a_little();
  const ExitStatus status = server_->wait_exit(deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
  EXPECT_LT(ms_since(stop), 6000) << "a slow reader held the stop past its 2 s grace";
}

INSTANTIATE_TEST_SUITE_P(AllServers, Closing, ::testing::ValuesIn(all_servers()), ServerName());

// Thousands of idle keep-alive connections end at once, half of them by their clients and half by the stop: the
// server exits on time. (07 on Asio's io_uring backend once never exited past about 5,500 connections.) For the
// models that hold thousands of connections in one thread: 01 serves one at a time, 02 would need 6,000 threads,
// 03 stops at FD_SETSIZE and 04 at its queue, and each of those limits has tests of its own.
class ClosingMany : public ServerTest {};

TEST_P(ClosingMany, StopAfterThousandsOfConnectionsEndAtOnce) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  constexpr int kClients = 6000;
  rlim_t own = 0;
  ASSERT_TRUE(raise_own_fd_limit(kClients + 200, own));
  if (!launch({"--delay-us", "0", "--idle-timeout", "60", "--threads", "1"}, {std::min<rlim_t>(own, kClients + 1000)}))
    return;
  std::vector<Client> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(connect());
    ASSERT_TRUE(clients.back().ok()) << "client " << i << ": " << clients.back().error();
    ASSERT_TRUE(clients.back().send(request("GET", "/"), deadline_in(kIoTimeout))) << clients.back().error();
  }
  for (int i = 0; i < kClients; ++i) {  // every one answered: the server holds them all, idle between requests
    const auto r = clients[static_cast<std::size_t>(i)].read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "client " << i << ": " << clients[static_cast<std::size_t>(i)].error();
  }
  for (int i = 0; i < kClients; i += 2) clients[static_cast<std::size_t>(i)].close();
  const auto stop = Clock::now();
  const ExitStatus status = server_->stop(SIGTERM, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << " " << ms_since(stop)
                                     << " ms after SIGTERM; stderr: " << server_->err();
}

// Empty when tests/grade.sh grades a server that this rule is not for.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ClosingMany);
INSTANTIATE_TEST_SUITE_P(EventLoops, ClosingMany, ::testing::ValuesIn(servers({5, 6, 7})), ServerName());

}  // namespace
}  // namespace psp::test
