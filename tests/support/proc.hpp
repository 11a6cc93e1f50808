#pragma once
// What /proc says about a server process: its open descriptors, its CPU time, and how many bytes its sockets
// have not read yet. Used to prove "nothing leaked", "not spinning" and "the request is being handled" without
// guessing with sleeps.

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "tests/support/client.hpp"

namespace psp::test {

// Number of open descriptors of `pid`, or -1 if /proc/PID/fd cannot be read.
inline int open_fd_count(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int count = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++count;
  ::closedir(d);
  return count;
}

// "3 -> socket:[1234]" lines, for failure messages.
inline std::string describe_fds(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return "(cannot read " + dir + ")";
  std::string out;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    out += std::string(e->d_name) + " -> " + (n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?") + "\n";
  }
  ::closedir(d);
  return out;
}

// Polls until `pid` has at most `limit` descriptors open; returns the last count seen.
inline int wait_fd_count_at_most(pid_t pid, int limit, Deadline deadline) {
  for (;;) {
    const int n = open_fd_count(pid);
    if ((n >= 0 && n <= limit) || Clock::now() >= deadline) return n;
    std::this_thread::sleep_for(milliseconds(5));  // polling interval, not a synchronisation guess
  }
}

// Raises this test process's soft descriptor limit to its hard one, for a test that opens `needed` connections.
// `limit` gets the new limit. Fails (with the reason) when the hard limit is lower than `needed`.
inline ::testing::AssertionResult raise_own_fd_limit(rlim_t needed, rlim_t& limit) {
  rlimit own{};
  if (::getrlimit(RLIMIT_NOFILE, &own) != 0) return ::testing::AssertionFailure() << "getrlimit: " << errno_text(errno);
  if (own.rlim_max < needed)
    return ::testing::AssertionFailure() << "the hard RLIMIT_NOFILE of the test process (" << own.rlim_max
                                         << ") is lower than the " << needed << " descriptors this test needs";
  own.rlim_cur = own.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &own) != 0) return ::testing::AssertionFailure() << "setrlimit: " << errno_text(errno);
  limit = own.rlim_max;
  return ::testing::AssertionSuccess();
}

// True in the sanitizer builds of the suite (its servers are built the same way): ASan and TSan pad every
// allocation and keep freed memory in quarantine, so a check on RSS needs more room there, or means nothing.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// Resident set size of `pid` in KiB (VmRSS in /proc/PID/status), or -1 if unreadable.
inline long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 6, "VmRSS:") == 0) return std::stol(line.substr(6));
  return -1;
}

// User plus system CPU time of `pid`, in clock ticks (sysconf(_SC_CLK_TCK) per second); -1 if unreadable.
inline long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t paren = stat.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  long utime = 0, stime = 0;
  // After the name: state(3) ... utime is field 14 and stime field 15 of the whole line.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

// Bytes received on the established IPv4 TCP connection 127.0.0.1:local_port <-> 127.0.0.1:remote_port that its
// owner has not read yet; nullopt if there is no such connection.
//
// Asked of the kernel for that one socket (sock_diag: an exact-match inet_diag request over netlink), not by
// reading /proc/net/tcp: that file lists every TCP socket of the machine, and after a few thousand tests it holds
// tens of thousands of TIME_WAIT entries, so one read took ~0.15 s and a test that asks for 50 connections missed
// its own deadlines. /proc/net/tcp stays the fallback where netlink is not allowed.
inline std::optional<long> tcp_unread_bytes(std::uint16_t local_port, std::uint16_t remote_port) {
  Fd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (nl.valid()) {
    struct {
      nlmsghdr header;
      inet_diag_req_v2 body;
    } req{};
    req.header.nlmsg_len = sizeof req;
    req.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.header.nlmsg_flags = NLM_F_REQUEST;  // no NLM_F_DUMP: the one socket named by `id`
    req.body.sdiag_family = AF_INET;
    req.body.sdiag_protocol = IPPROTO_TCP;
    req.body.idiag_states = ~0U;
    req.body.id.idiag_sport = htons(local_port);
    req.body.id.idiag_dport = htons(remote_port);
    req.body.id.idiag_src[0] = htonl(INADDR_LOOPBACK);
    req.body.id.idiag_dst[0] = htonl(INADDR_LOOPBACK);
    req.body.id.idiag_cookie[0] = req.body.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    alignas(nlmsghdr) char reply[8192];
    ssize_t n = -1;
    if (::send(nl.get(), &req, sizeof req, 0) == static_cast<ssize_t>(sizeof req)) {
      do n = ::recv(nl.get(), reply, sizeof reply, 0);
      while (n < 0 && errno == EINTR);
    }
    const auto* h = reinterpret_cast<const nlmsghdr*>(reply);
    if (n > 0 && NLMSG_OK(h, static_cast<unsigned>(n))) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        // ENOENT: no such socket. Anything else (EPERM in a locked-down container, say): ask /proc instead.
        if (reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(h))->error == -ENOENT) return std::nullopt;
      } else if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
        const auto* msg = reinterpret_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        // Without an established match the kernel answers with the listener or a TIME_WAIT entry on those ports.
        if (msg->idiag_state != 1 /* TCP_ESTABLISHED */) return std::nullopt;
        return static_cast<long>(msg->idiag_rqueue);
      }
    }
  }
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    if (!(fields >> slot >> local >> remote >> state >> queues)) continue;
    auto port_of = [](const std::string& address) {
      const std::size_t colon = address.find(':');
      return colon == std::string::npos ? 0UL : std::stoul(address.substr(colon + 1), nullptr, 16);
    };
    // State 01 is ESTABLISHED: an old TIME_WAIT entry with the same ports must not answer for it.
    if (state != "01" || local.compare(0, 8, "0100007F") != 0 || port_of(local) != local_port ||
        port_of(remote) != remote_port)
      continue;
    const std::size_t colon = queues.find(':');
    if (colon == std::string::npos) continue;
    return std::stol(queues.substr(colon + 1), nullptr, 16);
  }
  return std::nullopt;
}

}  // namespace psp::test
