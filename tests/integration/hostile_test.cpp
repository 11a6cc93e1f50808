// Hostile and broken clients against every server: slowloris dribblers, clients that pipeline and never read,
// resets at every stage of a request, half-closed connections, SIGTERM in the middle of a keep-alive load, and the
// request deadline (a request head must arrive within --idle-timeout; a slow reader is not cut off).
//
// The properties: the server keeps serving everyone else (promptly where the model allows it), its memory and
// descriptors stay bounded and come back to their baseline, and it never sends a truncated response. Time bounds
// appear only where the property is about time, and are generous; every wait is a poll() with a deadline.

#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <signal.h>
#include <sys/ioctl.h>

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/proc.hpp"
#include "tests/support/server_fixture.hpp"
#include "tests/support/static_root.hpp"

namespace psp::test {
namespace {

class Hostile : public ServerTest {
 protected:
  void expect_fds_back_to(int baseline) {
    const int now = wait_fd_count_at_most(server_->pid(), baseline, deadline_in(kIoTimeout));
    EXPECT_LE(now, baseline) << "descriptors did not come back to the baseline of " << baseline << "; open now:\n"
                             << describe_fds(server_->pid());
  }

  // One client that sends a request and times the complete 200.
  ::testing::AssertionResult served_within(Clock::duration limit, long long& elapsed_ms) {
    const auto start = Clock::now();
    Client c = connect();
    if (!c.ok()) return ::testing::AssertionFailure() << "normal client: " << c.error();
    if (!c.send(request("GET", "/normal", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)))
      return ::testing::AssertionFailure() << "normal client: " << c.error();
    const auto r = c.read_response(start + limit);
    elapsed_ms = ms_since(start);
    if (!r) return ::testing::AssertionFailure() << "normal client after " << elapsed_ms << " ms: " << c.error();
    return is_ok_response(*r, false, "close");
  }
};

// Bytes the server's kernel has acknowledged and the server has read: our send queue is empty and its socket's
// receive queue (in /proc/net/tcp) is empty. Polled until `deadline`.
bool server_read_everything(const Client& c, std::uint16_t server_port, Deadline deadline) {
  const std::uint16_t client_port = c.local_port();
  for (;;) {
    int unacked = -1;
    ::ioctl(c.fd(), SIOCOUTQ, &unacked);
    const auto unread = tcp_unread_bytes(server_port, client_port);
    if (unacked == 0 && unread && *unread == 0) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);  // polling interval
  }
}

// Sends what the socket takes now, without waiting; returns the number of bytes sent.
std::size_t send_what_fits(const Client& c, std::string_view bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(c.fd(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  return sent;
}

std::string pipelined(int count, std::string_view path) {
  std::string all;
  for (int i = 0; i < count; ++i) all += request("GET", std::string(path) + std::to_string(i));
  return all;
}

// ---------------------------------------------------------------------------------------------------------------
// (a) Slowloris: clients that send a request head one byte every 100 ms, never finishing it. The request deadline
// (--idle-timeout S: the time a connection has to deliver a whole request head, counted from when the server
// starts waiting for it) closes each of them after S seconds, however often it sends a byte.

// A thread that sends the next byte of an endless head on every client, every 100 ms, until stopped.
class Dribbler {
 public:
  explicit Dribbler(std::vector<Client>& clients) : clients_(clients) {
    thread_ = std::thread([this] { run(); });
  }
  ~Dribbler() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Waits until `n` rounds of bytes have been sent.
  bool wait_rounds(int n, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_until(lock, deadline, [&] { return rounds_ >= n; });
  }

 private:
  void run() {
    const std::string head = "GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    for (std::size_t i = 0;; ++i) {
      const char byte = i < head.size() ? head[i] : 'a';  // the head never ends (and stays far below 8 KiB)
      for (Client& c : clients_) send_what_fits(c, std::string_view(&byte, 1));
      std::unique_lock<std::mutex> lock(mutex_);
      ++rounds_;
      changed_.notify_all();
      // The dribbling pace (the property under test), not a synchronisation guess.
      if (changed_.wait_for(lock, 100ms, [&] { return stopping_; })) return;
    }
  }
  std::vector<Client>& clients_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int rounds_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

class Slowloris : public Hostile {};

// 50 dribblers and a normal client, three times over. 02, 03, 05-07 (a thread per connection, or an event loop)
// answer it at once; one that let a dribbler hold it would make the client wait for the dribbler's request deadline,
// 30 s here, so a bound of 3 s tells the two apart with room for a busy machine and the sanitizers. 04 is a blocking model like 01: its 16 workers each block on a dribbler
// until the request deadline closes it, so the normal client waits for the dribblers queued ahead of it, one
// deadline per round of 16 workers at most: with --idle-timeout 1, ceil(50 / 16) = 4 s, plus a margin. The bound is
// the deadline's work: while every byte restarted the timeout, 04 kept the client waiting as long as the dribbling
// lasted.
TEST_P(Slowloris, FiftyDribblersAndANormalClient) {
  constexpr int kSlow = 50;
  const bool pool = server_info().number == 4;
  constexpr int kWorkers = 16;
  if (!launch(pool ? std::vector<std::string>{"--delay-us", "0", "--idle-timeout", "1", "--threads", "16"}
                   : std::vector<std::string>{"--delay-us", "0", "--idle-timeout", "30"}))
    return;
  const long long limit_ms = pool ? (kSlow + kWorkers - 1) / kWorkers * 1000 + 1500 : 3000;
  std::vector<Client> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(connect({/*nodelay=*/true, 0}));
    ASSERT_TRUE(slow.back().ok()) << "slow client " << i << ": " << slow.back().error();
  }
  Dribbler dribbler(slow);
  ASSERT_TRUE(dribbler.wait_rounds(5, deadline_in(kIoTimeout))) << "the dribbler did not get going";
  for (int i = 0; i < 3; ++i) {
    long long elapsed = 0;
    // A little past the limit: beyond it the test has failed anyway.
    const auto served = served_within(milliseconds(limit_ms + 1500), elapsed);
    EXPECT_TRUE(served) << "normal client " << i << " behind 50 dribblers";
    EXPECT_LT(elapsed, limit_ms) << "normal client " << i << " waited " << elapsed << " ms behind 50 dribblers";
    if (!served || elapsed >= limit_ms) break;
  }
  dribbler.stop();
  // The dribblers were never answered (some may have been closed by their deadline: 04's, after a second).
  for (std::size_t i = 0; i < slow.size(); ++i) {
    slow[i].read_available();
    EXPECT_TRUE(slow[i].buffered().empty()) << "slow client " << i << " got " << Client::preview(slow[i].buffered());
  }
}

INSTANTIATE_TEST_SUITE_P(AllButBlockingSingle, Slowloris, ::testing::ValuesIn(servers({2, 3, 4, 5, 6, 7})),
                         ServerName());

// 01 serves one connection at a time: the damage, and what bounds it. While a dribbler holds the server, a normal
// client waits; but each dribbler is closed at its request deadline, one --idle-timeout after 01 began reading it,
// even though it never stops sending bytes. So the normal client waits at most one deadline per dribbler ahead of
// it. Two dribblers here, not fifty: with 01 each costs a whole deadline in turn.
class SlowlorisBlocking : public Hostile {};

TEST_P(SlowlorisBlocking, EachDribblerHoldsTheServerForOneDeadline) {
  if (!launch({"--delay-us", "0", "--idle-timeout", "1"})) return;
  constexpr int kSlow = 2;
  std::vector<Client> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(connect({/*nodelay=*/true, 0}));
    ASSERT_TRUE(slow.back().ok()) << "slow client " << i << ": " << slow.back().error();
  }
  Dribbler dribbler(slow);
  ASSERT_TRUE(dribbler.wait_rounds(2, deadline_in(kIoTimeout)));
  // The server is serving the first dribbler: it has read every byte sent so far.
  ASSERT_TRUE(server_read_everything(slow[0], server_->port(), deadline_in(kIoTimeout)))
      << "the server did not start reading the first dribbler";

  Client normal = connect();
  ASSERT_TRUE(normal.ok()) << normal.error();
  ASSERT_TRUE(normal.send(request("GET", "/normal", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)))
      << normal.error();
  const auto sent = Clock::now();
  // The dribblers go on dribbling all along: only the deadline can end them.
  const auto r = normal.read_response(deadline_in(kSlow * 1s + 3s));
  const long long waited = ms_since(sent);
  ASSERT_TRUE(r) << normal.error() << " (after " << waited << " ms)";
  EXPECT_TRUE(is_ok_response(*r, false, "close"));
  EXPECT_GE(waited, 500) << "answered before the first dribbler's deadline could have passed";
  EXPECT_LE(waited, kSlow * 1000 + 1500) << "more than one deadline per dribbler";
  for (int i = 0; i < kSlow; ++i) {
    const auto closed = slow[static_cast<std::size_t>(i)].wait_closed(deadline_in(kIoTimeout));
    EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
        << "dribbler " << i << " was " << Client::describe(closed);
  }
}

// Empty when tests/grade.sh grades a server that this rule is not for.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SlowlorisBlocking);
INSTANTIATE_TEST_SUITE_P(Server01, SlowlorisBlocking, ::testing::ValuesIn(servers({1})), ServerName());

// ---------------------------------------------------------------------------------------------------------------
// (b) Clients that pipeline many requests and never read. The responses fill the client's small receive buffer and
// the server's send buffer; the server must then stop reading that connection (it reads more only when it needs
// more), so its memory stays bounded; keep serving others; and close each such connection once it has made no
// progress for the idle timeout (a blocking model's send() gives up through SO_SNDTIMEO).
class NeverReads : public Hostile {};

TEST_P(NeverReads, BoundedMemoryOthersServedAndClosedAfterIdleTimeout) {
  if (!launch({"--delay-us", "0", "--idle-timeout", "1"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  const long rss_before = rss_kib(server_->pid());
  ASSERT_GT(rss_before, 0);
  // 01 times the clients out one after another, each after a few seconds (its client's kernel keeps taking a few
  // hundred bytes now and then, and each restarts SO_SNDTIMEO): one of them is enough to show it.
  const int clients = server_info().number == 1 ? 1 : 20;
  const std::string requests = pipelined(2000, "/never-read/");  // ~2.3 MB of responses per client
  std::vector<Client> stuck;
  for (int i = 0; i < clients; ++i) {
    stuck.push_back(connect({false, /*rcvbuf=*/4096}));
    ASSERT_TRUE(stuck.back().ok()) << stuck.back().error();
    EXPECT_GT(send_what_fits(stuck.back(), requests), 0U) << "client " << i;
  }
  // Every stuck connection is being written to, or waits its turn (01, 04): the server has not stopped serving.
  long long elapsed = 0;
  EXPECT_TRUE(served_within(kIoTimeout, elapsed)) << "while " << clients << " clients never read";
  // No growth without bound: buffering all the responses it was asked for would take ~46 MB. (Sanitizer builds
  // keep freed memory in quarantine and add shadow memory: they get more room.)
  const long rss_during = rss_kib(server_->pid());
  EXPECT_LT(rss_during - rss_before, kSanitized ? 64 * 1024 : 16 * 1024)
      << "RSS grew from " << rss_before << " KiB to " << rss_during << " KiB with " << clients << " clients not reading";
  // Each stuck connection is closed by the server after ~1 s without progress, while our end stays open.
  const int now = wait_fd_count_at_most(server_->pid(), baseline, deadline_in(clients == 1 ? 6s : 5s));
  EXPECT_LE(now, baseline) << "the server still holds connections that made no progress for the idle timeout:\n"
                           << describe_fds(server_->pid());
  EXPECT_TRUE(serves_new_client());
}

INSTANTIATE_TEST_SUITE_P(AllServers, NeverReads, ::testing::ValuesIn(all_servers()), ServerName());

// ---------------------------------------------------------------------------------------------------------------
// (c) Resets (RST, through SO_LINGER 0) at every stage of a request. The server keeps serving, and every
// descriptor the peers used is released.
class Resets : public Hostile {};

TEST_P(Resets, AfterConnectBeforeSending) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  std::vector<Client> clients;
  for (int i = 0; i < 20; ++i) {
    clients.push_back(connect());
    ASSERT_TRUE(clients.back().ok()) << clients.back().error();
  }
  for (Client& c : clients) c.reset();
  EXPECT_TRUE(serves_new_client());
  expect_fds_back_to(baseline);
}

TEST_P(Resets, MidHeader) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  std::vector<Client> clients;
  for (int i = 0; i < 20; ++i) {
    clients.push_back(connect());
    ASSERT_TRUE(clients.back().ok()) << clients.back().error();
    ASSERT_TRUE(clients.back().send("GET /mid-header HTTP/1.1\r\nHost: 127.", deadline_in(kIoTimeout)));
  }
  // The first one at least is being read (01 reads only it; the others wait in its listen queue).
  ASSERT_TRUE(server_read_everything(clients[0], server_->port(), deadline_in(kIoTimeout)));
  for (Client& c : clients) c.reset();
  EXPECT_TRUE(serves_new_client());
  expect_fds_back_to(baseline);
}

// The server has read the whole request and is in its 50 ms handler when the RST arrives; it then writes to a
// reset connection (EPIPE or ECONNRESET), which must cost it nothing but that connection.
TEST_P(Resets, AfterRequestDuringHandler) {
  if (!launch({"--delay-us", "50000"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  for (int round = 0; round < 5; ++round) {
    Client c = connect();
    ASSERT_TRUE(c.ok()) << c.error();
    ASSERT_TRUE(c.send(request("GET", "/in-handler"), deadline_in(kIoTimeout))) << c.error();
    ASSERT_TRUE(server_read_everything(c, server_->port(), deadline_in(kIoTimeout))) << "round " << round;
    c.reset();
  }
  EXPECT_TRUE(serves_new_client());
  expect_fds_back_to(baseline);
}

// Reset after the first bytes of the response arrived: with a 4 KiB receive buffer and 300 pipelined requests the
// server is in the middle of writing when the RST comes.
TEST_P(Resets, MidResponse) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  for (int round = 0; round < 5; ++round) {
    Client c = connect({false, /*rcvbuf=*/4096});
    ASSERT_TRUE(c.ok()) << c.error();
    send_what_fits(c, pipelined(300, "/mid-response/"));
    const auto deadline = deadline_in(kIoTimeout);
    while (c.buffered().size() < 100 && Clock::now() < deadline) {
      pollfd p{c.fd(), POLLIN, 0};
      ::poll(&p, 1, poll_timeout_ms(deadline));
      if (!c.read_available()) break;
    }
    ASSERT_GE(c.buffered().size(), 100U) << "round " << round << ": no response started; " << c.error();
    c.reset();
  }
  EXPECT_TRUE(serves_new_client());
  expect_fds_back_to(baseline);
}

INSTANTIATE_TEST_SUITE_P(AllServers, Resets, ::testing::ValuesIn(all_servers()), ServerName());

// ---------------------------------------------------------------------------------------------------------------
// (d) Half-closed connections: shutdown(SHUT_WR) right after the request. The server sees EOF after the request,
// must still answer it, and then close. (Faults.HalfCloseStillGetsResponses does three pipelined requests on one
// connection; here twenty clients at once, each with one request, in both versions of the protocol, and a
// half-close in the middle of a head.)
class HalfClose : public Hostile {};

TEST_P(HalfClose, TwentyClientsEachGetTheirResponseThenAreClosed) {
  if (!launch({"--delay-us", "1000"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  std::vector<Client> clients;
  for (int i = 0; i < 20; ++i) {
    clients.push_back(connect());
    ASSERT_TRUE(clients.back().ok()) << clients.back().error();
    const std::string version = i % 2 == 0 ? "HTTP/1.1" : "HTTP/1.0";
    ASSERT_TRUE(clients.back().send(request("GET", "/half/" + std::to_string(i), version), deadline_in(kIoTimeout)));
    clients.back().half_close();
  }
  const auto outcomes = collect_responses(clients, deadline_in(kIoTimeout), {/*close_when_done=*/false, {}});
  for (std::size_t i = 0; i < clients.size(); ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    ASSERT_EQ(outcomes[i].kind, Outcome::Kind::response) << outcomes[i].detail;
    EXPECT_TRUE(is_ok_response(outcomes[i].response, false, i % 2 == 0 ? kEitherConnection : "close"));
    const auto closed = clients[i].wait_closed(deadline_in(3s));
    EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
        << "after its response the half-closed connection was " << Client::describe(closed) << " "
        << Client::preview(clients[i].buffered());
  }
  clients.clear();
  EXPECT_TRUE(serves_new_client());
  expect_fds_back_to(baseline);
}

// EOF in the middle of a head: there is no request to answer. The server closes (a 400 first is allowed), at once
// rather than at the 5 s idle timeout.
TEST_P(HalfClose, MidHeaderIsClosedPromptly) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send("GET /half-a-head HTTP/1.1\r\nHost: 12", deadline_in(kIoTimeout))) << c.error();
  c.half_close();
  const auto start = Clock::now();
  auto closed = c.wait_closed(deadline_in(3s));
  if (closed == Client::Closed::data) {
    const auto r = c.read_response(deadline_in(3s));
    ASSERT_TRUE(r) << c.error();
    EXPECT_EQ(r->status, 400) << r->head_text();
    closed = c.wait_closed(deadline_in(3s));
  }
  EXPECT_TRUE(closed == Client::Closed::eof || closed == Client::Closed::reset)
      << "after EOF mid-head the connection was " << Client::describe(closed) << " after " << ms_since(start)
      << " ms " << Client::preview(c.buffered());
  c.close();
  EXPECT_TRUE(serves_new_client());
  expect_fds_back_to(baseline);
}

// Connections that end before their first request: closed at once without a byte (a port scanner, a health
// check, a browser's spare connection), or after an empty line, which RFC 9112 2.2 lets a server ignore before a
// request-line. There is nothing to answer; the server lets them go and carries on.
TEST_P(HalfClose, EndedBeforeARequestAreLetGo) {
  if (!launch({"--delay-us", "0"})) return;
  const int baseline = baseline_fds();
  ASSERT_GT(baseline, 0);
  for (const std::string_view sent : {"", "\r\n", "\r\n\r\n"}) {
    SCOPED_TRACE("sent '" + Client::preview(sent) + "' then closed");
    for (int i = 0; i < 5; ++i) {
      Client c = connect();
      ASSERT_TRUE(c.ok()) << c.error();
      if (!sent.empty()) {
        ASSERT_TRUE(c.send(sent, deadline_in(kIoTimeout))) << c.error();
      }
    }  // closed here, with a FIN
    EXPECT_TRUE(serves_new_client());
  }
  expect_fds_back_to(baseline);
}

INSTANTIATE_TEST_SUITE_P(AllServers, HalfClose, ::testing::ValuesIn(all_servers()), ServerName());

// ---------------------------------------------------------------------------------------------------------------
// Graceful shutdown under load: 50 keep-alive clients, one request at a time each, 2 ms handler. SIGTERM lands
// while requests are in every state: not sent yet, sent but unread, read and in the handler, being written.
//
//   - no client ever sees a truncated response: each request ends in a complete 200, or in a close (EOF or RST)
//     before any byte of its response;
//   - every request the server had read before the signal (our send queue empty, its receive queue empty) is
//     answered in full: it was in flight;
//   - the server exits 0 within 3 s, and every connection is closed.
class ShutdownUnderLoad : public Hostile {};

TEST_P(ShutdownUnderLoad, NoTruncatedResponseAndExitZero) {
  if (!launch({"--delay-us", "2000"})) return;
  constexpr int kClients = 50;
  struct Conn {
    Client c;
    bool outstanding = false;   // a request sent and not answered yet
    bool read_at_signal = false;  // ... which the server had read when SIGTERM was sent
    bool done = false;          // closed, nothing more to expect
  };
  std::vector<Conn> conns(kClients);
  int next_path = 0;
  auto start_request = [&](Conn& k) {
    if (!k.c.is_open() || k.c.closed_by_peer()) {
      k.c = connect();
      if (!k.c.ok()) return false;
    }
    if (!k.c.send(request("GET", "/load/" + std::to_string(next_path++)), deadline_in(kIoTimeout))) return false;
    k.outstanding = true;
    return true;
  };
  for (int i = 0; i < kClients; ++i) {
    Conn& k = conns[static_cast<std::size_t>(i)];
    k.c = connect();
    ASSERT_TRUE(k.c.ok()) << k.c.error();
    ASSERT_TRUE(start_request(k)) << k.c.error();
  }

  int answered = 0, answered_after_signal = 0, closed_before_response = 0;
  bool signalled = false;
  Clock::time_point signal_time;
  std::vector<std::string> failures;
  const auto load_start = Clock::now();
  const auto deadline = deadline_in(10s);
  auto send_sigterm = [&] {
    // Which outstanding requests has the server read? One pass over /proc/net/tcp per connection is a few ms,
    // all before the signal: a request read later only adds to the requests in flight.
    for (Conn& k : conns) {
      if (!k.outstanding || !k.c.is_open()) continue;
      int unacked = -1;
      ::ioctl(k.c.fd(), SIOCOUTQ, &unacked);
      const auto unread = tcp_unread_bytes(server_->port(), k.c.local_port());
      k.read_at_signal = unacked == 0 && unread && *unread == 0;
    }
    signal_time = Clock::now();
    server_->send_signal(SIGTERM);
    signalled = true;
  };

  for (;;) {
    if (!signalled && (answered >= 150 || Clock::now() - load_start > 2s)) send_sigterm();
    std::vector<pollfd> fds;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      if (conns[i].done) continue;
      fds.push_back(pollfd{conns[i].c.fd(), POLLIN, 0});
      index.push_back(i);
    }
    if (fds.empty() || Clock::now() >= deadline) break;
    const int n = ::poll(fds.data(), fds.size(), signalled ? poll_timeout_ms(deadline) : 10);
    if (n < 0 && errno != EINTR) break;
    for (std::size_t j = 0; j < fds.size() && n > 0; ++j) {
      if (fds[j].revents == 0) continue;
      Conn& k = conns[index[j]];
      const std::string who = "client " + std::to_string(index[j]);
      const bool open = k.c.read_available();
      HttpResponse r;
      std::string err;
      const Parse parsed = k.c.take_response(false, r, err);
      if (parsed == Parse::malformed) {
        failures.push_back(who + ": malformed response: " + err);
        k.done = true;
        continue;
      }
      if (parsed == Parse::complete) {
        if (!k.outstanding) failures.push_back(who + ": a response nobody asked for");
        const auto ok = is_ok_response(r, false, kEitherConnection);
        if (!ok) failures.push_back(who + ": " + ok.message());
        ++answered;
        if (signalled) ++answered_after_signal;
        k.outstanding = false;
        k.read_at_signal = false;
        const bool server_closes = lower(r.header("Connection").value_or("")) == "close";
        if (!signalled) {
          if (server_closes) k.c.close();  // 04 closes keep-alive connections when others queue: reconnect
          if (!start_request(k)) {
            failures.push_back(who + ": could not send before the signal: " + k.c.error());
            k.done = true;
          }
        } else if (!open) {
          k.done = true;
        }
        continue;
      }
      if (!open) {  // EOF or RST, and no complete response buffered
        if (!k.c.buffered().empty()) {
          failures.push_back(who + ": truncated response: " + Client::preview(k.c.buffered()));
        } else if (k.outstanding && k.read_at_signal) {
          failures.push_back(who + ": the server had read this request before SIGTERM and closed without answering");
        } else if (k.outstanding) {
          ++closed_before_response;
        }
        if (!signalled) {
          failures.push_back(who + ": closed before the signal: " + k.c.describe_end("during the load"));
        }
        k.done = true;
      }
    }
  }
  ASSERT_TRUE(signalled);
  const ExitStatus status = server_->wait_exit(signal_time + 3s);
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << " " << ms_since(signal_time)
                                     << " ms after SIGTERM; stderr: " << server_->err();
  for (std::size_t i = 0; i < conns.size(); ++i)
    EXPECT_TRUE(conns[i].done) << "client " << i << " was neither answered nor closed after the server exited";
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, the first: " << failures.front();
  EXPECT_GT(answered, 0);
  std::cout << "[          ] " << answered << " responses (" << answered_after_signal << " after SIGTERM), "
            << closed_before_response << " requests closed before any byte of a response\n";
}

INSTANTIATE_TEST_SUITE_P(AllServers, ShutdownUnderLoad, ::testing::ValuesIn(all_servers()), ServerName());

// ---------------------------------------------------------------------------------------------------------------
// (e) The request deadline, in every server. --idle-timeout S is the time a connection has to deliver each whole
// request head, counted from when the server starts waiting for it (after accept, or after the previous
// response); sending a byte now and then does not extend it. Writing keeps its own rule: a reader that takes
// nothing for S seconds is closed, one that keeps reading is not, however long the whole response takes.
class RequestDeadline : public Hostile {};

// One byte every 200 ms, a head that never ends: closed about a second after the wait began, never answered. First
// on a new connection, then on a keep-alive connection after a response (the wait restarts when it is sent).
TEST_P(RequestDeadline, DribblerIsClosedAtTheDeadline) {
  if (!launch({"--delay-us", "0", "--idle-timeout", "1"})) return;
  for (const bool after_response : {false, true}) {
    SCOPED_TRACE(after_response ? "after a response" : "new connection");
    Client c = connect({/*nodelay=*/true, 0});
    ASSERT_TRUE(c.ok()) << c.error();
    if (after_response) {
      ASSERT_TRUE(c.send(request("GET", "/first"), deadline_in(kIoTimeout))) << c.error();
      const auto r = c.read_response(deadline_in(kIoTimeout));
      ASSERT_TRUE(r) << c.error();
      ASSERT_TRUE(is_ok_response(*r, false, "keep-alive"));
    }
    const std::string head = "GET /dribble HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    const auto start = Clock::now();
    Client::Closed end = Client::Closed::timeout;
    for (std::size_t i = 0; end == Client::Closed::timeout && Clock::now() - start < 6s; ++i) {
      const char byte = i < head.size() ? head[i] : 'a';
      send_what_fits(c, std::string_view(&byte, 1));
      end = c.wait_closed(deadline_in(200ms));  // the dribbling pace: the property under test
    }
    const long long elapsed = ms_since(start);
    EXPECT_TRUE(end == Client::Closed::eof || end == Client::Closed::reset)
        << "the dribbler was " << Client::describe(end) << " after " << elapsed << " ms " << Client::preview(c.buffered());
    EXPECT_GE(elapsed, 900) << "closed before the 1 s deadline";
    EXPECT_LE(elapsed, 4000) << "closed long after the 1 s deadline";
  }
  EXPECT_TRUE(serves_new_client());
}

// 50 MiB read 64 KiB at a time every 25 ms for 2.5 s (2.6 MB/s, two and a half times --idle-timeout 1), then at
// full speed: not cut off, and byte-exact. (A server sees a reader's progress only when the kernel calls its socket
// writable again, after the reader has freed a good part of the send buffer: a much slower reader, at tens of KB/s,
// can go a whole --idle-timeout without the server seeing any progress.)
TEST_P(RequestDeadline, SlowReaderOfALargeResponseIsNotCutOff) {
  const StaticRoot& root = static_root();
  ASSERT_EQ(root.error(), "") << "cannot build the folder to serve";
  if (!launch({"--root", root.dir(), "--delay-us", "0", "--idle-timeout", "1"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/big.bin", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)))
      << c.error();
  Download d(std::move(c), false);
  const auto start = Clock::now();
  for (int step = 1; step <= 100 && !d.finished(); ++step) {
    for (std::uint64_t got = 0; got < 64 * 1024 && !d.finished();) {
      pollfd p{d.client().fd(), POLLIN, 0};
      if (::poll(&p, 1, poll_timeout_ms(deadline_in(kIoTimeout))) == 0) break;
      got += d.on_readable(64 * 1024 - got);
    }
    std::this_thread::sleep_for(25ms);  // the slow reader's pace: the property under test
  }
  const long long slow_ms = ms_since(start);
  ASSERT_TRUE(d.finish(deadline_in(30s))) << d.error() << " (" << ms_since(start) << " ms after the request)";
  EXPECT_GE(slow_ms, 2000) << "the slow part was too short to outlive the deadline";
  EXPECT_EQ(d.length(), StaticRoot::kBigSize);
  EXPECT_EQ(d.hash(), root.big_hash()) << "the bytes differ from the file's";
}

INSTANTIATE_TEST_SUITE_P(AllServers, RequestDeadline, ::testing::ValuesIn(all_servers()), ServerName());

}  // namespace
}  // namespace psp::test
