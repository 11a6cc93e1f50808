// Peers that misbehave: reset mid-response, vanish before the response, half-close, or go silent. The server
// must survive each, keep serving, and release every descriptor the peer used.

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

// Out of descriptors, the EMFILE policy spends its spare descriptor to shed a client (common/net.hpp), and must get
// it back. At the limit another thread's accept (or the kernel's, for an accept io_uring has in flight) can take the
// number the spare has just freed; a server that then never reopens it ends one descriptor below its baseline, and
// the next time it runs out it can shed nobody: clients over the limit wait, neither served nor closed.
//
// Round 1 fills the server with a burst of clients, far more than fit (so that several threads shed at once), then
// lets them all go, three times: the descriptors must come back to the baseline, the spare among them. Round 2 fills
// it again one client at a time: each is answered and kept, or shed (closed, reset or 503), within kShedBound, and
// after the first shed two more are. (01 holds one connection at a time: it never runs out.)
class SpareDescriptor : public ServerTest {
 protected:
  static constexpr rlim_t kLimit = 64;
  static constexpr auto kShedBound = 1500ms;  // a shed takes one loop turn, or 07's accept backoff (100 ms at most)

  // Descriptors that are not sockets: the spare (/dev/null), pipes, epoll, eventfd, timerfd, rings. The server
  // opens none of them per connection, so their number is exact at any moment, while a count of all descriptors
  // may still include a connection the server is about to close (baseline_fds() itself may count the last
  // warm-up's: 11 for an s07_single whose idle count is 10).
  int non_socket_fds() {
    std::istringstream fds(describe_fds(server_->pid()));
    int count = 0;
    // "?": closed between the listing and its readlink(), a connection's socket
    for (std::string line; std::getline(fds, line);)
      if (line.find("-> socket:") == std::string::npos && line.find("-> ?") == std::string::npos) ++count;
    return count;
  }

  // Polls until as many descriptors that are not sockets are open as `want`; returns the last count seen.
  int wait_non_socket_fds(int want, Deadline deadline) {
    for (;;) {
      const int n = non_socket_fds();
      if (n == want || Clock::now() >= deadline) return n;
      std::this_thread::sleep_for(milliseconds(5));  // polling interval, not a synchronisation guess
    }
  }

  // Once the clients are gone, the server closes their connections, serves a new one, and is back at its baseline:
  // no more descriptors than then, and exactly as many that are not sockets, the spare among them.
  void expect_back_to_baseline(int baseline, int non_sockets, const std::string& when) {
    SCOPED_TRACE(when);
    wait_fd_count_at_most(server_->pid(), baseline, deadline_in(kIoTimeout));
    // Connections of the burst may still wait in the listen queues, their clients gone: taking them can bring the
    // server back to its limit for a moment, and a new client is then shed, as it should be. So try again.
    ::testing::AssertionResult served = serves_new_client();
    for (const auto until = deadline_in(kIoTimeout); !served && server_->running() && Clock::now() < until;)
      served = serves_new_client();
    EXPECT_TRUE(served);
    const int now = wait_fd_count_at_most(server_->pid(), baseline, deadline_in(kIoTimeout));
    EXPECT_LE(now, baseline) << "descriptors open now:\n" << describe_fds(server_->pid());
    const int now_non_sockets = wait_non_socket_fds(non_sockets, deadline_in(kIoTimeout));
    EXPECT_EQ(now_non_sockets, non_sockets)
        << (now_non_sockets == non_sockets - 1 ? "one below: the spare descriptor (/dev/null) was lost; " : "")
        << "descriptors open now:\n" << describe_fds(server_->pid());
  }
};

TEST_P(SpareDescriptor, ComesBackAfterRunningOut) {
  // A long idle timeout, so that the server closes nothing on its own. The event loops get 8 threads, more than the
  // cores: one preempted with the spare freed leaves the others time to take its number. (Before the fix, with the
  // bursts below, 05 and 07 lost the spare in 10 runs of 10; with 2 loops and one thread connecting, 05 in 1 of 10.)
  // 04 gets a worker for every connection it can hold, so that each one it accepts is answered at once rather than
  // queued (a queued client would look pending).
  const std::vector<std::string>& own = server_info().args;
  if (std::find(own.begin(), own.end(), "--fixed-files") != own.end())
    GTEST_SKIP() << "--fixed-files: connections take entries in the rings' tables, not descriptors, so the "
                    "descriptor table never fills, and a shed always gets its spare back";
  std::vector<std::string> args = {"--delay-us", "0", "--idle-timeout", "60"};
  if (server_info().number >= 5 && std::find(own.begin(), own.end(), "single") == own.end())
    args.insert(args.end(), {"--threads", "8"});
  if (server_info().number == 4) args.insert(args.end(), {"--threads", "100"});
  if (!launch(args, {kLimit})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0) << "no descriptor baseline for /proc/" << server_->pid() << "/fd";
  const int non_sockets = non_socket_fds();

  for (int burst_number = 1; burst_number <= 3; ++burst_number) {  // each burst is a new chance for the race
    // 4 threads connect 100 clients each (and send a request on each), so that connections reach several listeners
    // at once and several of the server's threads shed at the same moment.
    std::vector<std::vector<Client>> parts(4);
    std::vector<std::thread> senders;
    for (std::vector<Client>& part : parts) {
      senders.emplace_back([this, &part] {
        for (int i = 0; i < 100; ++i) {
          part.push_back(connect());  // completes in the kernel's backlog whether the server accepts it or not
          if (part.back().ok()) part.back().send(request("GET", "/burst"), deadline_in(kIoTimeout));
        }
      });
    }
    for (std::thread& t : senders) t.join();
    std::vector<Client> burst;
    for (std::vector<Client>& part : parts) {
      for (Client& c : part) {  // a send may fail on a client shed already: that is the policy at work
        ASSERT_TRUE(c.ok() || is_reset_errno(c.send_errno())) << c.error();
        burst.push_back(std::move(c));
      }
    }
    // The sheds that race come first; 07 then backs off, up to 100 ms a shed, so the rest are not waited for.
    collect_responses(burst, deadline_in(1s), {/*close_when_done=*/false, 500ms});
    burst.clear();
    expect_back_to_baseline(baseline, non_sockets, "after burst " + std::to_string(burst_number));
  }

  std::vector<Client> held;
  int shed_in_a_row = 0;
  for (int i = 0; shed_in_a_row < 3 && i < 2 * static_cast<int>(kLimit); ++i) {
    Client c = connect();
    ASSERT_TRUE(c.ok()) << "client " << i << ": " << c.error();
    const auto asked = Clock::now();
    const bool sent = c.send(request("GET", "/fill/" + std::to_string(i)), deadline_in(kIoTimeout));
    ASSERT_TRUE(sent || is_reset_errno(c.send_errno())) << "client " << i << ": " << c.error();
    const std::optional<HttpResponse> r = sent ? c.read_response(deadline_in(kShedBound)) : std::nullopt;
    if (r && r->status == 200) {
      EXPECT_TRUE(is_ok_response(*r, false, "keep-alive")) << "client " << i;
      held.push_back(std::move(c));
      shed_in_a_row = 0;
      continue;
    }
    ASSERT_TRUE(r ? r->status == 503 : !sent || c.closed_by_peer())
        << "client " << i << ", with " << held.size() << " held, was neither served nor shed in " << ms_since(asked)
        << " ms: " << (r ? r->head_text() : c.error()) << "\nthe server's descriptors:\n"
        << describe_fds(server_->pid());
    ++shed_in_a_row;
    // The next client only once this shed is over (its spare open again), so that it cannot take the spare's number
    // in between: that race is the bursts' business. Here it would cost the round its spare until a client leaves.
    const int now_non_sockets = wait_non_socket_fds(non_sockets, deadline_in(kShedBound));
    ASSERT_EQ(now_non_sockets, non_sockets) << "the spare did not come back after client " << i << " was shed:\n"
                                            << describe_fds(server_->pid());
  }
  EXPECT_EQ(shed_in_a_row, 3) << held.size() << " clients held, and the server never ran out of descriptors";
  held.clear();
  expect_back_to_baseline(baseline, non_sockets, "after round 2");
}

INSTANTIATE_TEST_SUITE_P(Servers02To07, SpareDescriptor, ::testing::ValuesIn(servers({2, 3, 4, 5, 6, 7})),
                         ServerName());

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

// An idle server sleeps. With ten keep-alive connections open (01: one, all it serves at once) and nothing to do, it waits in the kernel and uses
// next to no CPU; a loop that polls with a zero timeout, or that keeps being told about a socket it does not read,
// uses a whole core. (Counted for the process the command started: its threads, not its child processes.)
//
// What is measured is the server at rest, whatever it answered: a response that is not valid HTTP is the wire
// checks' business (one root cause, one failure), so any answer, or a close, lets the measurement go on. Only a
// connection that got nothing at all stops it, with that reason: the server is then still busy with it, or
// serves one connection at a time, and is not at rest.
TEST_P(IdleTimeout, NoCpuWhileIdle) {
  if (!launch({"--delay-us", "0"})) return;
  const int count = server_info().number == 1 ? 1 : 10;
  std::vector<Client> clients;
  for (int i = 0; i < count; ++i) {
    clients.push_back(connect());
    ASSERT_TRUE(clients.back().ok()) << "connection " << i + 1 << ": " << clients.back().error();
    ASSERT_TRUE(clients.back().send(request("GET", "/"), deadline_in(kIoTimeout)))
        << "connection " << i + 1 << ": " << clients.back().error();
  }
  const Deadline answered = deadline_in(kIoTimeout);
  for (int i = 0; i < count; ++i) {
    Client& c = clients[static_cast<std::size_t>(i)];
    if (!c.read_response(answered) && c.buffered().empty() && !c.closed_by_peer())
      FAIL() << "connection " << i + 1 << " of " << count << " got no answer to GET / within "
             << std::chrono::duration_cast<std::chrono::seconds>(kIoTimeout).count()
             << " s, so the server could not be measured at rest with its connections open";
  }
  const long before = cpu_ticks(server_->pid());
  const auto start = Clock::now();
  std::this_thread::sleep_for(2s);
  const long ticks = cpu_ticks(server_->pid()) - before;
  const double share = static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK)) /
                       std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_GE(before, 0) << "cannot read /proc/" << server_->pid() << "/stat";
  EXPECT_LT(share, 0.2) << "while idle with keep-alive connections open the server used "
                        << static_cast<int>(share * 100) << " % of a CPU";
}

INSTANTIATE_TEST_SUITE_P(AllServers, IdleTimeout, ::testing::ValuesIn(all_servers()), ServerName());

}  // namespace
}  // namespace psp::test
