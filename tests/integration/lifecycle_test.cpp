// Start and stop: signals, a busy port, bad flags, --help, and --threads where it does not apply.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "tests/support/proc.hpp"
#include "tests/support/server_fixture.hpp"

namespace psp::test {
namespace {

class Lifecycle : public ServerTest {};

TEST_P(Lifecycle, SigtermExitsZero) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!launch({"--delay-us", "0"})) return;
  ASSERT_TRUE(serves_new_client());
  const ExitStatus status = server_->stop(SIGTERM, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
}

TEST_P(Lifecycle, SigintExitsZero) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!launch({"--delay-us", "0"})) return;
  ASSERT_TRUE(serves_new_client());
  const ExitStatus status = server_->stop(SIGINT, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
}

// An idle keep-alive connection has no response in flight: it must not hold the exit back (until the idle
// timeout, say, or forever in a thread blocked in read()).
TEST_P(Lifecycle, SigtermWithIdleKeepAliveConnectionExitsZero) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!launch({"--delay-us", "0"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/"), deadline_in(kIoTimeout))) << c.error();
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
  const auto start = Clock::now();
  const ExitStatus status = server_->stop(SIGTERM, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << " " << ms_since(start)
                                     << " ms after SIGTERM; stderr: " << server_->err();
}

// SIGTERM while a 300 ms request is being handled: that response is still delivered in full, then exit 0.
TEST_P(Lifecycle, SigtermFinishesResponseInFlight) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!launch({"--delay-us", "300000"})) return;
  Client c = connect();
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/in-flight"), deadline_in(kIoTimeout))) << c.error();
  // "In flight" made certain rather than guessed: the server's kernel has acknowledged every byte (our send queue
  // is empty) and the server has read them all (its socket's receive queue in /proc/net/tcp is empty).
  const std::uint16_t client_port = c.local_port();
  const auto read_deadline = deadline_in(kIoTimeout);
  bool request_read = false;
  while (!request_read && Clock::now() < read_deadline) {
    int unacked = -1;
    ::ioctl(c.fd(), SIOCOUTQ, &unacked);
    const auto unread = tcp_unread_bytes(server_->port(), client_port);
    request_read = unacked == 0 && unread && *unread == 0;
    if (!request_read) std::this_thread::sleep_for(1ms);  // polling interval
  }
  ASSERT_TRUE(request_read) << "the server did not read the request";
  const auto start = Clock::now();
  server_->send_signal(SIGTERM);
  const auto r = c.read_response(deadline_in(kExitBound));
  ASSERT_TRUE(r) << c.error() << "; " << server_->wait_exit(deadline_in(1s)).describe()
                 << "; stderr: " << server_->err();
  const std::string connection = lower(r->header("Connection").value_or(""));
  EXPECT_TRUE(is_ok_response(*r, false, connection == "close" ? "close" : "keep-alive"));
  const ExitStatus status = server_->wait_exit(start + kExitBound);
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << " " << ms_since(start)
                                     << " ms after SIGTERM; stderr: " << server_->err();
}

TEST_P(Lifecycle, BusyPortExitsOne) {
  if (!has_course_command_line()) return;
  Fd holder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(holder.valid()) << errno_text(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << errno_text(errno);
  ASSERT_EQ(::listen(holder.get(), 16), 0) << errno_text(errno);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(holder.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  const ExitStatus status = run_to_exit({"--port", port, "--delay-us", "0"});
  const std::string err = server_->err();
  if (const std::string refusal = kernel_refusal(server_info(), status, err);
      !refusal.empty() && err.find(port) == std::string::npos)
    GTEST_SKIP() << refusal;
  EXPECT_TRUE(status.exited_with(1)) << status.describe() << "; stderr: " << err;
  EXPECT_NE(err.find(port), std::string::npos) << "stderr does not name port " << port << ": " << err;
  EXPECT_EQ(server_->out().find("listening"), std::string::npos) << server_->out();
}

TEST_P(Lifecycle, BadFlagsExitTwoWithUsage) {
  if (!has_course_command_line()) return;
  const std::vector<std::vector<std::string>> cases = {
      {"--port", "0", "--bogus"},
      {"--port", "abc"},
      {"--port", "0", "--delay-us", "-1"},
      {"--port", "0", "--handler", "nope"},
  };
  for (const auto& args : cases) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    SCOPED_TRACE(line);
    const ExitStatus status = run_to_exit(args);
    EXPECT_TRUE(status.exited_with(2)) << status.describe() << "; stderr: " << server_->err();
    EXPECT_TRUE(contains_ci(server_->err(), "usage")) << "no usage on stderr: " << server_->err();
    EXPECT_EQ(server_->out().find("listening"), std::string::npos) << server_->out();
  }
}

TEST_P(Lifecycle, HelpPrintsUsageAndExitsZero) {
  if (!has_course_command_line()) return;
  const ExitStatus status = run_to_exit({"--help"});
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
  EXPECT_TRUE(contains_ci(server_->out(), "usage")) << "no usage on stdout: " << server_->out();
}

INSTANTIATE_TEST_SUITE_P(AllServers, Lifecycle, ::testing::ValuesIn(all_servers()), ServerName());

// 01 and 02 have no pool and 03 is one thread by design: --threads does not apply, and saying so beats ignoring it.
class NoThreadsFlag : public ServerTest {};

TEST_P(NoThreadsFlag, ThreadsFlagIsRefused) {
  if (!has_course_command_line()) return;
  const ExitStatus status = run_to_exit({"--port", "0", "--threads", "2"});
  EXPECT_TRUE(status.exited_with(2)) << status.describe() << "; stderr: " << server_->err();
  EXPECT_TRUE(contains_ci(server_->err(), "threads")) << "stderr does not say why: " << server_->err();
  EXPECT_EQ(server_->out().find("listening"), std::string::npos) << server_->out();
}

// Empty when tests/grade.sh grades a server that this rule is not for.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NoThreadsFlag);
INSTANTIATE_TEST_SUITE_P(Servers01To03, NoThreadsFlag, ::testing::ValuesIn(servers({1, 2, 3})), ServerName());

}  // namespace
}  // namespace psp::test
