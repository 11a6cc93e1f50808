#pragma once
// What /proc says about a server process: its open descriptors, its CPU time, and how many bytes its sockets
// have not read yet. Used to prove "nothing leaked", "not spinning" and "the request is being handled" without
// guessing with sleeps.

#include <dirent.h>
#include <unistd.h>

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
// owner has not read yet (the rx_queue column of /proc/net/tcp); nullopt if there is no such connection.
inline std::optional<long> tcp_unread_bytes(std::uint16_t local_port, std::uint16_t remote_port) {
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
