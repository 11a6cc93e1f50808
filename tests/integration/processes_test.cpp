// --processes P on the event loops (05, 06, 07; common/workers.hpp): P worker processes on listeners made before
// the fork. A worker that dies is replaced and the port keeps answering; SIGTERM stops them all within the grace
// and the server exits 0; a bad value exits 2 with the usage.

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/server_fixture.hpp"

namespace psp::test {
namespace {

constexpr auto kStopGrace = 2s;  // the servers' grace for responses in flight (common/lifecycle.hpp)

// The live (not zombie) children of `pid`: its worker processes. Read from every /proc/N/stat, which names the
// parent, since /proc/PID/task/TID/children may be missing from the kernel.
std::vector<pid_t> workers_of(pid_t pid) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    const pid_t candidate = static_cast<pid_t>(std::atoi(e->d_name));
    if (candidate <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(candidate) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const std::size_t paren = line.rfind(')');  // the name may hold spaces: the fields follow its last ')'
    char state = 0;
    int parent = 0;
    if (paren != std::string::npos && std::sscanf(line.c_str() + paren + 1, " %c %d", &state, &parent) == 2 &&
        parent == pid && state != 'Z')
      out.push_back(candidate);
  }
  ::closedir(proc);
  std::sort(out.begin(), out.end());
  return out;
}

// True when every worker runs more than one thread. A worker starts its loop threads only after it has told the
// parent that it started: kill one before that, and the parent rightly takes it for a start-up error.
bool all_started(const std::vector<pid_t>& workers) {
  for (const pid_t worker : workers) {
    std::ifstream status("/proc/" + std::to_string(worker) + "/status");
    long threads = 0;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Threads:", 0) == 0) threads = std::atol(line.c_str() + 8);
    if (threads < 2) return false;
  }
  return true;
}

class Processes : public ServerTest {
 protected:
  // Starts the server with --processes `count` and waits until it has `count` started workers and serves a new
  // client.
  bool launch_workers(int count, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--processes", std::to_string(count), "--delay-us", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (!launch(args)) return false;
    const auto deadline = deadline_in(kStartTimeout);
    while ((workers_of(server_->pid()).size() != static_cast<std::size_t>(count) ||
            !all_started(workers_of(server_->pid()))) &&
           server_->running() && Clock::now() < deadline)
      std::this_thread::sleep_for(10ms);  // polling interval
    if (!server_->running()) {
      // With P > 1 "listening on" comes first: a kernel that refuses 06 shows as a worker's start-up error.
      const ExitStatus status = server_->wait_exit(deadline_in(1s));
      const std::string refusal = kernel_refusal(server_info(), status, server_->err());
      if (!refusal.empty()) {
        [&] { GTEST_SKIP() << refusal; }();
        return false;
      }
      ADD_FAILURE() << "the server ended: " << status.describe() << "; stderr: " << server_->err();
      return false;
    }
    EXPECT_EQ(workers_of(server_->pid()).size(), static_cast<std::size_t>(count));
    EXPECT_TRUE(all_started(workers_of(server_->pid())));
    EXPECT_TRUE(serves_new_client());
    return !HasFailure();
  }
};

TEST_P(Processes, KilledWorkerIsReplacedAndThePortKeepsAnswering) {
  if (!has_course_command_line() || !launch_workers(2, {"--threads", "1"})) return;
  const std::vector<pid_t> before = workers_of(server_->pid());
  ASSERT_EQ(::kill(before.front(), SIGKILL), 0);
  const auto deadline = deadline_in(kStartTimeout);
  std::vector<pid_t> after = workers_of(server_->pid());
  while (std::count(after.begin(), after.end(), before.front()) != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);  // polling interval
    after = workers_of(server_->pid());
  }

  // Dead, and not replaced yet (a new one comes after a 100 ms backoff): the connections the kernel gives the dead
  // worker's listener wait in its queue meanwhile, so every client is answered. Not checked on 06: its accept
  // waits inside the kernel, and the dead worker's ring is torn down after its exit, so for a moment a pending
  // accept there may still take a connection, which the teardown then resets.
  if (server_info().number != 6) {
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(serves_new_client()) << "client " << i << " before the replacement";
  }
  while ((after.size() != 2 || std::count(after.begin(), after.end(), before.front()) != 0) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);  // polling interval
    after = workers_of(server_->pid());
  }
  ASSERT_EQ(after.size(), 2u) << "stderr: " << server_->err();
  EXPECT_EQ(std::count(after.begin(), after.end(), before.front()), 0);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(serves_new_client()) << "client " << i << " after the replacement";
  EXPECT_NE(server_->err().find("ended unexpectedly"), std::string::npos) << server_->err();

  const ExitStatus status = server_->stop(SIGTERM, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
}

TEST_P(Processes, SigtermStopsEveryWorkerWithinTheGrace) {
  SKIP_SIGNAL_TIMING_UNDER_TSAN();
  if (!has_course_command_line() || !launch_workers(3, {"--threads", "2"})) return;
  Client idle = connect();  // an idle keep-alive connection must not hold the stop back
  ASSERT_TRUE(idle.ok() && idle.send(request(), deadline_in(kIoTimeout)) && idle.read_response(deadline_in(kIoTimeout)))
      << idle.error();
  const std::vector<pid_t> workers = workers_of(server_->pid());

  const auto start = Clock::now();
  const ExitStatus status = server_->stop(SIGTERM, deadline_in(kExitBound));
  EXPECT_TRUE(status.exited_with(0)) << status.describe() << "; stderr: " << server_->err();
  EXPECT_LT(Clock::now() - start, kStopGrace + 1s) << "took " << ms_since(start) << " ms";
  for (const pid_t worker : workers)  // reaped by the parent before it exited: gone
    EXPECT_NE(::kill(worker, 0), 0) << "worker " << worker << " is still running";
}

TEST_P(Processes, BadValueExitsTwoWithUsage) {
  if (!has_course_command_line()) return;
  for (const char* bad : {"0", "abc", "-1", "1025"}) {
    const ExitStatus status = run_to_exit({"--processes", bad});
    EXPECT_TRUE(status.exited_with(2)) << "--processes " << bad << ": " << status.describe();
    EXPECT_NE(server_->err().find("usage:"), std::string::npos) << "--processes " << bad << ": " << server_->err();
  }
}

INSTANTIATE_TEST_SUITE_P(EventLoops, Processes, ::testing::ValuesIn(without_variants(servers({5, 6, 7}))),
                         ServerName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Processes);

}  // namespace
}  // namespace psp::test
