// Unit tests of common/net.hpp: listening, accepting, the EMFILE policy and the send/recv loops.
#include "common/net.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <thread>

#include "tests/unit/loopback.hpp"

namespace {

TEST(Net, FdClosesOnceAndMoves) {
  int raw = ::open("/dev/null", O_RDONLY);
  {
    Fd a(raw);
    Fd b(std::move(a));
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);  // closed by b's destructor
}

TEST(Net, ReuseportListenersShareOnePort) {
  ::testing::internal::CaptureStdout();
  std::vector<Fd> socks = listen_sockets(any_port(), 3);
  std::string line = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(socks.size(), 3u);
  int port = port_of(socks[0].get());
  EXPECT_NE(port, 0);
  for (const Fd& s : socks) EXPECT_EQ(port_of(s.get()), port);
  EXPECT_EQ(line, "listening on http://127.0.0.1:" + std::to_string(port) + "/\n");
}

TEST(Net, BusyPortIsOneSentenceAndExitStatus1) {
  ::testing::internal::CaptureStdout();
  std::vector<Fd> socks = listen_sockets(any_port());
  ::testing::internal::GetCapturedStdout();
  Options same = any_port();
  same.port = port_of(socks[0].get());
  EXPECT_EXIT(listen_sockets(same), ::testing::ExitedWithCode(1),
              "error: port " + std::to_string(same.port) + " on 127.0.0.1 is already in use");
}

// SO_REUSEPORT would let a second copy of a multi-loop server join the first one's port; it must fail instead.
TEST(Net, BusyPortIsRefusedToAReuseportGroupToo) {
  ::testing::internal::CaptureStdout();
  std::vector<Fd> socks = listen_sockets(any_port(), 2);
  ::testing::internal::GetCapturedStdout();
  Options same = any_port();
  same.port = port_of(socks[0].get());
  EXPECT_EXIT(listen_sockets(same, 2), ::testing::ExitedWithCode(1), "is already in use");
}

TEST(Net, AcceptReturnsNothingWhenNoneIsPending) {
  ::testing::internal::CaptureStdout();
  std::vector<Fd> socks = listen_sockets(any_port());
  ::testing::internal::GetCapturedStdout();
  EXPECT_FALSE(accept_client(socks[0].get(), Blocking::kNo).valid());
  Fd c = connect_to(port_of(socks[0].get()));
  ASSERT_TRUE(c.valid());
  Fd s = accept_client(socks[0].get(), Blocking::kNo);
  ASSERT_TRUE(s.valid());
  EXPECT_TRUE(::fcntl(s.get(), F_GETFL) & O_NONBLOCK);
}

// Out of descriptors, a pending connection is accepted and closed rather than left in the queue (where it would
// keep the listener readable and make an event loop spin); once descriptors free up, accepting works again.
// Runs in a child process (it uses up every descriptor); its exit status says which step failed.
[[noreturn]] void emfile_scenario() {
  ::testing::internal::CaptureStdout();
  std::vector<Fd> socks = listen_sockets(any_port());
  int port = port_of(socks[0].get());
  Fd client = connect_to(port);
  std::vector<int> hog;  // use up every descriptor
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) hog.push_back(fd);
  if (accept_client(socks[0].get(), Blocking::kNo).valid()) std::_Exit(3);
  pollfd p{socks[0].get(), POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) std::_Exit(4);  // the queue is empty again: nothing left to spin on
  char byte;
  if (::recv(client.get(), &byte, 1, 0) > 0) std::_Exit(5);  // the shed client sees EOF or a reset
  for (int fd : hog) ::close(fd);
  Fd again = connect_to(port);
  if (!accept_client(socks[0].get(), Blocking::kNo).valid()) std::_Exit(6);
  std::_Exit(0);
}

// Out of descriptors, a pending connection is accepted and closed rather than left in the queue (where it would
// keep the listener readable and make an event loop spin); once descriptors free up, accepting works again.
TEST(Net, EmfileShedsThePendingConnectionAndRecovers) {
  EXPECT_EXIT(emfile_scenario(), ::testing::ExitedWithCode(0), "");
}

TEST(Net, SendAllAndRecvIntoMoveEveryByte) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::string big(1 << 20, 'z');  // larger than the socket buffer: several send() calls
  std::string got;
  std::thread reader([&] {
    while (got.size() < big.size() && recv_into(b.get(), got) > 0) {
    }
  });
  EXPECT_TRUE(send_all(a.get(), big));
  reader.join();
  EXPECT_EQ(got, big);
  b.reset();
  EXPECT_FALSE(send_all(a.get(), "x"));  // EPIPE, without the SIGPIPE that would kill the test: MSG_NOSIGNAL
}

TEST(Net, SendSomeStopsWhenTheBufferIsFull) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::string big(4 << 20, 'z');
  std::size_t offset = 0;
  EXPECT_TRUE(send_some(a.get(), big, offset));
  EXPECT_GT(offset, 0u);
  EXPECT_LT(offset, big.size());  // would block: the caller waits for writability and calls again
  std::string in;
  EXPECT_GT(recv_into(b.get(), in), 0);
}

}  // namespace
