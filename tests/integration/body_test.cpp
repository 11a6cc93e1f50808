// Request bodies (common/http.hpp's RequestReader): every server frames a body by Content-Length or by the chunked
// coding (RFC 9112 6, 7.1), reads it and throws it away, and answers what follows it on the same connection;
// "Expect: 100-continue" gets its interim 100, or a final status at once (RFC 9110 10.1.1); a response to HEAD has
// no content, errors included (RFC 9110 9.3.2).

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/support/server_fixture.hpp"

namespace psp::test {
namespace {

class Bodies : public ServerTest {};

std::string post(std::string_view headers) { return request("POST", "/form", "HTTP/1.1", headers); }

// A body framed each way, and a GET pipelined behind them in the same write: if a server misread where a body
// ends, the next request would start in the middle of it.
TEST_P(Bodies, ContentLengthAndChunkedPostsKeepTheConnection) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string pipelined = post("Content-Length: 5\r\n") + "hello" +
                                post("Transfer-Encoding: chunked\r\n") + "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n" +
                                "0\r\nTrailer-Field: ignored\r\n\r\n" + request("GET", "/after");
  ASSERT_TRUE(c.send(pipelined, deadline_in(kIoTimeout))) << c.error();
  for (const char* which : {"Content-Length POST", "chunked POST", "GET after them"}) {
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << which << ": " << c.error();
    EXPECT_TRUE(is_ok_response(*r, false, "keep-alive")) << which;
  }
  EXPECT_EQ(c.buffered(), "") << "bytes after the last response";
}

// A chunked body that arrives a byte at a time: the reader picks up where it stopped, whatever the split.
TEST_P(Bodies, ChunkedBodySentOneByteAtATime) {
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect({/*nodelay=*/true});
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string bytes = post("Transfer-Encoding: chunked\r\nConnection: close\r\n") + "3\r\nabc\r\n0\r\n\r\n";
  ASSERT_TRUE(c.send_byte_by_byte(bytes, deadline_in(kIoTimeout))) << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "close"));
}

// A chunked body past --max-body: 413 as soon as the chunks add up to more, then the lingering close reads and
// throws away the rest, so the client reads the whole 413 and sees a FIN, not a reset.
TEST_P(Bodies, ChunkedBodyOverTheLimitIs413WithoutAReset) {
  if (!launch({"--delay-us", "0", "--max-body", "100000"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  std::string body;
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'x') + "\r\n";  // 64 KiB per chunk
  for (int i = 0; i < 4; ++i) body += chunk;
  ASSERT_TRUE(c.send(post("Transfer-Encoding: chunked\r\n") + body + "0\r\n\r\n", deadline_in(2 * kIoTimeout)))
      << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_EQ(r->status, 413) << r->head_text();
  EXPECT_EQ(lower(r->header("Connection").value_or("")), "close") << r->head_text();
  const Client::Closed end = c.wait_closed(deadline_in(kIoTimeout));
  EXPECT_EQ(end, Client::Closed::eof) << "the connection was " << Client::describe(end);
  EXPECT_TRUE(serves_new_client());
}

// RFC 9110 10.1.1: the client sends the head and waits. A body the server will read gets "100 Continue" first and
// the final answer after the body; a body it would refuse gets the refusal at once, so it is never sent.
TEST_P(Bodies, ExpectContinueGets100ThenTheAnswerOrARefusalAtOnce) {
  if (!launch({"--delay-us", "0"})) return;
  {
    Client c = connect();
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(c.send(post("Expect: 100-continue\r\nContent-Length: 4\r\n"), deadline_in(kIoTimeout))) << c.error();
    const auto interim = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(interim) << c.error();
    EXPECT_EQ(interim->status_line, "HTTP/1.1 100 Continue");
    ASSERT_TRUE(c.send("body", deadline_in(kIoTimeout))) << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << c.error();
    EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
  }
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(post("Expect: 100-continue\r\nContent-Length: 2000000\r\n"), deadline_in(kIoTimeout)))
      << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_EQ(r->status, 413) << "a body over --max-body (1 MiB) is refused before it is sent:\n" << r->head_text();
}

// RFC 9110 9.3.2: no content in a response to HEAD, whatever its status. Content-Length may say what a GET would
// get; if the bytes followed anyway, they would sit in front of the next response.
TEST_P(Bodies, ErrorsToHeadHaveNoContent) {
  if (!launch({"--delay-us", "0"})) return;
  for (const char* fields : {"Content-Length: 2000000\r\n", "Transfer-Encoding: gzip\r\n"}) {
    Client c = connect();
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(c.send(request("HEAD", "/", "HTTP/1.1", fields), deadline_in(kIoTimeout))) << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout), /*head=*/true);
    ASSERT_TRUE(r) << c.error();
    EXPECT_GE(r->status, 400) << r->head_text();
    const Client::Closed end = c.read_until_closed(deadline_in(kIoTimeout));
    EXPECT_TRUE(end == Client::Closed::eof || end == Client::Closed::reset) << Client::describe(end);
    EXPECT_EQ(c.buffered(), "") << "content after the head of a response to HEAD (" << fields << ")";
  }
}

// With --root, files are only fetched: a POST gets 405 with Allow, after its body was read, so the connection
// stays usable for the next request.
TEST_P(Bodies, PostWithRootIs405AndTheConnectionGoesOn) {
  if (!launch_static()) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("POST", "/index.html", "HTTP/1.1", "Content-Length: 3\r\n") + "a=b" +
                         request("GET", "/index.html"),
                     deadline_in(kIoTimeout)))
      << c.error();
  const auto refused = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(refused) << c.error();
  EXPECT_EQ(refused->status, 405) << refused->head_text();
  EXPECT_EQ(refused->header("Allow").value_or("(none)"), "GET, HEAD") << refused->head_text();
  EXPECT_EQ(lower(refused->header("Connection").value_or("")), "keep-alive") << refused->head_text();
  const auto file = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(file) << c.error();
  EXPECT_EQ(file->status, 200) << file->head_text();
}

// A body that keeps coming is not cut off by the request deadline (common/deadline.hpp): 20,000 bytes at about
// 13 KB/s take 1.5 s, longer than --idle-timeout 1, but no gap between two reads comes near the 1 s. A deadline on
// the head and the body together would reset this client after 1 s. (RFC 9112 9.5 leaves the time to the server;
// nginx times the gap between two reads of a body, client_body_timeout, as this does.)
TEST_P(Bodies, ABodyThatKeepsComingIsNotCutOff) {
  if (!launch({"--delay-us", "0", "--idle-timeout", "1"})) return;
  Client c = connect({/*nodelay=*/true});
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string body(20000, 'b');
  ASSERT_TRUE(c.send(post("Content-Length: 20000\r\n"), deadline_in(kIoTimeout))) << c.error();
  const auto start = Clock::now();
  for (std::size_t sent = 0; sent < body.size(); sent += 1000) {
    std::this_thread::sleep_for(75ms);
    ASSERT_TRUE(c.send(body.substr(sent, 1000), deadline_in(kIoTimeout)))
        << "after " << sent << " bytes of the body, " << ms_since(start) << " ms: " << c.error();
  }
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << ms_since(start) << " ms after the head: " << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
  EXPECT_GT(ms_since(start), 1000) << "the body came within the deadline: this proved nothing";
}

INSTANTIATE_TEST_SUITE_P(AllServers, Bodies, ::testing::ValuesIn(all_servers()), ServerName());

}  // namespace
}  // namespace psp::test
