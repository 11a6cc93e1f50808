// common/net.hpp: sockets, the same for all seven servers.
//
// Listening (with the "listening on" line scripts wait for), accepting (with the EMFILE policy), and the blocking
// send/recv loops that handle short writes and EINTR. Per-connection errors are returned, never fatal; only start-up
// errors end the process, with one sentence and exit status 1.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"
#include "timers.hpp"

// Owns one file descriptor and closes it exactly once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);  // never retry close() on EINTR: on Linux the fd is already gone
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

[[noreturn]] inline void fail_startup(const std::string& sentence) {
  std::fprintf(stderr, "error: %s\n", sentence.c_str());
  std::exit(1);
}

inline void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Raises the soft descriptor limit to the hard one (often 1024 -> 1048576), so that thousands of connections fit.
inline void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

namespace detail {

inline socklen_t make_address(const std::string& host, int port, sockaddr_storage& addr) {
  std::memset(&addr, 0, sizeof addr);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    return sizeof(sockaddr_in);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  ::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr);  // options.hpp has checked that it parses
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(static_cast<uint16_t>(port));
  return sizeof(sockaddr_in6);
}

inline int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(addr).sin_port
                                         : reinterpret_cast<sockaddr_in6&>(addr).sin6_port);
}

}  // namespace detail

// `count` non-blocking listening sockets on opts.host:opts.port, and prints the "listening on" line.
//
// With count > 1 every socket sets SO_REUSEPORT, so each event-loop thread can own its own listener and the kernel
// spreads new connections across them (what nginx calls `reuseport`). With --port 0 the first socket picks the port
// and the others join it. SO_REUSEADDR lets a restarted server bind while old connections sit in TIME_WAIT.
// One pitfall of SO_REUSEPORT: a second copy of the same server, run by the same user, would silently join the
// first one's group instead of failing with "already in use". A probe bind without SO_REUSEPORT finds out first.
//
// Two TCP options are set here, before listen(), because every accepted connection inherits them from its
// listener (so no model pays a system call per connection for them):
//   TCP_NODELAY        every response is written whole, so Nagle's algorithm could only delay pipelined replies.
//   TCP_NOTSENT_LOWAT  Linux reports a socket writable only once a third of its send buffer is free, and grows that
//                      buffer to megabytes: a reader taking a file at 100 KB/s would show no write progress for
//                      many seconds and be closed as stalled. Capping the bytes held unsent at kUnsentLimit makes
//                      the socket writable again every few KiB the reader takes.
constexpr int kUnsentLimit = 16 * 1024;

inline std::vector<Fd> listen_sockets(const Options& opts, int count = 1) {
  std::vector<Fd> sockets;
  int port = opts.port;
  for (int i = (count > 1 && port != 0) ? -1 : 0; i < count; ++i) {  // i == -1: the probe
    sockaddr_storage addr{};
    socklen_t len = detail::make_address(opts.host, port, addr);
    Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) fail_startup(std::string("cannot create a socket: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (count > 1 && i >= 0) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &kUnsentLimit, sizeof kUnsentLimit);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      if (errno == EADDRINUSE)
        fail_startup("port " + std::to_string(port) + " on " + opts.host + " is already in use");
      fail_startup("cannot listen on " + opts.host + " port " + std::to_string(port) + ": " + std::strerror(errno));
    }
    if (i < 0) continue;  // the probe bound: the port is free; its Fd closes it
    if (::listen(fd.get(), opts.backlog) != 0)
      fail_startup(std::string("listen() failed: ") + std::strerror(errno));
    port = detail::bound_port(fd.get());
    sockets.push_back(std::move(fd));
  }
  bool v6 = opts.host.find(':') != std::string::npos;
  std::printf("listening on http://%s%s%s:%d/\n", v6 ? "[" : "", opts.host.c_str(), v6 ? "]" : "", port);
  std::fflush(stdout);
  return sockets;
}

// The EMFILE policy, shared by every model.
//
// When the process is out of descriptors, accept() fails and the pending connection stays in the listen queue, so
// a level-triggered loop would wake up again at once and spin. We keep one spare descriptor open; on EMFILE we close
// it, accept the pending connection, close that at once (the client sees its connection closed), and reopen the
// spare. Connections already open keep being served, and accepting resumes as soon as descriptors free up.
// (The trick is libev's; a mutex keeps two threads from spending the one spare at once.)
namespace detail {
inline std::mutex spare_mutex;  // held by whoever closes or reopens the spare
inline std::atomic<int> spare_fd{::open("/dev/null", O_RDONLY | O_CLOEXEC)};  // -1: lost (see below)
}  // namespace detail

// Returns true when a connection was shed. At the limit another thread (or the kernel, for an accept io_uring has
// in flight) can take the descriptor the spare freed before we reopen it: the spare is then lost, and the next
// time we run out there would be nothing to shed with. restore_spare() gets it back.
inline bool shed_pending_connection(int listen_fd) {
  std::lock_guard<std::mutex> lock(detail::spare_mutex);
  if (detail::spare_fd < 0) detail::spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // lost: retry
  pollfd p{listen_fd, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return false;  // nothing pending: never block here, even on a blocking listener
  if (detail::spare_fd >= 0) ::close(detail::spare_fd);
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  detail::spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0;
}

// Reopens the spare if a shed lost it. A server calls it right after it closes a connection's descriptor: that
// number is free now, and the spare takes it before the next accept can. (Waiting for the next shed would be too
// late: that happens at the limit, when no number is free.) Costs one atomic load while the spare is open.
inline void restore_spare() {
  if (detail::spare_fd >= 0) return;
  std::lock_guard<std::mutex> lock(detail::spare_mutex);
  if (detail::spare_fd < 0) detail::spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

enum class Blocking { kYes, kNo };

constexpr std::chrono::milliseconds kAcceptPause{10};  // how long a stuck listener goes unwatched (see below)

// One new connection, or an invalid Fd when there is none to take right now: nothing pending, the client gave up,
// or the process was out of descriptors and the connection was shed. (TCP_NODELAY and TCP_NOTSENT_LOWAT come from
// the listener: see listen_sockets().)
//
// An invalid Fd with errno EMFILE or ENFILE means "stuck": out of descriptors, and the spare was gone too (another
// thread took it), so the connection is still pending. The listener stays readable; a loop with several accepting
// threads must then stop watching it for a moment (kAcceptPause) instead of spinning on it.
inline Fd accept_client(int listen_fd, Blocking mode) {
  int flags = SOCK_CLOEXEC | (mode == Blocking::kNo ? SOCK_NONBLOCK : 0);
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, flags);
    if (fd >= 0) return Fd(fd);
    if (errno == EINTR) continue;
    if (errno == EMFILE || errno == ENFILE) {
      int out_of_fds = errno;
      errno = shed_pending_connection(listen_fd) ? ECONNABORTED : out_of_fds;  // shed: that client is gone
    }
    return Fd();  // EAGAIN, ECONNABORTED...: nothing to serve now; the caller waits for readiness again
  }
}

// Blocking models: how long a send() may wait for a reader that takes nothing before it fails (SO_SNDTIMEO). A
// reader that keeps taking bytes, however slowly, restarts it each time.
inline void set_send_timeout(int fd, std::chrono::seconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Blocking models: the request deadline. A connection has --idle-timeout seconds to deliver each request head,
// counted from when the server starts waiting for it, however many bytes it sends on the way: a client that
// dribbles a header a byte at a time (slowloris) is closed at the deadline all the same. So before each recv() the
// server sets SO_RCVTIMEO to the time that remains. False when none remains: close the connection.
inline bool set_recv_deadline(int fd, std::chrono::steady_clock::time_point deadline) {
  auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return false;
  timeval tv = to_timeval(left);  // rounded up to the microsecond: never {0, 0}, which would mean "wait forever"
  return ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0;
}

// Blocking sockets: writes all of `data`, however many calls that takes. False on any error (the peer reset or
// vanished, or the send timeout passed). MSG_NOSIGNAL: a closed peer gives EPIPE, not a SIGPIPE that kills us.
inline bool send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// Non-blocking sockets: writes what the kernel takes now, from data[offset...]. Returns false on a real error;
// `offset` tells how far it got, and offset < data.size() means "wait until writable, then call again".
inline bool send_some(int fd, const std::string& data, std::size_t& offset) {
  while (offset < data.size()) {
    ssize_t n = ::send(fd, data.data() + offset, data.size() - offset, MSG_NOSIGNAL);
    if (n > 0) {
      offset += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  return true;
}

// Appends what can be read now to `buffer`. Returns >0 bytes read, 0 on EOF, -1 on error and -2 for "nothing
// now" (EAGAIN: no data yet on a non-blocking socket; on a blocking one, the SO_RCVTIMEO idle timeout passed).
// Reads at most 4 KiB, so a client cannot grow a buffer much past the 8 KiB head limit before the parser answers.
// EINTR gives -1 with errno EINTR: on a blocking socket it is no error of the connection's (a signal, or a stop
// and continue), and recv_before() (lifecycle.hpp) retries it; a non-blocking recv() never waits, so never sees it.
inline long recv_into(int fd, std::string& buffer, int flags = 0) {
  char chunk[4096];
  ssize_t n = ::recv(fd, chunk, sizeof chunk, flags);
  if (n > 0) buffer.append(chunk, static_cast<std::size_t>(n));
  if (n >= 0) return static_cast<long>(n);
  return errno == EAGAIN || errno == EWOULDBLOCK ? -2 : -1;
}
