#pragma once
// The seven servers as GoogleTest parameters, and a fixture that starts the server under test.
//
// Every test starts its own server on --port 0 and reads the port from the listening line. Only 06 may skip,
// and only when it exits 1 before listening with a sentence about io_uring (no io_uring on this kernel or in this
// container); the skip message is that sentence.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/server_process.hpp"

#if !defined(PSP_SERVER_01) || !defined(PSP_SERVER_07)
#error "CMake defines PSP_SERVER_01 .. PSP_SERVER_07 as the paths of the server binaries"
#endif

namespace psp::test {

using namespace std::chrono_literals;

// Time allowed for any single exchange with a healthy server. Far more than it needs, even under TSan on a busy
// 2-core machine; reached only when something is broken, so it costs nothing when the suite passes.
constexpr auto kIoTimeout = 5s;
constexpr auto kStartTimeout = 10s;

struct ServerInfo {
  int number;
  const char* name;  // test-name suffix, e.g. s05_epoll
  const char* path;
};

inline void PrintTo(const ServerInfo& s, std::ostream* os) { *os << s.name; }

inline const std::vector<ServerInfo>& all_servers() {
  static const std::vector<ServerInfo> servers = {
      {1, "s01_blocking_single", PSP_SERVER_01}, {2, "s02_thread_per_conn", PSP_SERVER_02},
      {3, "s03_select", PSP_SERVER_03},          {4, "s04_threadpool", PSP_SERVER_04},
      {5, "s05_epoll", PSP_SERVER_05},           {6, "s06_io_uring", PSP_SERVER_06},
      {7, "s07_asio", PSP_SERVER_07},
  };
  return servers;
}

inline std::vector<ServerInfo> servers(std::initializer_list<int> numbers) {
  std::vector<ServerInfo> out;
  for (int n : numbers) out.push_back(all_servers().at(static_cast<std::size_t>(n - 1)));
  return out;
}

// INSTANTIATE_TEST_SUITE_P name generator: s05_epoll.
struct ServerName {
  std::string operator()(const ::testing::TestParamInfo<ServerInfo>& info) const { return info.param.name; }
};

// 06 says, in one sentence on stderr, that io_uring is unavailable, and exits 1 before listening.
inline bool io_uring_unavailable(const ServerInfo& server, const ExitStatus& status, const std::string& err) {
  return server.number == 6 && status.exited_with(1) && contains_ci(err, "io_uring");
}

inline std::string request(std::string_view method = "GET", std::string_view path = "/",
                           std::string_view version = "HTTP/1.1", std::string_view extra_headers = "") {
  std::string r = std::string(method) + " " + std::string(path) + " " + std::string(version) + "\r\n";
  if (version == "HTTP/1.1") r += "Host: 127.0.0.1\r\n";
  return r + std::string(extra_headers) + "\r\n";
}

// The 200 every server gives GET and HEAD: exact status line, the five headers once each, 1024 bytes of body
// (none for HEAD), and the Connection value the request asked for. kEitherConnection accepts keep-alive or close:
// a server may close a persistent connection whenever it announces it (04 does, to be fair to queued clients).
constexpr std::string_view kEitherConnection = "";
inline ::testing::AssertionResult is_ok_response(const HttpResponse& r, bool head, std::string_view connection) {
  if (r.status_line != "HTTP/1.1 200 OK")
    return ::testing::AssertionFailure() << "status line '" << r.status_line << "' is not 'HTTP/1.1 200 OK'";
  for (const char* name : {"Content-Length", "Content-Type", "Date", "Server", "Connection"}) {
    if (r.header_count(name) != 1)
      return ::testing::AssertionFailure() << "header " << name << " appears " << r.header_count(name)
                                           << " times, want once:\n" << r.head_text();
    if (r.header(name)->empty()) return ::testing::AssertionFailure() << "header " << name << " is empty";
  }
  if (*r.header("Content-Length") != "1024")
    return ::testing::AssertionFailure() << "Content-Length: " << *r.header("Content-Length") << ", want 1024";
  const std::string date = *r.header("Date");
  if (date.size() != 29 || date.compare(26, 3, "GMT") != 0)
    return ::testing::AssertionFailure() << "Date '" << date << "' is not an IMF-fixdate";
  const std::string got = lower(*r.header("Connection"));
  if (connection == kEitherConnection ? got != "keep-alive" && got != "close" : got != lower(connection))
    return ::testing::AssertionFailure() << "Connection: " << *r.header("Connection") << ", want " << (connection.empty() ? "keep-alive or close" : connection);
  if (r.body.size() != (head ? 0U : 1024U))
    return ::testing::AssertionFailure() << "body of " << r.body.size() << " bytes";
  return ::testing::AssertionSuccess();
}

template <typename Param>
class ServerFixture : public ::testing::TestWithParam<Param> {
 protected:
  const ServerInfo& server_info() const {
    if constexpr (std::is_same_v<Param, ServerInfo>) return this->GetParam();
    else return std::get<0>(this->GetParam());
  }

  // A server that printed a sanitizer report failed, whatever the test checked (in the sanitizer builds of the
  // suite). Stopping it with SIGTERM, not SIGKILL, lets the sanitizers finish their report at exit.
  void TearDown() override {
    if (!server_) return;
    if (server_->running()) server_->stop(SIGTERM, deadline_in(3s));
    const std::string err = server_->err();
    for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer",
                               "runtime error:"}) {
      if (err.find(marker) != std::string::npos) {
        ADD_FAILURE() << server_info().name << " reported a sanitizer error (" << marker << "):\n" << err.substr(0, 6000)
                      << (err.find("invalid vptr") != std::string::npos
                              ? "\n(If the server was out of descriptors, this is UBSan's vptr check misfiring: it "
                                "probes the vtable through pipe(), which then fails. Build with -fno-sanitize=vptr.)"
                              : "");
        break;
      }
    }
  }

  // Starts the server under test with `args` (plus `--port 0` unless a port is given) and waits for its
  // listening line. On failure it records a test failure, or skips for 06 without io_uring, and returns nullptr:
  // the caller returns at once.
  ServerProcess* launch(std::vector<std::string> args, SpawnOptions options = {}) {
    if (std::find(args.begin(), args.end(), "--port") == args.end()) args.insert(args.begin(), {"--port", "0"});
    server_ = std::make_unique<ServerProcess>(server_info().path, args, options);
    std::string why;
    if (server_->wait_listening(deadline_in(kStartTimeout), why)) return server_.get();
    if (!server_->running()) {
      const ExitStatus status = server_->wait_exit(deadline_in(1s));
      if (io_uring_unavailable(server_info(), status, server_->err())) {
        const std::string reason = server_->err();
        [&] { GTEST_SKIP() << "io_uring unavailable: " << reason; }();
        return nullptr;
      }
    }
    ADD_FAILURE() << server_info().name << " did not start (" << server_->command_line() << "): " << why;
    return nullptr;
  }

  // Runs the server with `args` and waits for it to exit on its own (bad flags, busy port, --help).
  ExitStatus run_to_exit(std::vector<std::string> args) {
    server_ = std::make_unique<ServerProcess>(server_info().path, std::move(args));
    return server_->wait_exit(deadline_in(kIoTimeout));
  }

  Client connect(Client::Options options = {}) {
    return Client::connect_to(server_->port(), deadline_in(kIoTimeout), options);
  }

  // Descriptors of the idle server. Counted after a few warm-up clients have been served and closed by the server
  // (we saw EOF), so that what a server opens after its listening line (a loop thread's epoll instance, say) or on
  // its first connection is part of the baseline, and the warm-up connections are not.
  int baseline_fds() {
    for (int i = 0; i < 8; ++i) {
      Client c = connect();
      if (!c.ok() || !c.send(request("GET", "/warm-up", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)) ||
          !c.read_response(deadline_in(kIoTimeout))) {
        ADD_FAILURE() << "warm-up client " << i << ": " << c.error();
        return -1;
      }
      const auto end = c.wait_closed(deadline_in(kIoTimeout));
      if (end != Client::Closed::eof && end != Client::Closed::reset) {
        ADD_FAILURE() << "warm-up client " << i << " after Connection: close: " << Client::describe(end);
        return -1;
      }
    }
    return open_fd_count(server_->pid());
  }

  // A new connection gets a full, correct 200 (and is closed by us afterwards).
  ::testing::AssertionResult serves_new_client() {
    if (!server_->running())
      return ::testing::AssertionFailure() << "server is gone: " << server_->wait_exit(deadline_in(1s)).describe()
                                           << "; stderr: " << server_->err();
    Client c = connect();
    if (!c.ok()) return ::testing::AssertionFailure() << "new client: " << c.error();
    if (!c.send(request("GET", "/", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)))
      return ::testing::AssertionFailure() << "new client: " << c.error();
    const auto r = c.read_response(deadline_in(kIoTimeout));
    if (!r) return ::testing::AssertionFailure() << "new client: " << c.error();
    return is_ok_response(*r, false, "close");
  }

  std::unique_ptr<ServerProcess> server_;
};

using ServerTest = ServerFixture<ServerInfo>;

// Elapsed time as milliseconds, for messages.
inline long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

}  // namespace psp::test
