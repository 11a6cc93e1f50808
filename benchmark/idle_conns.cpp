// idle_conns: what does one held connection cost a server?
//
// The connection-cost mode of benchmark.sh (`--mode connections`) runs this against one server at a time:
//   1. reads the server's RSS, thread count and open descriptors from /proc (the baseline);
//   2. opens N connections, at most --window of them waiting for an answer at once, and sends one keep-alive
//      GET on each. A process may hold only so many descriptors (`ulimit -Hn`), and one source address has only
//      so many ports, so the connections are shared among holder processes: each a child with its own epoll,
//      at most --per-process connections, and 16 source addresses of its own (127.1.K.1 to 127.1.K.16 for
//      holder K: loopback has all of 127.0.0.0/8), so that connect()'s search for a free port stays short.
//      Every connection ends up as one of
//        held     answered 200 and left open: the server now holds an idle keep-alive connection;
//        refused  answered with another status (03 answers 503 past FD_SETSIZE, 04 when its queue is full);
//        closed   not kept: closed or reset by the server, without an answer or after one that said
//                 `Connection: close` (04 does that when other clients wait for a worker);
//        blocked  no answer within --answer-ms: accepted (or queued) but not served, because the server's
//                 threads are all sitting on other connections (01, 04). That is the cost we want to show;
//        untried  not opened: once 2 x --window connections in a row were not held, and no late answer came in
//                 the 5 x --answer-ms after, the server has stopped taking them (it is at a limit), and a
//                 holder process opens no more;
//   3. reads /proc again while they are all held, and times --probes new clients (one request each, one after
//      another: the median and the p99 of their times);
//   4. with --hold, prints a `holding ...` line and keeps the connections open, idle, until it gets SIGTERM:
//      benchmark.sh's idle mode measures busy clients beside them meanwhile;
//   5. checks that the server closed none of the held connections (dropped), releases them all with a reset
//      (so no TIME_WAIT sockets linger to disturb the next run), and checks that a new client is served again.
//      Every holder counts before any releases: see holder_process().
//
// Output: one line of key=value pairs on stdout, parsed by benchmark.sh; diagnostics on stderr.
// Exit status: 0 when it ran (whatever it found), 1 when it could not run, 2 on a bad argument.
// RSS counts user-space memory only: the kernel's socket buffers are not in it.
//
// Build: by CMake (target idle_conns), or alone: g++ -std=c++17 -O2 -o idle_conns idle_conns.cpp
// Run:   ./idle_conns --port 8080 --connections 1000 --pid "$(pgrep -n run_server)"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  int connections = 1000;
  int pid = 0;           // the server to observe in /proc; 0: no memory, thread or descriptor figures
  int window = 500;      // connections waiting for their answer at once; keeps the accept queue from overflowing
  int answer_ms = 1000;  // a connection with no answer by then is counted as blocked
  int probes = 5;
  int per_process = 0;   // connections per holder process; 0: as many as its descriptor limit and ports allow
  bool hold = false;     // keep the connections until SIGTERM
};

const char* const kUsage =
    "usage: idle_conns --port N [--host ADDR] [--connections N] [--pid PID] [--window N] [--answer-ms MS]\n"
    "                  [--probes N] [--per-process N] [--hold]\n";

bool parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--hold") {
      options.hold = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    char* end = nullptr;
    const long number = std::strtol(value, &end, 10);
    const bool numeric = *value != '\0' && *end == '\0' && number >= 0 && number <= 10'000'000;
    if (flag == "--host") options.host = value;
    else if (!numeric) return false;
    else if (flag == "--port") options.port = static_cast<int>(number);
    else if (flag == "--connections") options.connections = static_cast<int>(number);
    else if (flag == "--pid") options.pid = static_cast<int>(number);
    else if (flag == "--window") options.window = std::max(1, static_cast<int>(number));
    else if (flag == "--answer-ms") options.answer_ms = static_cast<int>(number);
    else if (flag == "--probes") options.probes = static_cast<int>(number);
    else if (flag == "--per-process") options.per_process = static_cast<int>(number);
    else return false;
  }
  return options.port > 0 && options.port < 65536;
}

// ---- The server's footprint, read from /proc ------------------------------------------------------------

struct Footprint {
  long rss_kib = 0;
  long threads = 0;
  long fds = 0;
};

// The server's processes: PID itself and its children (nginx's workers; our servers have none). The kernel
// here may lack /proc/PID/task/TID/children, so scan every process's parent instead.
std::vector<int> server_processes(int pid) {
  std::vector<int> pids{pid};
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* entry = readdir(proc)) {
    const int candidate = std::atoi(entry->d_name);
    if (candidate <= 0 || candidate == pid) continue;
    std::ifstream stat("/proc/" + std::to_string(candidate) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // The command name is in parentheses and may hold spaces: the fields that follow come after the last ')'.
    const auto paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    int parent = 0;
    if (std::sscanf(line.c_str() + paren + 1, " %c %d", &state, &parent) == 2 && parent == pid)
      pids.push_back(candidate);
  }
  closedir(proc);
  return pids;
}

long status_value(int pid, const std::string& key) {  // e.g. "VmRSS:" (in kB) or "Threads:"
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.compare(0, key.size(), key) == 0) return std::atol(line.c_str() + key.size());
  return 0;
}

// Since Linux 6.2 the size of /proc/PID/fd is the number of open descriptors. Listing the folder instead (older
// kernels) leaves an inode and a dentry behind per descriptor, which kernel_memory.py must then drop.
long count_fds(int pid) {
  struct stat folder {};
  const std::string path = "/proc/" + std::to_string(pid) + "/fd";
  if (stat(path.c_str(), &folder) == 0 && folder.st_size > 0) return static_cast<long>(folder.st_size);
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return 0;
  long count = 0;
  while (const dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count;
}

Footprint footprint(int pid) {
  Footprint total;
  if (pid <= 0) return total;
  for (const int process : server_processes(pid)) {
    total.rss_kib += status_value(process, "VmRSS:");
    total.threads += status_value(process, "Threads:");
    total.fds += count_fds(process);
  }
  return total;
}

bool alive(int pid) { return pid > 0 && kill(pid, 0) == 0; }

// ---- HTTP, just enough to know when one response is complete ----------------------------------------------

const std::string kKeepAliveRequest = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

// The status code once a whole response (head and Content-Length body) is in `received`; 0 while incomplete.
// `closing` tells whether the server announced that it closes the connection after it.
int complete_status(const std::string& received, bool* closing = nullptr) {
  const auto head_end = received.find("\r\n\r\n");
  if (head_end == std::string::npos) return 0;
  std::string head = received.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  std::size_t length = 0;
  const auto field = head.find("\ncontent-length:");
  if (field != std::string::npos) length = std::strtoul(head.c_str() + field + 16, nullptr, 10);
  if (received.size() < head_end + 4 + length) return 0;
  if (closing != nullptr) *closing = head.find("\nconnection: close") != std::string::npos;
  const int status = head.compare(0, 5, "http/") == 0 && head.size() > 12 ? std::atoi(head.c_str() + 9) : 0;
  return status > 0 ? status : -1;
}

// `source`: the local address to connect from (its port is chosen at connect()), or INADDR_ANY.
int connect_nonblocking(const Options& options, in_addr source = {INADDR_ANY}) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (source.s_addr != htonl(INADDR_ANY)) {
    // Without IP_BIND_ADDRESS_NO_PORT, bind() would pick a port for every destination at once, and run out.
    const int on = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr = source;
    if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) < 0) {
      const int error = errno;
      close(fd);
      return -error;
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(options.port));
  inet_pton(AF_INET, options.host.c_str(), &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0 && errno != EINPROGRESS) {
    const int error = errno;
    close(fd);
    return -error;
  }
  return fd;
}

// A reset instead of a FIN: ten thousand sockets in TIME_WAIT would otherwise linger for a minute.
void close_with_reset(int fd) {
  const linger abort_on_close{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
  close(fd);
}

// ---- One new client, timed: connect, one request, the whole answer -----------------------------------------

struct Probe {
  int status = 0;  // 0: no complete answer in time, -1: closed without an answer
  double ms = 0;
};

Probe probe(const Options& options, int timeout_ms) {
  const auto start = Clock::now();
  Probe result;
  const int fd = connect_nonblocking(options);
  if (fd < 0) return {-1, ms_since(start)};
  std::string received;
  std::size_t sent = 0;
  while (ms_since(start) < timeout_ms) {
    pollfd watch{fd, static_cast<short>(sent < kKeepAliveRequest.size() ? POLLOUT : POLLIN), 0};
    if (poll(&watch, 1, std::max(1, timeout_ms - static_cast<int>(ms_since(start)))) <= 0) continue;
    if (sent < kKeepAliveRequest.size()) {
      const ssize_t n = send(fd, kKeepAliveRequest.data() + sent, kKeepAliveRequest.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) { result.status = -1; break; }
      if (n > 0) sent += static_cast<std::size_t>(n);
      continue;
    }
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) received.append(buffer, static_cast<std::size_t>(n));
    result.status = complete_status(received);
    if (result.status != 0) break;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) { result.status = -1; break; }
  }
  result.ms = ms_since(start);
  // We close, with a reset: a server that closed first would keep a TIME_WAIT socket for a minute per probe, and
  // benchmark.sh waits for those to go before it reads the kernel's memory.
  close_with_reset(fd);
  return result;
}

// ---- The held connections ---------------------------------------------------------------------------------

constexpr int kSourcesPerHolder = 16;  // source addresses per holder process: 127.1.K.1 to 127.1.K.16

volatile std::sig_atomic_t g_release = 0;  // set by SIGTERM: release the connections (or stop opening them)

// The children's PIDs, for the parent's SIGTERM handler to pass the signal on (kill() is async-signal-safe):
// a parent still waiting for their first report must not wait for them to finish opening.
constexpr int kMaxChildren = 4096;
pid_t g_children[kMaxChildren];
volatile std::sig_atomic_t g_child_count = 0;

//   Connecting --connected--> Sending --request sent--> Reading --200--> Held --server closes it--> Dropped
//        |                       |                          |--other status--> Refused
//        +-----------------------+--error or EOF------------+--200 with Connection: close, or EOF--> Closed
// A connection still Connecting/Sending/Reading after --answer-ms is counted as blocked (and kept open).
enum class State { Connecting, Sending, Reading, Held, Refused, Closed, Dropped };

struct Conn {
  int fd = -1;
  State state = State::Connecting;
  std::size_t sent = 0;
  std::string received;
  Clock::time_point opened;
  bool settled = false;  // answered or declared blocked: no longer counts against the window
};

class Holder {
 public:
  Holder(const Options& options, int count, in_addr source)
      : options_(options), source_(source), conns_(static_cast<std::size_t>(count)) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
  }
  ~Holder() {
    for (Conn& conn : conns_)
      if (conn.fd >= 0) close_with_reset(conn.fd);
    close(epoll_);
  }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;

  // Opens every connection and waits until each is answered or declared blocked. False on a client-side
  // failure (its own descriptor limit), with the reason on stderr.
  bool open_all() {
    std::size_t next = 0;
    std::deque<std::size_t> waiting;  // opened and not settled, oldest first: their deadlines are in order
    while ((next < conns_.size() || !waiting.empty()) && g_release == 0) {
      // A server that has kept none of the last 2 x window connections has stopped taking them (at its limit),
      // or is only slow (63 worker processes and as many holders on 2 CPUs, a million connections opening): open
      // nothing for 5 x --answer-ms while a late answer may still come. Without one, it has stopped, and the rest
      // are not tried, which keeps a step far past the limit short.
      if (next < conns_.size() && not_held_in_a_row_ >= 2 * options_.window) {
        const Clock::time_point stalled = Clock::now();
        while (not_held_in_a_row_ > 0 && ms_since(stalled) < 5.0 * options_.answer_ms && g_release == 0)
          poll_events(20);
        if (not_held_in_a_row_ > 0) {
          untried_ = static_cast<long>(conns_.size() - next);
          conns_.resize(next);
        }
      }
      while (next < conns_.size() && in_flight_ < options_.window) {
        if (!open(next)) return false;
        waiting.push_back(next++);
      }
      poll_events(20);
      while (!waiting.empty()) {
        Conn& oldest = conns_[waiting.front()];
        if (!oldest.settled && ms_since(oldest.opened) < options_.answer_ms) break;
        settle(oldest);  // overdue: blocked, but kept open; a late answer still moves it to held/refused
        waiting.pop_front();
      }
    }
    return true;
  }

  // Handles whatever happened on the held connections: late answers, and servers closing connections.
  void poll_events(int timeout_ms) {
    epoll_event events[256];
    const int n = epoll_wait(epoll_, events, 256, timeout_ms);
    for (int i = 0; i < n; ++i) on_event(conns_[events[i].data.u32]);
  }

  long count(State state) const {
    return std::count_if(conns_.begin(), conns_.end(), [state](const Conn& c) { return c.state == state; });
  }
  long untried() const { return untried_; }
  long blocked() const {
    return count(State::Connecting) + count(State::Sending) + count(State::Reading);
  }

  void release_all() {
    for (Conn& conn : conns_)
      if (conn.fd >= 0) close_with_reset(std::exchange(conn.fd, -1));
  }

 private:
  bool open(std::size_t index) {
    Conn& conn = conns_[index];
    conn.opened = Clock::now();
    // Spread over kSourcesPerHolder addresses: connect() looks for a free port by trying them one by one, and
    // that search slows down as a source address's port range fills.
    const in_addr source{htonl(ntohl(source_.s_addr) + static_cast<std::uint32_t>(index % kSourcesPerHolder))};
    conn.fd = connect_nonblocking(options_, source);
    if (conn.fd == -EMFILE || conn.fd == -ENFILE) {
      std::fprintf(stderr, "idle_conns: ran out of descriptors after %zu connections\n", index);
      return false;
    }
    ++in_flight_;
    if (conn.fd < 0) {  // refused at once (ECONNREFUSED) or no local port left
      finish(conn, State::Closed);
      return true;
    }
    epoll_event event{};
    event.events = EPOLLOUT;
    event.data.u32 = static_cast<std::uint32_t>(index);
    epoll_ctl(epoll_, EPOLL_CTL_ADD, conn.fd, &event);
    return true;
  }

  void settle(Conn& conn) {
    if (!conn.settled) {
      --in_flight_;
      not_held_in_a_row_ = conn.state == State::Held ? 0 : not_held_in_a_row_ + 1;
    }
    conn.settled = true;
  }

  void finish(Conn& conn, State state) {
    conn.state = state;
    if (state == State::Held) not_held_in_a_row_ = 0;  // a late answer too: the server is slow, not stopped
    conn.received.clear();
    conn.received.shrink_to_fit();
    settle(conn);
    if (state != State::Held && conn.fd >= 0) {
      close(conn.fd);  // closing also removes it from the epoll set
      conn.fd = -1;
    }
  }

  void on_event(Conn& conn) {
    if (conn.state == State::Connecting) {
      int error = 0;
      socklen_t length = sizeof error;
      getsockopt(conn.fd, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) return finish(conn, State::Closed);
      conn.state = State::Sending;
    }
    if (conn.state == State::Sending) {
      const ssize_t n =
          send(conn.fd, kKeepAliveRequest.data() + conn.sent, kKeepAliveRequest.size() - conn.sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return finish(conn, State::Closed);
      if (n > 0) conn.sent += static_cast<std::size_t>(n);
      if (conn.sent < kKeepAliveRequest.size()) return;  // EPOLLOUT will bring us back
      conn.state = State::Reading;
      epoll_event event{};
      event.events = EPOLLIN | EPOLLRDHUP;
      event.data.u32 = static_cast<std::uint32_t>(&conn - conns_.data());
      epoll_ctl(epoll_, EPOLL_CTL_MOD, conn.fd, &event);
      return;
    }
    char buffer[4096];
    const ssize_t n = recv(conn.fd, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (conn.state == State::Held) {  // a held connection should stay silent until we release it
      return finish(conn, State::Dropped);
    }
    if (n > 0) conn.received.append(buffer, static_cast<std::size_t>(n));
    bool closing = false;
    const int status = complete_status(conn.received, &closing);
    if (status == 200) return finish(conn, closing ? State::Closed : State::Held);
    if (status != 0) return finish(conn, status > 0 ? State::Refused : State::Closed);
    if (n <= 0) return finish(conn, State::Closed);
  }

  const Options& options_;
  const in_addr source_;
  std::vector<Conn> conns_;
  int epoll_ = -1;
  int in_flight_ = 0;
  long not_held_in_a_row_ = 0;
  long untried_ = 0;
};

// Lifts the soft descriptor limit to the hard one and returns it.
long raise_fd_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur == RLIM_INFINITY ? 1L << 30 : static_cast<long>(limit.rlim_cur);
}

// How many ports connect() may choose from for one source address and destination.
long local_ports() {
  long low = 32768, high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low >> high;
  return high - low + 1;
}


// ---- The holder processes -------------------------------------------------------------------------------

// What one holder process reports to the parent, once when its connections are open and once after SIGTERM.
struct Counts {
  long held = 0, refused = 0, closed = 0, blocked = 0, dropped = 0, untried = 0;
};

// False when the parent is gone (MSG_NOSIGNAL: an EPIPE, not a SIGPIPE that would end us before the release).
bool report(int fd, const Holder& holder) {
  char line[160];
  const int length = std::snprintf(line, sizeof line, "%ld %ld %ld %ld %ld %ld\n", holder.count(State::Held),
                                   holder.count(State::Refused), holder.count(State::Closed), holder.blocked(),
                                   holder.count(State::Dropped), holder.untried());
  return send(fd, line, static_cast<std::size_t>(length), MSG_NOSIGNAL) == length;
}

// Blocks until the parent closes its end of the socket pair (or dies): the signal to release.
void wait_for_release(int fd) {
  for (char byte;;) {
    const ssize_t n = read(fd, &byte, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) return;
  }
}

// A child: opens `count` connections from `source`, reports, holds them until SIGTERM, reports again, and
// releases them once the parent closes its end of `report_fd` (a socket pair: the child writes its reports there,
// and reads EOF when the parent closes its end).
//
// The release waits for that, and not just for the second report, because of what happens at a server's limit:
// the moment one holder resets its connections, the server has descriptors again, accepts connections that
// waited in its accept queue for other holders, and answers them. A holder that had not yet reported would count
// those as held too, and the sum would be connections that were never open at once: 25,509 "held" by a server
// that had 20,000 descriptors. So every holder reports (a snapshot, all taken while nothing is released), and
// only then does any of them release.
[[noreturn]] void holder_process(const Options& options, int count, in_addr source, int report_fd) {
  g_child_count = 0;                 // the siblings started before it are not its to stop
  // The parent's ends of its elder siblings' pairs came with fork(): close them, they would take its descriptors
  // (and a sibling would never see its EOF while a copy of that end is open here).
  close_range(3, static_cast<unsigned>(report_fd) - 1, 0);
  close_range(static_cast<unsigned>(report_fd) + 1, ~0U, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // if the parent dies, release the connections too
  if (getppid() == 1) _exit(1);
  Holder holder(options, count, source);
  if (!holder.open_all()) _exit(1);
  holder.poll_events(200);  // let the server settle: late answers, and whatever it closes right away
  // A server still working through its accept queue answers late: wait while answers keep coming, so that the
  // count reported is final. One that answers nothing for 2 s (every thread busy, or at its limit) is done.
  auto progress = Clock::now();
  for (long pending = holder.blocked(); pending > 0 && ms_since(progress) < 2000 && g_release == 0;) {
    holder.poll_events(100);
    if (holder.blocked() < pending) pending = holder.blocked(), progress = Clock::now();
  }
  if (report(report_fd, holder)) {
    while (g_release == 0) holder.poll_events(1000);  // idle: wakes only if the server closes one
    if (report(report_fd, holder)) wait_for_release(report_fd);  // every holder's count first, then the resets
  }
  holder.release_all();
  _exit(0);
}

struct Child {
  pid_t pid = -1;
  FILE* reports = nullptr;  // the parent's end of its socket pair; closing it tells the holder to release
};

bool read_counts(FILE* reports, Counts& total) {
  Counts c;
  if (std::fscanf(reports, "%ld %ld %ld %ld %ld %ld", &c.held, &c.refused, &c.closed, &c.blocked, &c.dropped,
                  &c.untried) != 6)
    return false;
  total.held += c.held, total.refused += c.refused, total.closed += c.closed;
  total.blocked += c.blocked, total.dropped += c.dropped, total.untried += c.untried;
  return true;
}

// Starts the holder processes, at most `per_process` connections each, each from source addresses of its own.
std::vector<Child> start_holders(const Options& options, int per_process) {
  std::vector<Child> children;
  for (int first = 0, k = 0; first < options.connections; first += per_process, ++k) {
    const int count = std::min(per_process, options.connections - first);
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) break;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      holder_process(options, count, in_addr{htonl(0x7f010001u + (static_cast<std::uint32_t>(k) << 8))}, fds[1]);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      break;
    }
    children.push_back({pid, fdopen(fds[0], "r")});
    if (g_child_count < kMaxChildren) {
      g_children[g_child_count] = pid;
      g_child_count = g_child_count + 1;
    }
  }
  return children;
}

// Reads one report from every child into `total`; false when one failed (its reason is on stderr).
bool collect(const std::vector<Child>& children, Counts& total) {
  bool ok = true;
  for (const Child& child : children) ok = read_counts(child.reports, total) && ok;
  return ok;
}

void stop_holders(std::vector<Child>& children) {
  for (const Child& child : children) kill(child.pid, SIGTERM);
}

// Tells every holder to release (all at once: each resets its own connections), then waits for them all.
void reap(std::vector<Child>& children) {
  for (Child& child : children) fclose(child.reports);
  for (Child& child : children) waitpid(child.pid, nullptr, 0);
}

std::string ms_text(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", ms);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // Each holder keeps a few descriptors of its own (epoll, its socket pair, stdio) and, from its own source address,
  // uses one local port per connection.
  const long most = std::min(raise_fd_limit() - 32, kSourcesPerHolder * local_ports() - 64);
  const int per_process = static_cast<int>(options.per_process > 0 ? std::min<long>(options.per_process, most)
                                                                   : most);
  if (per_process < 1) {
    std::fputs("idle_conns: the descriptor limit leaves no room for connections (see `ulimit -n`)\n", stderr);
    return 1;
  }
  // No SA_RESTART: SIGTERM interrupts epoll_wait, so the release starts at once. The children inherit it.
  struct sigaction on_term {};
  on_term.sa_handler = [](int) {
    g_release = 1;
    for (int i = 0; i < g_child_count; ++i) kill(g_children[i], SIGTERM);  // none in a child
  };
  sigaction(SIGTERM, &on_term, nullptr);

  const Footprint before = footprint(options.pid);
  const auto start = Clock::now();
  std::vector<Child> children = start_holders(options, per_process);
  Counts opened;
  if (!collect(children, opened)) {
    std::fputs(g_release != 0 ? "idle_conns: stopped (SIGTERM) before the connections were all open\n"
                              : "idle_conns: a holder process failed\n", stderr);
    stop_holders(children);
    reap(children);
    return 1;
  }
  const double setup_s = ms_since(start) / 1000;
  const Footprint held = footprint(options.pid);

  // New clients while the connections are held, one after another: how long does a newcomer wait? A server
  // that answers none of the first three (at its limit, or busy with other connections) is not asked again.
  std::vector<double> answered_ms;
  int probe_refused = 0, probe_timeout = 0;
  for (int i = 0; i < options.probes && (i < 3 || !answered_ms.empty()); ++i) {
    const Probe p = probe(options, 2000);
    if (p.status == 200) answered_ms.push_back(p.ms);
    else if (p.status == 0) ++probe_timeout;
    else ++probe_refused;
  }
  std::sort(answered_ms.begin(), answered_ms.end());
  auto percentile = [&answered_ms](double q) -> std::string {
    if (answered_ms.empty()) return "n/a";
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(answered_ms.size())));
    return ms_text(answered_ms[std::max<std::size_t>(rank, 1) - 1]);
  };

  if (options.hold) {
    // probe: 200 when the new clients were answered, 0 when one got no answer in time, refused otherwise.
    const std::string first = options.probes == 0 ? "none"
                              : !answered_ms.empty() ? "200"
                              : probe_timeout > 0    ? "0"
                                                     : "refused";
    std::printf("holding held=%ld refused=%ld closed=%ld blocked=%ld untried=%ld setup_s=%.2f probe=%s "
                "processes=%zu\n", opened.held, opened.refused, opened.closed, opened.blocked, opened.untried,
                setup_s, first.c_str(), children.size());
    std::fflush(stdout);
    // SIGTERM stays blocked except inside sigsuspend, so it cannot slip in between the test and the wait.
    sigset_t term, waiting;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);
    sigdelset(&waiting, SIGTERM);
    while (g_release == 0) sigsuspend(&waiting);
  }

  // The children's second report: what changed while they were held (late answers, connections dropped).
  const bool server_alive = options.pid == 0 || alive(options.pid);
  stop_holders(children);
  Counts last;
  const bool reported = collect(children, last);
  reap(children);  // each released its connections with resets before it exited
  if (!reported) {
    std::fputs("idle_conns: a holder process did not report after the release\n", stderr);
    return 1;
  }

  // After the release, the server must serve again. 01 first works through its accept queue (up to somaxconn
  // connections whose request arrived before the reset, at ~1.1 ms each), hence the generous deadline.
  Probe after;
  const auto released = Clock::now();
  while (after.status != 200 && ms_since(released) < 15000) after = probe(options, 1000);

  auto per_conn = [&last](long delta) -> std::string {
    if (last.held == 0) return "n/a";
    return ms_text(static_cast<double>(delta) / static_cast<double>(last.held));
  };
  std::printf(
      "connections=%d held=%ld refused=%ld closed=%ld blocked=%ld untried=%ld dropped=%ld setup_s=%.2f processes=%zu "
      "rss_before_kib=%ld rss_held_kib=%ld threads_before=%ld threads_held=%ld fds_before=%ld fds_held=%ld "
      "rss_kib_per_conn=%s threads_per_conn=%s fds_per_conn=%s "
      "probes=%d probe_ok=%zu probe_refused=%d probe_timeout=%d probe_median_ms=%s probe_p99_ms=%s "
      "probe_max_ms=%s server_alive=%d after_status=%d after_ms=%.2f\n",
      options.connections, last.held, last.refused, last.closed, last.blocked, last.untried, last.dropped, setup_s,
      children.size(), before.rss_kib, held.rss_kib, before.threads, held.threads, before.fds, held.fds,
      per_conn(held.rss_kib - before.rss_kib).c_str(), per_conn(held.threads - before.threads).c_str(),
      per_conn(held.fds - before.fds).c_str(), options.probes, answered_ms.size(), probe_refused,
      probe_timeout, percentile(0.5).c_str(), percentile(0.99).c_str(), percentile(1.0).c_str(),
      server_alive ? 1 : 0, after.status, after.ms);
  return 0;
}
