// Peers that misbehave: reset mid-response, vanish before the response, half-close, or go silent. The server
// must survive each, keep serving, and release every descriptor the peer used.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/proc.hpp"
#include "tests/support/server_fixture.hpp"

namespace psp::test {
namespace {

class Faults : public ServerTest {
 protected:
  // After the faults the server still serves a new client, and its descriptor count comes back to `baseline`
  // (polled: closing may finish a moment after the peer left).
  void expect_recovered(int baseline) {
    EXPECT_TRUE(serves_new_client());
    const int now = wait_fd_count_at_most(server_->pid(), baseline, deadline_in(kIoTimeout));
    EXPECT_LE(now, baseline) << "descriptors did not come back to the baseline of " << baseline << "; open now:\n"
                             << describe_fds(server_->pid());
  }
};

std::string pipelined(int count, std::string_view path) {
  std::string all;
  for (int i = 0; i < count; ++i) all += request("GET", std::string(path) + std::to_string(i));
  return all;
}

// The client asks for ~1.2 MB of responses with a small receive buffer, reads the first one (the server is now
// writing) and resets the connection: the server's pending write fails with ECONNRESET or EPIPE.
TEST_P(Faults, ResetMidResponse) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0) << "no descriptor baseline for /proc/" << server_->pid() << "/fd";
  for (int round = 0; round < 3; ++round) {
    Client c = connect({false, /*rcvbuf=*/4096});
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(c.send(pipelined(1000, "/reset/"), deadline_in(kIoTimeout))) << c.error();
    const auto first = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(first) << c.error();
    EXPECT_TRUE(is_ok_response(*first, false, "keep-alive"));
    c.reset();
  }
  expect_recovered(baseline);
}

// The client sends pipelined requests and closes at once without reading: the server's first write draws an
// RST, its next one EPIPE, which kills a server that lets SIGPIPE through.
TEST_P(Faults, PeerVanishesBeforeResponse) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0) << "no descriptor baseline for /proc/" << server_->pid() << "/fd";
  for (int round = 0; round < 3; ++round) {
    Client c = connect();
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(c.send(pipelined(50, "/vanish/"), deadline_in(kIoTimeout))) << c.error();
    c.close();
  }
  expect_recovered(baseline);
}

// shutdown(SHUT_WR) after the requests: the server sees EOF while it is still handling them (20 ms each), must
// still answer all of them, then close.
TEST_P(Faults, HalfCloseStillGetsResponses) {
  if (!launch({"--delay-us", "20000"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0) << "no descriptor baseline for /proc/" << server_->pid() << "/fd";
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(pipelined(3, "/half-close/"), deadline_in(kIoTimeout))) << c.error();
  c.half_close();
  for (int i = 0; i < 3; ++i) {
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "response " << i << ": " << c.error();
    // Whether the server announces the coming close is its choice.
    const std::string connection = lower(r->header("Connection").value_or(""));
    EXPECT_TRUE(is_ok_response(*r, false, connection == "close" ? "close" : "keep-alive")) << "response " << i;
  }
  const auto closed = c.wait_closed(deadline_in(3s));
  EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
      << "after the last response the half-closed connection was " << Client::describe(closed) << " "
      << Client::preview(c.buffered());
  c.close();
  expect_recovered(baseline);
}

INSTANTIATE_TEST_SUITE_P(AllServers, Faults, ::testing::ValuesIn(all_servers()), ServerName());

// --idle-timeout 1: a silent connection, one stuck in the middle of a request head, and one idle after a
// response are closed by the server, without a reply, after about a second.
class IdleTimeout : public ServerTest {};

TEST_P(IdleTimeout, IdleConnectionsAreClosed) {
  if (!launch({"--delay-us", "0", "--idle-timeout", "1"})) return;
  struct Case {
    const char* name;
    std::string partial;  // sent right after connecting
    bool full_request_first;
  };
  const Case cases[] = {
      {"sends nothing", "", false},
      {"half a request head", "GET /half HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Part", false},
      {"idle after a response", "", true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Client c = connect();
    ASSERT_TRUE(c.ok()) << c.error();
    if (k.full_request_first) {
      ASSERT_TRUE(c.send(request("GET", "/"), deadline_in(kIoTimeout))) << c.error();
      const auto r = c.read_response(deadline_in(kIoTimeout));
      ASSERT_TRUE(r) << c.error();
      EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
    }
    if (!k.partial.empty()) {
      ASSERT_TRUE(c.send(k.partial, deadline_in(kIoTimeout))) << c.error();
    }
    const auto start = Clock::now();
    const auto closed = c.wait_closed(deadline_in(6s));
    const long long elapsed = ms_since(start);
    EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
        << "the connection was " << Client::describe(closed) << " after " << elapsed << " ms "
        << Client::preview(c.buffered());
    EXPECT_GE(elapsed, 500) << "closed too early for --idle-timeout 1";
    EXPECT_LE(elapsed, 4000) << "closed too late for --idle-timeout 1";
  }
  EXPECT_TRUE(serves_new_client());
}

INSTANTIATE_TEST_SUITE_P(AllServers, IdleTimeout, ::testing::ValuesIn(all_servers()), ServerName());

}  // namespace
}  // namespace psp::test
