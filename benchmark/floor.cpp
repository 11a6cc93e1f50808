// floor: the least an epoll server can do per request on this kernel and machine, to judge ours against.
//
// N threads, each a bare event loop on its own SO_REUSEPORT listener (05's shape): it counts request heads (the
// "\r\n\r\n" that ends each) and answers every one with the response our servers send, byte for byte in size: the
// same status line and header fields (with a Date that changes every second) and the same 1,024-byte body. No
// parsing, no handler, no timers, no limits: what is left is the kernel's share and the loop's, the floor a
// teaching server is measured against (GUIDE.md 5b; issue 28's scaling mode). It is a measuring tool, not a server:
// a request with a body, a HEAD or a malformed request all get the same 200, and running out of descriptors makes
// a loop spin (our servers shed connections instead: common/net.hpp).
//
// Flags: --port N (0: a free port), --threads N (default 2, as our servers), --close (answer "Connection: close"
// and end each connection after its first response, for the runs with a new connection per request), and
// --delay-us 0 (accepted so that a driver may pass what it passes every server; the floor has no handler).
// It prints "listening on http://127.0.0.1:PORT/" like our servers, and exits 0 on SIGINT or SIGTERM.
//
// Build:  by CMake (target floor), or alone: g++ -std=c++17 -O2 -pthread -o floor floor.cpp
// Run:    ./floor --port 8080 --threads 4
// Try:    curl -i http://127.0.0.1:8080/

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct Config {
  int port = 8080;
  int threads = 2;
  bool close_each = false;  // --close
};

const char* const kUsage = "usage: floor [--port N] [--threads N] [--close] [--delay-us 0]\n";

bool parse(int argc, char** argv, Config& config) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--close") {
      config.close_each = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    char* end = nullptr;
    const long value = std::strtol(argv[++i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0') return false;
    if (flag == "--port" && value >= 0 && value <= 65535) config.port = static_cast<int>(value);
    else if (flag == "--threads" && value >= 1 && value <= 1024) config.threads = static_cast<int>(value);
    else if (flag == "--delay-us" && value == 0) continue;
    else return false;
  }
  return true;
}

// Our servers' 200 (common/http.hpp, response()): the same fields in the same order, so the same size.
std::string make_response(bool close_each) {
  std::string body(1024, 'x');
  body.back() = '\n';
  return std::string("HTTP/1.1 200 OK\r\nServer: psp\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n") +
         "Content-Type: text/plain\r\nContent-Length: 1024\r\nConnection: " + (close_each ? "close" : "keep-alive") +
         "\r\n\r\n" + body;
}

constexpr std::size_t kDateAt = 36;  // where the Date value starts in the response above
constexpr std::size_t kDateSize = 29;

// A listener on 127.0.0.1:port; with SO_REUSEPORT every loop has its own and the kernel spreads connections.
// `probe`: bind without SO_REUSEPORT and close, only to find out that the port is free: a second copy run by the
// same user would otherwise join the first one's group in silence (the pitfall net.hpp's listen_sockets() avoids).
int listen_on(int port, bool probe = false) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!probe) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // inherited by every accepted connection
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      (!probe && listen(fd, 4096) != 0)) {
    std::fprintf(stderr, "error: cannot listen on 127.0.0.1 port %d: %s\n", port, std::strerror(errno));
    std::exit(1);
  }
  return fd;
}

// One connection's state, indexed by its descriptor: how much of "\r\n\r\n" the last bytes matched, and the
// bytes of responses the socket did not take yet (only when a client sends faster than it reads).
struct Conn {
  bool open = false;  // descriptor numbers are the process's: this loop's connections are the open ones here
  int matched = 0;
  std::string unsent;
};

// One event loop. `stop_fd` becomes readable on SIGINT/SIGTERM and stays so: every loop sees it.
void run_loop(int listener, int stop_fd, bool close_each) {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  auto watch = [epoll_fd](int op, int fd, std::uint32_t events) {
    epoll_event event{};
    event.events = events;
    event.data.fd = fd;
    epoll_ctl(epoll_fd, op, fd, &event);
  };
  watch(EPOLL_CTL_ADD, listener, EPOLLIN);
  watch(EPOLL_CTL_ADD, stop_fd, EPOLLIN);
  std::string response = make_response(close_each);  // this loop's own copy: its Date is rewritten below
  std::time_t date_second = -1;
  std::vector<Conn> conns(1024);
  std::vector<char> in(64 * 1024);
  std::string out;
  auto end = [&](int fd) {
    conns[static_cast<std::size_t>(fd)] = Conn{};
    close(fd);  // also takes it out of the epoll set (nothing else holds it)
  };
  // Sends what the socket takes; the rest waits in c.unsent for EPOLLOUT, and the loop stops reading that client
  // meanwhile. (One send per batch of requests and no epoll_ctl while the socket keeps up: the floor's whole cost.)
  auto deliver = [&](int fd, Conn& c, std::string_view data) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) return end(fd);
    const std::size_t sent = n < 0 ? 0 : static_cast<std::size_t>(n);
    if (sent < data.size()) {
      std::string rest(data.substr(sent));  // a copy first: `data` may be c.unsent itself
      if (c.unsent.empty()) watch(EPOLL_CTL_MOD, fd, EPOLLOUT);
      c.unsent.swap(rest);
      return;
    }
    if (!c.unsent.empty()) {  // it was waiting for EPOLLOUT: all sent now, back to reading
      c.unsent = std::string();
      watch(EPOLL_CTL_MOD, fd, EPOLLIN);
    }
    if (close_each) shutdown(fd, SHUT_WR);  // the client reads the response, then its EOF ends the connection
  };

  for (;;) {
    epoll_event events[256];
    const int ready = epoll_wait(epoll_fd, events, 256, -1);
    if (const std::time_t now = std::time(nullptr); now != date_second) {  // no timer: the first event of a second
      date_second = now;
      std::tm utc{};
      gmtime_r(&now, &utc);
      char date[kDateSize + 1];
      std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &utc);
      response.replace(kDateAt, kDateSize, date);
    }
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd) {  // no grace: a measuring tool ends its connections at once
        for (std::size_t open_fd = 0; open_fd < conns.size(); ++open_fd)
          if (conns[open_fd].open) end(static_cast<int>(open_fd));
        close(listener);
        close(epoll_fd);
        return;
      }
      if (fd == listener) {
        for (int client; (client = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
          if (static_cast<std::size_t>(client) >= conns.size()) conns.resize(2 * static_cast<std::size_t>(client));
          conns[static_cast<std::size_t>(client)].open = true;
          watch(EPOLL_CTL_ADD, client, EPOLLIN);
        }
        continue;
      }
      Conn& c = conns[static_cast<std::size_t>(fd)];
      if (!c.unsent.empty()) {  // EPOLLOUT: the socket takes more
        deliver(fd, c, c.unsent);
        continue;
      }
      const ssize_t n = recv(fd, in.data(), in.size(), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN)) {
        end(fd);
        continue;
      }
      // Count the heads that end in these bytes: "\r\n\r\n", matched across reads.
      int heads = 0;
      for (ssize_t k = 0; k < n; ++k) {
        const char ch = in[static_cast<std::size_t>(k)];
        if (ch == (c.matched % 2 == 0 ? '\r' : '\n')) {
          if (++c.matched == 4) ++heads, c.matched = 0;
        } else {
          c.matched = ch == '\r' ? 1 : 0;
        }
      }
      if (heads == 0) continue;
      if (close_each) heads = 1;  // one response, then the connection ends
      out.clear();
      for (int h = 0; h < heads; ++h) out += response;
      deliver(fd, c, out);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  if (!parse(argc, argv, config)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // SIGINT and SIGTERM blocked in every thread (they inherit the mask), taken by sigwait() below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::vector<int> listeners;
  int port = config.port;
  if (port != 0) close(listen_on(port, true));
  for (int t = 0; t < config.threads; ++t) {  // the first picks the port when it is 0; the others join it
    listeners.push_back(listen_on(port));
    sockaddr_in bound{};
    socklen_t length = sizeof bound;
    getsockname(listeners.back(), reinterpret_cast<sockaddr*>(&bound), &length);
    port = ntohs(bound.sin_port);
  }
  const int stop_fd = eventfd(0, EFD_CLOEXEC);
  std::printf("listening on http://127.0.0.1:%d/\n", port);
  std::fflush(stdout);

  std::vector<std::thread> loops;
  for (const int listener : listeners) loops.emplace_back(run_loop, listener, stop_fd, config.close_each);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  const std::uint64_t one = 1;
  if (write(stop_fd, &one, sizeof one) != sizeof one) return 1;
  for (std::thread& loop : loops) loop.join();
  return 0;
}
