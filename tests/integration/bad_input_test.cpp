// Every bad request gets a well-formed error response with Connection: close, then the server closes the
// connection, and the next client is served as usual.

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/support/server_fixture.hpp"

namespace psp::test {
namespace {

struct BadRequest {
  const char* name;
  std::string bytes;
  int status;
};

inline void PrintTo(const BadRequest& b, std::ostream* os) { *os << b.name; }

std::vector<BadRequest> bad_requests() {
  const std::string host = "Host: 127.0.0.1\r\n";
  return {
      {"garbage_request_line", "GARBAGE\r\n\r\n", 400},
      {"header_of_9000_bytes", "GET / HTTP/1.1\r\n" + host + "X-Filler: " + std::string(9000, 'a') + "\r\n\r\n", 431},
      {"put", "PUT / HTTP/1.1\r\n" + host + "\r\n", 405},
      {"body_over_max_body", "POST / HTTP/1.1\r\n" + host + "Content-Length: 2000000\r\n\r\n", 413},
      {"transfer_coding_gzip", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip\r\n\r\n", 501},
      {"http_2_0", "GET / HTTP/2.0\r\n" + host + "\r\n", 505},
      {"http11_without_host", "GET / HTTP/1.1\r\n\r\n", 400},
      {"whitespace_before_colon", "GET / HTTP/1.1\r\n" + host + "X-Test : value\r\n\r\n", 400},
      {"obs_fold", "GET / HTTP/1.1\r\n" + host + "X-Test: value\r\n  folded\r\n\r\n", 400},
  };
}

// The checks of one bad request on the running server, on a new connection. Each of the seven runs every request
// in a test of its own, on a new server; each variant runs them all in one test on one server (see
// conformance_test.cpp's CaseChecks for why).
template <typename P>
class BadInputChecks : public ServerFixture<P> {
 protected:
  void expect_error_then_close(const BadRequest& bad) {
    {
      Client c = this->connect();
      ASSERT_TRUE(c.ok()) << c.error();
      ASSERT_TRUE(c.send(bad.bytes, deadline_in(kIoTimeout))) << c.error();
      const auto r = c.read_response(deadline_in(kIoTimeout));
      ASSERT_TRUE(r) << c.error();
      EXPECT_EQ(r->status, bad.status) << r->head_text();
      EXPECT_EQ(r->version, "HTTP/1.1") << r->status_line;
      EXPECT_EQ(r->header_count("Connection"), 1) << r->head_text();
      EXPECT_EQ(lower(r->header("Connection").value_or("")), "close") << r->head_text();
      if (bad.status == 405) {
        EXPECT_EQ(r->header("Allow").value_or("(none)"), "GET, HEAD, POST") << r->head_text();
      }
      // Content-Length matches the body: with a shorter one the rest of the body would arrive here as stray bytes,
      // with a longer one read_response() would have hit the close first. The close must come well before the idle
      // timeout (5 s) would do it.
      const auto closed = c.wait_closed(deadline_in(3s));
      EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
          << "after the error response the connection was " << Client::describe(closed) << ": "
          << Client::preview(c.buffered());
    }
    EXPECT_TRUE(this->serves_new_client());
  }
};

class BadInput : public BadInputChecks<std::tuple<ServerInfo, BadRequest>> {};

TEST_P(BadInput, AnsweredWithErrorThenClosed) {
  if (!launch({"--delay-us", "0"})) return;
  expect_error_then_close(std::get<1>(GetParam()));
}

std::string bad_input_name(const ::testing::TestParamInfo<std::tuple<ServerInfo, BadRequest>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(AllServers, BadInput,
                         ::testing::Combine(::testing::ValuesIn(without_variants(all_servers())),
                                            ::testing::ValuesIn(bad_requests())),
                         bad_input_name);

class BadInputAllCases : public BadInputChecks<ServerInfo> {};

TEST_P(BadInputAllCases, EachAnsweredWithErrorThenClosed) {
  if (!launch({"--delay-us", "0"})) return;
  for (const BadRequest& bad : bad_requests()) {
    SCOPED_TRACE(bad.name);
    expect_error_then_close(bad);
    ASSERT_TRUE(server_->running()) << "the server died; stderr: " << server_->err();
  }
}

// Empty when tests/grade.sh grades a server that this rule is not for.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BadInputAllCases);
INSTANTIATE_TEST_SUITE_P(Variants, BadInputAllCases, ::testing::ValuesIn(only_variants(all_servers())), ServerName());

}  // namespace
}  // namespace psp::test
