// Robustness by general rules, for tests/grade.sh --profile static: what any HTTP server owes its other clients,
// whatever its exact answers. A malformed request gets an error status or a close, never a hang or a success; a request split
// across reads is answered; a client that dribbles a request forever is cut off; a reset costs nothing.
//
// These run only on a server graded in the static profile. This repository's servers meet the same rules in their
// stricter, course-profile forms (BadInput.*, Http.RequestSentOneByteAtATime, Slowloris.*, RequestDeadline.*,
// Resets.*), which name the exact status and use their flags (--idle-timeout) to stay fast.

#include <gtest/gtest.h>

#include <iomanip>

#include <chrono>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/server_fixture.hpp"
#include "tests/support/static_root.hpp"

namespace psp::test {
namespace {

// The graded server, when it is graded as a general (static-file) server; else none, and the suite is empty.
std::vector<ServerInfo> general_servers() {
  return graded_command() && general_server_rules() ? all_servers() : std::vector<ServerInfo>{};
}

class Robustness : public ServerTest {
 protected:
  std::string get_notes() const { return "GET /notes.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"; }

  // A new client gets /notes.txt whole: the server is still serving.
  ::testing::AssertionResult still_serves() {
    if (!server_->running()) return ::testing::AssertionFailure() << "the server is gone";
    Client c = connect();
    if (!c.ok() || !c.send(get_notes(), deadline_in(kIoTimeout)))
      return ::testing::AssertionFailure() << "a new client afterwards: " << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout));
    if (!r) return ::testing::AssertionFailure() << "a new client afterwards: " << c.error();
    if (r->status != 200 || r->body != static_root().file("/notes.txt").body)
      return ::testing::AssertionFailure() << "a new client afterwards, GET /notes.txt: " << r->status_line
                                           << " with a body of " << r->body.size() << " bytes, want 200 and the file";
    return ::testing::AssertionSuccess();
  }
};

// "N of M failed:" and the first three, then how many more.
std::string first_three(const std::vector<std::string>& failures, std::size_t of) {
  std::string out = std::to_string(failures.size()) + " of " + std::to_string(of) + " failed:";
  for (std::size_t i = 0; i < failures.size() && i < 3; ++i) out += "\n  " + failures[i];
  if (failures.size() > 3) out += "\n  and " + std::to_string(failures.size() - 3) + " more";
  return out;
}

// Requests that RFC 9112 calls invalid, each on a new connection. Any 4xx (RFC 9110 15.5) or a close without an
// answer is right, and so is a 5xx: a server that does not implement POST says 501 before it looks at the body's
// framing (python3 -m http.server), and refuses all the same. A 2xx or 3xx answers something that was never asked,
// and silence is a hang that holds the connection. Each of these MUST or SHOULD get a 400 (the section is named); none is a matter of taste: a version
// the server does not speak (505), a method that is not a token (400, or 501 as for any method a server does not
// know), a line without a colon (which nginx skips, as many servers do) and the like are left to the course profile.
TEST_P(Robustness, MalformedRequestsGetA4xxOrAClose) {
  if (!launch_static()) return;
  const std::string host = "Host: 127.0.0.1\r\n";
  const struct {
    const char* name;
    std::string bytes;
  } cases[] = {
      {"a request line without spaces (RFC 9112 3)", "GARBAGE\r\n\r\n"},
      {"HTTP/1.1 without Host (RFC 9112 3.2: MUST 400)", "GET /notes.txt HTTP/1.1\r\n\r\n"},
      {"two Host fields (RFC 9112 3.2: MUST 400)", "GET /notes.txt HTTP/1.1\r\n" + host + host + "\r\n"},
      {"Content-Length: abc (RFC 9112 6.3: MUST 400)",
       "POST /notes.txt HTTP/1.1\r\n" + host + "Content-Length: abc\r\n\r\n"},
      {"two different Content-Lengths (RFC 9112 6.3: MUST 400)",
       "POST /notes.txt HTTP/1.1\r\n" + host + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
      {"a request line of 100,000 bytes (RFC 9112 3: 414 or 400)",
       "GET /" + std::string(100000, 'a') + " HTTP/1.1\r\n" + host + "\r\n"},
  };
  std::vector<std::string> failures;
  for (const auto& k : cases) {
    Client c = connect();
    if (!c.ok()) {
      failures.push_back(std::string(k.name) + ": " + c.error());
      continue;
    }
    // A server may close before it has read everything (a request line too long): that is a close, not a failure.
    if (!c.send(k.bytes, deadline_in(kIoTimeout)) && !c.closed_by_peer() && c.send_errno() == 0) {
      failures.push_back(std::string(k.name) + ": " + c.error());
      continue;
    }
    const auto r = c.read_response(deadline_in(kIoTimeout));
    if (r && (r->status < 400 || r->status > 599))
      failures.push_back(std::string(k.name) + ": answered " + r->status_line + ", want a 4xx (or 5xx) or a close");
    else if (!r && !c.closed_by_peer() && c.buffered().empty() && c.send_errno() == 0)
      failures.push_back(std::string(k.name) + ": no answer and no close within " +
                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kIoTimeout).count()) +
                         " s (a hang)");
  }
  EXPECT_TRUE(failures.empty()) << first_three(failures, std::size(cases));
  EXPECT_TRUE(still_serves());
}

// TCP is a stream (RFC 9112 2.1): a request may arrive in any pieces, a server reads until the head is whole. One
// read per request answers a benchmark and fails a real client on a slow link. The pieces here leave 50 ms between
// them, with Nagle off, so that each is its own segment, and the cut falls inside the CRLF CRLF that ends the head.
TEST_P(Robustness, RequestSplitAcrossReadsIsAnswered) {
  if (!launch_static()) return;
  Client c = connect({/*nodelay=*/true});
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string request = get_notes();
  const std::size_t cuts[] = {2, 9, 20, request.size() - 3, request.size() - 1};
  std::size_t at = 0;
  for (std::size_t cut : cuts) {
    ASSERT_TRUE(c.send(std::string_view(request).substr(at, cut - at), deadline_in(kIoTimeout))) << c.error();
    at = cut;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(c.send(std::string_view(request).substr(at), deadline_in(kIoTimeout))) << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << "GET /notes.txt sent in six pieces, 50 ms apart: " << c.error();
  EXPECT_EQ(r->status, 200) << r->head_text();
  EXPECT_EQ(r->body, static_root().file("/notes.txt").body) << "the body differs from the file";
}

// A client that sends its request head a line at a time and never ends it holds what the server gave it (a thread,
// a buffer, a slot) for as long as the server lets it. However generous the limit, there must be one: the
// connection is closed, or answered (408, 431), within kSlowlorisBound. (nginx's default is 60 s; tests/grader/
// nginx.sh sets 10 s, and this repository's servers 5 s, their --idle-timeout.)
// The bound is a rubric choice (rubric.ini [choices] slowloris_seconds): RFC 9112 9.5 sets no number.
std::chrono::seconds slowloris_bound() {
  const int seconds = std::atoi(grade_choice("slowloris_seconds", "15").c_str());
  return std::chrono::seconds(seconds > 0 ? seconds : 15);
}

TEST_P(Robustness, SlowlorisIsCutOff) {
  if (!launch_static()) return;
  const auto kSlowlorisBound = slowloris_bound();
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send("GET /notes.txt HTTP/1.1\r\nHost: 127.0.0.1\r\n", deadline_in(kIoTimeout))) << c.error();
  const auto start = Clock::now();
  for (int line = 0; Clock::now() - start < kSlowlorisBound; ++line) {
    // A line every 500 ms: the head grows by about 1 KB in the bound, far below any limit on its size.
    const auto end = c.wait_closed(deadline_in(std::chrono::milliseconds(500)));
    if (end == Client::Closed::data) {
      // Bytes before the head ended: only an error status (408, 431, 400...) answers an unfinished head. A 200 (or
      // anything that is not HTTP) after the first read answers a request that was never made.
      const long at = ms_since(start);
      c.read_until_closed(deadline_in(std::chrono::seconds(1)));
      const std::string& got = c.buffered();
      const bool error_status = got.size() >= 12 && got.compare(0, 7, "HTTP/1.") == 0 && (got[9] == '4' || got[9] == '5');
      if (error_status) {
        SUCCEED() << "refused after " << at << " ms";
        return;
      }
      ADD_FAILURE() << "sent the request line and Host, then one header line every 500 ms, never the empty line "
                    << "that ends the head: after " << at << " ms the server answered anyway: "
                    << Client::preview(got.substr(0, 80)) << ". A response is owed to a whole request only "
                    << "(RFC 9112 2.2, 9.5): cut a dribbler off with a close, or a 408 or 431 and a close";
      return;
    }
    if (end != Client::Closed::timeout) {
      SUCCEED() << "cut off after " << ms_since(start) << " ms";
      return;
    }
    if (!c.send("X-Dribble-" + std::to_string(line) + ": x\r\n", deadline_in(kIoTimeout)))
      return;  // the server closed (or reset) the connection as the line left: cut off
  }
  ADD_FAILURE() << "a client that sent one header line every 500 ms, and never the empty line that ends the head, "
                << "was still connected after " << std::fixed << std::setprecision(1) << ms_since(start) / 1000.0
                << " s, the grader's limit of " << kSlowlorisBound.count() << " s (a rubric choice: RFC 9112 9.5 "
                << "sets no number; nginx's default is 60 s): bound the time a request head may take, from its first "
                << "byte, not an idle timeout that each line starts again";
}

// A client may vanish at any moment, with a reset (SO_LINGER 0) rather than a close: before sending, in the middle
// of the head, after the request, in the middle of a large response. Each costs the server one connection, never
// its other clients: it keeps serving, and does not die of SIGPIPE.
TEST_P(Robustness, ResetsCostNothing) {
  if (!launch_static()) return;
  std::vector<std::string> failures;
  int rounds_failed = 0;
  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    const std::size_t before = failures.size();
    const std::pair<const char*, std::string> stages[] = {
        {"after connecting", ""},
        {"in the middle of the head", "GET /notes.txt HTTP/1.1\r\nHo"},
        {"after the request", get_notes()},
        {"in the middle of a 50 MiB response", "GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"},
    };
    for (const auto& [when, bytes] : stages) {
      Client c = connect();
      if (!c.ok() || (!bytes.empty() && !c.send(bytes, deadline_in(kIoTimeout)))) {
        failures.push_back(std::string("round ") + std::to_string(round) + ", reset " + when + ": " + c.error());
        continue;
      }
      if (std::string_view(when).find("50 MiB") != std::string_view::npos) {
        // Wait for the first bytes of the response, so that the reset comes while the server is sending.
        c.wait_closed(deadline_in(kIoTimeout));
      }
      c.reset();
    }
    if (const auto served = still_serves(); !served)
      failures.push_back("round " + std::to_string(round) + ": " + served.message());
    rounds_failed += failures.size() > before ? 1 : 0;
  }
  // Counted in rounds (each: four resets, then a plain request), the unit that ran 3 times.
  std::string list;
  for (std::size_t i = 0; i < failures.size() && i < 3; ++i) list += "\n  " + failures[i];
  if (failures.size() > 3) list += "\n  and " + std::to_string(failures.size() - 3) + " more";
  EXPECT_TRUE(failures.empty()) << rounds_failed << " of " << kRounds << " rounds failed (each: a reset after "
                                << "connecting, in the head, after the request, in a 50 MiB response, then a plain "
                                << "GET):" << list;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Robustness);
INSTANTIATE_TEST_SUITE_P(GeneralServers, Robustness, ::testing::ValuesIn(general_servers()), ServerName());

}  // namespace
}  // namespace psp::test
