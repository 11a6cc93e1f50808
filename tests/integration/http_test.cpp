// Wire behaviour every server shares: the response itself, persistent connections, pipelining and requests
// split into single bytes.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/server_fixture.hpp"

namespace psp::test {
namespace {

class Http : public ServerTest {};

TEST_P(Http, GetAndHeadHaveExactHeadersAndBody) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();

  ASSERT_TRUE(c.send(request("GET", "/"), deadline_in(kIoTimeout))) << c.error();
  const auto get = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(get) << c.error();
  EXPECT_TRUE(is_ok_response(*get, false, "keep-alive"));

  ASSERT_TRUE(c.send(request("HEAD", "/some/path"), deadline_in(kIoTimeout))) << c.error();
  const auto head = c.read_response(deadline_in(kIoTimeout), /*head=*/true);
  ASSERT_TRUE(head) << c.error();
  EXPECT_TRUE(is_ok_response(*head, true, "keep-alive"));
  std::vector<std::string> get_names, head_names;
  for (const auto& h : get->headers) get_names.push_back(lower(h.first));
  for (const auto& h : head->headers) head_names.push_back(lower(h.first));
  EXPECT_EQ(get_names, head_names) << "HEAD must send the same headers as GET";

  // If HEAD had sent a body, its bytes would now sit in front of this response and break its framing.
  ASSERT_TRUE(c.send(request("GET", "/after-head"), deadline_in(kIoTimeout))) << c.error();
  const auto after = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(after) << c.error();
  EXPECT_TRUE(is_ok_response(*after, false, "keep-alive"));
  EXPECT_EQ(c.buffered(), "") << "bytes after the last response";
}

TEST_P(Http, HundredRequestsOnOneKeepAliveConnection) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(c.send(request("GET", "/" + std::to_string(i)), deadline_in(kIoTimeout)))
        << "request " << i << ": " << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "request " << i << ": " << c.error();
    ASSERT_TRUE(is_ok_response(*r, false, "keep-alive")) << "request " << i;
  }
}

// ab -k speaks HTTP/1.0 with "Connection: Keep-Alive" and hangs unless the reply says keep-alive.
TEST_P(Http, Http10WithKeepAliveStaysOpen) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send(request("GET", "/", "HTTP/1.0", "Connection: Keep-Alive\r\n"), deadline_in(kIoTimeout)))
        << "request " << i << ": " << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "request " << i << ": " << c.error();
    ASSERT_TRUE(is_ok_response(*r, false, "keep-alive")) << "request " << i;
  }
}

TEST_P(Http, Http10WithoutKeepAliveIsClosed) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/", "HTTP/1.0"), deadline_in(kIoTimeout))) << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "close"));
  const auto closed = c.wait_closed(deadline_in(3s));
  EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
      << "after the response the connection was " << Client::describe(closed) << " " << Client::preview(c.buffered());
}

TEST_P(Http, Http11ConnectionCloseIsClosed) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)))
      << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "close"));
  const auto closed = c.wait_closed(deadline_in(3s));
  EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
      << "after the response the connection was " << Client::describe(closed) << " " << Client::preview(c.buffered());
}

// The responses are identical, so order shows in the framing: two HEADs sit among the GETs, and a response out of
// order would put a body where a head is expected.
TEST_P(Http, TenPipelinedRequestsAnsweredInOrder) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  auto is_head = [](int i) { return i == 3 || i == 7; };
  std::string all;
  for (int i = 0; i < 10; ++i) all += request(is_head(i) ? "HEAD" : "GET", "/pipelined/" + std::to_string(i));
  ASSERT_TRUE(c.send(all, deadline_in(kIoTimeout))) << c.error();  // one write
  for (int i = 0; i < 10; ++i) {
    const auto r = c.read_response(deadline_in(kIoTimeout), is_head(i));
    ASSERT_TRUE(r) << "response " << i << ": " << c.error();
    ASSERT_TRUE(is_ok_response(*r, is_head(i), "keep-alive")) << "response " << i;
  }
  // Nothing more may come: an eleventh response or stray bytes would show up here.
  ASSERT_TRUE(c.send(request("GET", "/last"), deadline_in(kIoTimeout))) << c.error();
  const auto last = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(last) << c.error();
  EXPECT_TRUE(is_ok_response(*last, false, "keep-alive"));
  EXPECT_EQ(c.buffered(), "");
}

TEST_P(Http, RequestSentOneByteAtATime) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect({/*nodelay=*/true});
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string req = request("GET", "/one/byte/at/a/time", "HTTP/1.1", "User-Agent: psp-test\r\nAccept: */*\r\n");
  ASSERT_TRUE(c.send_byte_by_byte(req, deadline_in(kIoTimeout))) << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
  // The same connection carries on normally.
  ASSERT_TRUE(c.send_byte_by_byte(request("HEAD", "/"), deadline_in(kIoTimeout))) << c.error();
  const auto head = c.read_response(deadline_in(kIoTimeout), true);
  ASSERT_TRUE(head) << c.error();
  EXPECT_TRUE(is_ok_response(*head, true, "keep-alive"));
}

INSTANTIATE_TEST_SUITE_P(AllServers, Http, ::testing::ValuesIn(all_servers()), ServerName());

}  // namespace
}  // namespace psp::test
