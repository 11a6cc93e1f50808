// 06's loops take an -EAGAIN completion for "not ready yet", never for the end of a connection.
//
// io_uring may complete a recv or send with -EAGAIN (a SENDMSG or RECVMSG on a non-blocking socket does, once the
// kernel has handed it to a worker thread under pressure that no test can order). The builds tested here
// (server_06_eagain, server_06_advanced_eagain: tests/support/uring_inject_eagain.hpp) make every other recv and
// send complete with -EAGAIN whenever its socket is not ready. A slow writer then meets it on the recvs, a slow
// reader on the sends, a client that trickles bytes after a `Connection: close` on the lingering close's recvs, and
// each must get every byte on a connection that is never cut short. The same builds give their loops a ring of two
// provided buffers only, so that clients that send at once meet -ENOBUFS, which must mean "try again" too.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/server_fixture.hpp"

#if !defined(PSP_SERVER_06_EAGAIN) || !defined(PSP_SERVER_06_ADVANCED_EAGAIN)
#error "CMake defines PSP_SERVER_06_EAGAIN and PSP_SERVER_06_ADVANCED_EAGAIN as the paths of the test builds"
#endif

namespace psp::test {
namespace {

// main.cpp, and advanced.cpp with no flag and with the flags that change how it reads and sends. None when
// tests/grade.sh grades a command: these are checks of this repository's own builds.
std::vector<ServerInfo> eagain_builds() {
  if (graded_command()) return {};
  const char* plain = binary("PSP_SERVER_06_EAGAIN", PSP_SERVER_06_EAGAIN);
  const char* adv = binary("PSP_SERVER_06_ADVANCED_EAGAIN", PSP_SERVER_06_ADVANCED_EAGAIN);
  return {
      variant(6, "s06_eagain", plain, {}),
      variant(6, "s06adv_eagain_plain", adv, {}),
      variant(6, "s06adv_eagain_multishot_recv", adv, {"--multishot-recv"}),
      variant(6, "s06adv_eagain_splice", adv, {"--splice"}),
      variant(6, "s06adv_eagain_send_zc", adv, {"--send-zc"}),
      variant(6, "s06adv_eagain_all",
              adv, {"--multishot-accept", "--multishot-recv", "--fixed-files", "--defer-taskrun", "--send-zc"}),
  };
}

// A folder with one file of kFileSize bytes that are not all alike (a byte lost or repeated shows), removed at the
// end. Small enough to write in a moment, large enough to fill the socket buffers many times over.
class FileRoot {
 public:
  static constexpr std::size_t kFileSize = 1 << 20;

  FileRoot() {
    char dir[] = "/tmp/psp-eagain-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    for (std::size_t i = 0; i < kFileSize; ++i) body_ += static_cast<char>('a' + (i * 7 + i / 4096) % 26);
    Fd fd(::open(path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() || ::write(fd.get(), body_.data(), body_.size()) != static_cast<ssize_t>(body_.size()))
      dir_.clear();
  }
  ~FileRoot() {
    if (dir_.empty()) return;
    ::unlink(path().c_str());
    ::rmdir(dir_.c_str());
  }
  bool ok() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  const std::string& body() const { return body_; }

 private:
  std::string path() const { return dir_ + "/file.bin"; }
  std::string dir_;
  std::string body_;
};

class UringEagain : public ServerTest {
 protected:
  // Reads slowly until `count` responses have come, or the server ends the connection, or the deadline: small reads
  // with a pause after each, into a small receive buffer, so that the server's sends find it full again and again.
  std::vector<HttpResponse> read_slowly(Client& c, int count, Deadline deadline) {
    std::vector<HttpResponse> got;
    while (static_cast<int>(got.size()) < count && Clock::now() < deadline) {
      HttpResponse r;
      std::string err;
      const Parse p = c.take_response(false, r, err);
      if (p == Parse::complete) {
        got.push_back(std::move(r));
        continue;
      }
      if (p == Parse::malformed) {
        ADD_FAILURE() << "malformed response after " << got.size() << ": " << err;
        break;
      }
      std::this_thread::sleep_for(2ms);
      if (!c.read_available()) break;  // closed or reset: the caller reports how many came
    }
    return got;
  }
};

// The request arrives in pieces with pauses, three times on one connection: the recv armed after each piece
// finds nothing to read. A loop that took -EAGAIN for an error closed the connection at the first one.
TEST_P(UringEagain, SlowWriterIsServedWhole) {
  if (!launch({"--delay-us", "0", "--threads", "1"})) return;
  Client c = connect({/*nodelay=*/true});
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string req = request("GET", "/slow-writer");
  for (int round = 0; round < 3; ++round) {
    for (std::size_t at = 0; at < req.size(); at += 7) {
      ASSERT_TRUE(c.send(req.substr(at, 7), deadline_in(kIoTimeout))) << "round " << round << ": " << c.error();
      std::this_thread::sleep_for(5ms);
    }
    const auto r = c.read_response(deadline_in(kIoTimeout));
    ASSERT_TRUE(r) << "round " << round << ": " << c.error();
    EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
  }
}

// 300 pipelined requests at once (about 400 KB of responses) to a client that reads them slowly through a small
// receive buffer: the sends find the socket full. A loop that took -EAGAIN for an error reset the connection.
TEST_P(UringEagain, SlowReaderOfPipelinedResponsesGetsThemAll) {
  if (!launch({"--delay-us", "0", "--threads", "1"})) return;
  Client c = connect({false, /*rcvbuf=*/8192});
  ASSERT_TRUE(c.ok()) << c.error();
  constexpr int kCount = 300;
  std::string all;
  for (int i = 0; i < kCount; ++i) all += request("GET", "/pipelined/" + std::to_string(i));
  ASSERT_TRUE(c.send(all, deadline_in(kIoTimeout))) << c.error();
  const std::vector<HttpResponse> got = read_slowly(c, kCount, deadline_in(kIoTimeout));
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kCount)) << c.describe_end("before every response came");
  for (const HttpResponse& r : got) ASSERT_TRUE(is_ok_response(r, false, "keep-alive"));
}

// A 1 MiB file, twice (sendfile() in main.cpp; splices, or zero-copy sends, in advanced.cpp's variants), to a client
// that reads slowly: every byte of both, in order, on one connection.
TEST_P(UringEagain, SlowReaderOfAFileGetsEveryByte) {
  const FileRoot root;
  ASSERT_TRUE(root.ok()) << "cannot write the file to serve: " << errno_text(errno);
  if (!launch({"--root", root.dir(), "--delay-us", "0", "--threads", "1"})) return;
  Client c = connect({false, /*rcvbuf=*/16384});
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/file.bin") + request("GET", "/file.bin"), deadline_in(kIoTimeout)));
  const std::vector<HttpResponse> got = read_slowly(c, 2, deadline_in(2 * kIoTimeout));
  ASSERT_EQ(got.size(), 2U) << c.describe_end("before both files came");
  for (const HttpResponse& r : got) {
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), root.body().size());
    EXPECT_TRUE(r.body == root.body()) << "the body differs from the file";
  }
}

// After a `Connection: close` response the server lingers: it reads and throws away what the client still sends
// until the client's EOF (common/closing.hpp). The client sends a few more pieces with pauses, then its FIN: each
// lingering recv finds nothing at first. A loop that took -EAGAIN for the end closed early, and the next piece
// drew a reset; the lingering close ends with the server's EOF after the client's.
TEST_P(UringEagain, LingeringOutlastsASlowTrickle) {
  if (!launch({"--delay-us", "0", "--threads", "1"})) return;
  Client c = connect({/*nodelay=*/true});
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_TRUE(c.send(request("GET", "/", "HTTP/1.1", "Connection: close\r\n"), deadline_in(kIoTimeout)));
  const auto r = c.read_response(deadline_in(kIoTimeout));
  ASSERT_TRUE(r) << c.error();
  EXPECT_TRUE(is_ok_response(*r, false, "close"));
  for (int piece = 0; piece < 4; ++piece) {
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(c.send("trailing bytes ", deadline_in(kIoTimeout))) << "piece " << piece << ": " << c.error();
  }
  std::this_thread::sleep_for(20ms);
  c.half_close();
  const Client::Closed end = c.wait_closed(deadline_in(kIoTimeout));
  EXPECT_EQ(end, Client::Closed::eof) << Client::describe(end);
}

// Twenty clients, each with a request sent in the same instant, three times over: the loop's recvs complete in the
// same turn, and all but two find the ring of provided buffers empty (-ENOBUFS). A loop that took -ENOBUFS for an
// error closed those connections; one that lost a buffer on some path would soon have none, and hang.
TEST_P(UringEagain, TwentyClientsAtOnceWithTwoBuffers) {
  if (!launch({"--delay-us", "0", "--threads", "1"})) return;
  constexpr int kClients = 20;
  std::vector<Client> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(connect({/*nodelay=*/true}));
    ASSERT_TRUE(clients.back().ok()) << "client " << i << ": " << clients.back().error();
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kClients; ++i)
      ASSERT_TRUE(clients[i].send(request("GET", "/at-once/" + std::to_string(i)), deadline_in(kIoTimeout)))
          << "round " << round << ", client " << i << ": " << clients[i].error();
    for (int i = 0; i < kClients; ++i) {
      const auto r = clients[i].read_response(deadline_in(kIoTimeout));
      ASSERT_TRUE(r) << "round " << round << ", client " << i << ": " << clients[i].error();
      EXPECT_TRUE(is_ok_response(*r, false, "keep-alive"));
    }
  }
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(UringEagain);
INSTANTIATE_TEST_SUITE_P(EagainBuilds, UringEagain, ::testing::ValuesIn(eagain_builds()), ServerName());

}  // namespace
}  // namespace psp::test
