// openloop: an open-loop HTTP load generator, whose latencies show a server's stalls instead of hiding them.
//
// ab and wrk are closed-loop: each of their clients waits for an answer before it sends its next request. When
// the server stalls, the clients stall with it and send nothing, so a stall shows as one slow answer per client,
// not as the thousands of requests that a steady stream of users would have sent meanwhile and that would all have
// waited. That is "coordinated omission" (Gil Tene): wrk2's README shows a 1.4 s pause turning a p99 of 5 ms into
// 1.27 s once latency is measured from when each request was meant to be sent. openloop keeps a schedule instead:
//
//   Schedule     request i is intended at t0 + i/R, for R x S requests in all (--rate R, --duration S).
//   Keep-alive   (the default) C connections (--connections, default 10), opened before t0. Connection k owns the
//                requests k, k+C, k+2C... (as wrk2 does) and sends its next one when it is due AND the answer to
//                its previous one has arrived: one request at a time on a connection, no pipelining. A server that
//                closes a connection (Connection: close, or EOF while it is idle) is no error: the connection is
//                opened again for its owner's next request. A request that the close catches on its way (EOF or a
//                reset before one byte of its answer, on a connection that has answered before) is sent again,
//                once, on a new connection, as browsers do.
//   --new-conn   each request opens its own connection at its intended time and asks `Connection: close` (as ab
//                does without -k). At most C connections are open at once: a request that finds them all busy
//                waits for one, in schedule order, and its latency still counts from its intended time.
//   Latency      every answer is timed twice, from two origins, to the moment its last byte is read:
//                  corrected    (p50_ms...) from its intended time: what a user who came on schedule waited;
//                  uncorrected  (u_p50_ms...) from when the request was written (with --new-conn, from its
//                               connect(), as ab times it): what a closed-loop tool reports.
//                The gap between the two is the stall that a closed-loop tool hides.
//   Lag          the generator's own lateness, for each request: from the moment it could have gone (it was due,
//                and its connection was free) to the moment it went. "Free" is when the previous answer arrived in
//                the kernel (SO_TIMESTAMPNS stamps it), so an answer that sat unread because this loop was busy is
//                our lateness, not the server's. What the lag cannot see is a request waiting for its connection:
//                at most C requests are out at once, so with too few connections for the rate (C < rate x latency),
//                or a generator too slow to turn answers into new requests, requests queue behind their
//                connections, and the corrected latency shows that as if the server were slow.
//   fell_behind  =1, with a warning on stderr, when either
//                  - the lag's 99th percentile is over 1 ms: more than 1 % of the requests left over 1 ms late
//                    through our own fault; or
//                  - the generator had no time to spare: it was on a CPU (gen_cpu_pct), or ready to run and
//                    waiting for one (gen_wait_pct: other programs had the core), for 95 % of the run or more,
//                    and the answers fell short of the rate by over 1 %: then it may be what held the rate back.
//                Then the latencies measure this generator as well as the server: lower the rate, or give the
//                generator a core of its own. Neither test sees delays in the kernel beneath us (packets that our
//                core, busy with something else, has not processed yet).
//
// Every request started (sent) ends as exactly one of:
//   completed    a whole answer arrived: status line, headers, and the body that Content-Length announced. Of
//                those, bad_status were not 200 (a 503 from a server shedding load, say), and bad_length were
//                200 with a body whose length was not --expect-length;
//   errors       the connect failed, the connection was reset or closed before the whole answer, or the answer
//                was not HTTP/1.x as we read it (a chunked body, say: our servers never send one);
//   timeouts     no whole answer within --timeout-ms of the write (or of the connect): that connection is closed.
// Both latencies are recorded for every completed answer, whatever its status.
//
// The run ends when every request has ended, and at the latest --timeout-ms after the schedule's end: what is
// still waiting then counts as a timeout, and what could not even be sent is the difference scheduled - sent. So it
// never hangs, whatever the server does.
//
// The histograms are log-linear, after HdrHistogram: values in nanoseconds, exact below 256 ns, then for each power
// of two 128 buckets of equal width, up to 2^38 ns (4.6 minutes). A bucket is at most 1/128 (0.8 %) of its values
// wide; a percentile is reported as its bucket's upper end (never understated); max and mean are exact. That is
// 4096 counters a histogram, and nothing stored per request, so any rate and duration take the same memory.
//
// One thread, one epoll set, non-blocking sockets; epoll_pwait2()'s nanosecond timeout wakes it for the next due
// request. Linux only (epoll_pwait2 needs Linux 5.11 and glibc 2.35).
// Output: one line of key=value pairs on stdout (latencies in ms), for scripts to parse; notes on stderr.
// Exit status: 0 when it ran (whatever it found), 1 when it could not run, 2 on a bad argument.
//
// Build: by CMake (target openloop), or alone: g++ -std=c++17 -O2 -Wall -Wextra -o openloop openloop.cpp
// Run:   ./openloop --port 8080 --rate 2000 --duration 10

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

// ---- Time: nanoseconds as plain integers ------------------------------------------------------------------

constexpr std::int64_t kNsPerSecond = 1'000'000'000;
constexpr std::int64_t kNsPerMs = 1'000'000;

std::int64_t to_ns(const timespec& t) { return t.tv_sec * kNsPerSecond + t.tv_nsec; }

std::int64_t clock_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);  // MONOTONIC and REALTIME go through the vDSO: no system call, some 20 ns
  return to_ns(t);
}

std::int64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }  // the schedule's clock: never jumps

// This thread's time so far on a CPU, and ready to run but waiting for one, in ns: the first two fields of
// /proc/thread-self/schedstat. Where the kernel does not keep them, the CPU time alone.
struct CpuTimes {
  std::int64_t on_cpu = 0;
  std::int64_t waiting = 0;
};

CpuTimes cpu_times() {
  CpuTimes times;
  if (std::FILE* file = std::fopen("/proc/thread-self/schedstat", "r")) {
    long long on_cpu = 0, waiting = 0;
    if (std::fscanf(file, "%lld %lld", &on_cpu, &waiting) == 2) times = {on_cpu, waiting};
    std::fclose(file);
  }
  if (times.on_cpu == 0) times.on_cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  return times;
}

// ---- Options ----------------------------------------------------------------------------------------------

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  double rate = 0;          // requests per second (--rate), over the whole schedule
  double duration_s = 0;    // the schedule's length (--duration)
  int connections = 10;     // keep-alive: the connections; --new-conn: the most open at once
  bool new_conn = false;    // a new connection per request
  std::string path = "/";
  int timeout_ms = 2000;    // a request with no whole answer by then is a timeout
  long expect_length = -1;  // the body length every answer should have; -1: any
};

const char* const kUsage =
    "usage: openloop --port N --rate R --duration S [--host ADDR] [--connections C] [--new-conn] [--path /]\n"
    "                [--timeout-ms MS] [--expect-length N]\n"
    "  --rate R           requests per second, on a fixed schedule (decimals allowed)\n"
    "  --duration S       seconds of schedule (decimals allowed): R x S requests in all\n"
    "  --host ADDR        numeric IPv4 address of the server (default 127.0.0.1)\n"
    "  --connections C    keep-alive connections, or with --new-conn the most open at once (default 10)\n"
    "  --new-conn         a new connection for every request (Connection: close), as ab without -k\n"
    "  --path /P          the path to GET (default /)\n"
    "  --timeout-ms MS    a request with no whole answer after MS ms is a timeout (default 2000)\n"
    "  --expect-length N  count 200 answers whose body is not N bytes long as bad_length\n";

// A path we can put in a request line as it is: starts with '/', printable ASCII without spaces.
bool valid_path(const std::string& path) {
  return !path.empty() && path[0] == '/' &&
         std::all_of(path.begin(), path.end(), [](char c) { return c > ' ' && c < 127; });
}

bool parse_options(int argc, char** argv, Options& options) {
  bool have_rate = false, have_duration = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--new-conn") {
      options.new_conn = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value, &end);
    const bool numeric = *value != '\0' && *end == '\0' && std::isfinite(number) && number >= 0 && number <= 1e9;
    const bool whole = numeric && number == std::floor(number);
    if (flag == "--host") options.host = value;
    else if (flag == "--path") options.path = value;
    else if (!numeric) return false;
    else if (flag == "--rate") options.rate = number, have_rate = true;
    else if (flag == "--duration") options.duration_s = number, have_duration = true;
    else if (!whole) return false;
    else if (flag == "--port") options.port = static_cast<int>(number);
    else if (flag == "--connections") options.connections = static_cast<int>(number);
    else if (flag == "--timeout-ms") options.timeout_ms = static_cast<int>(number);
    else if (flag == "--expect-length") options.expect_length = static_cast<long>(number);
    else return false;
  }
  in_addr address{};
  return have_rate && have_duration && options.port > 0 && options.port < 65536 && options.rate > 0 &&
         options.duration_s > 0 && std::llround(options.rate * options.duration_s) >= 1 &&
         options.connections >= 1 && options.timeout_ms >= 1 && valid_path(options.path) &&
         inet_pton(AF_INET, options.host.c_str(), &address) == 1;
}

// ---- A log-linear histogram of nanoseconds ----------------------------------------------------------------

class Histogram {
 public:
  Histogram() : counts_(kBuckets, 0) {}

  void record(std::int64_t ns) {
    const std::uint64_t value = ns < 0 ? 0 : static_cast<std::uint64_t>(ns);
    ++counts_[index(std::min(value, kLargest))];
    ++count_;
    sum_ += static_cast<double>(value);
    max_ = std::max(max_, value);
  }

  std::uint64_t count() const { return count_; }
  double mean_ns() const { return count_ == 0 ? 0 : sum_ / static_cast<double>(count_); }
  std::uint64_t max_ns() const { return max_; }

  // The value that `fraction` (0.99 for p99) of the recorded values do not exceed: the upper end of the bucket
  // where the running count reaches that fraction, but never more than the largest value recorded.
  std::uint64_t percentile_ns(double fraction) const {
    const auto wanted =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(fraction * static_cast<double>(count_))));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= wanted) return std::min(upper_end(i), max_);
    }
    return max_;
  }

 private:
  static constexpr int kSubBits = 7;                       // 2^7 = 128 buckets for each power of two
  static constexpr std::uint64_t kSub = 1u << kSubBits;
  static constexpr int kTopBit = 37;                       // the largest range is [2^37, 2^38) ns
  static constexpr std::uint64_t kLargest = (std::uint64_t{1} << (kTopBit + 1)) - 1;  // 4.6 minutes
  static constexpr std::size_t kBuckets = (kTopBit - kSubBits + 2) * kSub;           // 4096

  // Values below 2 x 128 have a bucket each. Above, a value in [2^top, 2^(top+1)) falls in one of that range's
  // 128 buckets, each 2^(top-7) wide: its top 8 bits (the leading 1 and the next 7) pick it.
  static std::size_t index(std::uint64_t value) {
    if (value < 2 * kSub) return static_cast<std::size_t>(value);
    const int top = 63 - __builtin_clzll(value);  // the highest bit that is set (g++ and clang built-in)
    const int shift = top - kSubBits;
    return static_cast<std::size_t>((shift + 1) * kSub + ((value >> shift) - kSub));
  }

  static std::uint64_t upper_end(std::size_t i) {  // the largest value that index() puts in bucket i
    if (i < 2 * kSub) return i;
    const auto shift = static_cast<int>(i / kSub) - 1;
    return ((i % kSub + kSub + 1) << shift) - 1;
  }

  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  double sum_ = 0;
  std::uint64_t max_ = 0;
};

// ---- HTTP: the head of a response -------------------------------------------------------------------------

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {  // header names and tokens ignore case
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

bool icontains(std::string_view text, std::string_view word) {  // "Connection: Keep-Alive, close" has "close"
  for (std::size_t i = 0; i + word.size() <= text.size(); ++i)
    if (iequals(text.substr(i, word.size()), word)) return true;
  return false;
}

struct ResponseHead {
  int status = 0;
  long long body_length = -1;  // -1: no Content-Length, the body ends when the server closes
  bool closes = false;         // the server closes the connection after this response
};

// Reads the head, "HTTP/1.1 200 OK\r\n" then "Name: value\r\n" lines up to the blank line (`head` includes the
// final "\r\n\r\n"). False when it is not a response we can frame: no HTTP/1.x status line, a Content-Length that
// is no number, or a Transfer-Encoding (chunked: our servers never send one).
bool parse_head(std::string_view head, ResponseHead& out) {
  out = ResponseHead{};
  if (head.size() < 16 || head.substr(0, 7) != "HTTP/1." || head[8] != ' ') return false;
  for (int i = 9; i < 12; ++i)
    if (!std::isdigit(static_cast<unsigned char>(head[i]))) return false;
  out.status = (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
  const bool http10 = head[7] == '0';
  bool keep_alive = false;
  std::size_t line = head.find('\n') + 1;
  while (line < head.size()) {
    const std::size_t eol = head.find('\n', line);  // always found: the head ends with "\r\n\r\n"
    std::string_view field = head.substr(line, eol - line);
    line = eol + 1;
    const std::size_t colon = field.find(':');
    if (colon == std::string_view::npos) continue;  // the blank line at the end
    const std::string_view name = field.substr(0, colon);
    std::string_view value = field.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ' || value.back() == '\t'))
      value.remove_suffix(1);
    if (iequals(name, "content-length")) {
      if (value.empty() || value.size() > 15) return false;
      long long length = 0;
      for (const char c : value) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
        length = length * 10 + (c - '0');
      }
      out.body_length = length;
    } else if (iequals(name, "connection")) {
      out.closes = out.closes || icontains(value, "close");
      keep_alive = keep_alive || icontains(value, "keep-alive");
    } else if (iequals(name, "transfer-encoding")) {
      return false;
    }
  }
  if (out.status / 100 == 1 || out.status == 204 || out.status == 304) out.body_length = 0;  // never a body
  if (http10 && !keep_alive) out.closes = true;  // HTTP/1.0 closes unless it says otherwise
  return true;
}

// ---- The connections ----------------------------------------------------------------------------------------

//   Idle --request due--> (no socket: Connecting --connected-->) Writing --all written--> Reading
//     ^                                                                                    |
//     `--- a whole answer (completed), or an error or a timeout (the socket is closed) ----'
// Idle may hold an open keep-alive socket or none: the next request opens one. Connecting and Writing wait for
// writability as well as input; Idle and Reading for input only (input on an Idle socket is the server closing it).
// Writing or Reading on a reused socket that the server closed before answering goes back to Connecting on a new
// socket, with the same request (resend()).
enum class Phase { kIdle, kConnecting, kWriting, kReading };

struct Conn {
  int fd = -1;
  std::uint32_t generation = 0;  // counts its sockets: an event for an earlier one is recognised and dropped
  Phase phase = Phase::kIdle;
  std::int64_t slot = -1;        // the request in progress (its place in the schedule); -1: none
  std::int64_t next_slot = 0;    // keep-alive: the next request that this connection owns
  std::int64_t free_since = 0;   // when it last became free to send: the generator's lag counts from there
  std::int64_t origin = 0;       // the uncorrected latency's origin: the write, or with --new-conn the connect
  std::int64_t deadline = 0;     // a whole answer by then, or a timeout
  std::size_t written = 0;       // how much of the request has been written
  bool reused = false;           // this socket has carried a whole answer already (keep-alive)
  // The answer being read. `head` keeps its capacity from one answer to the next: no allocation per request.
  std::string head;              // the bytes received until the blank line that ends the head
  bool head_done = false;
  ResponseHead response;
  long long body_left = 0;       // body bytes still to come; -1: until the server closes
  long long body_received = 0;
};

enum class Outcome { kError, kTimeout };

class Generator {
 public:
  explicit Generator(const Options& options)
      : options_(options),
        total_(std::llround(options.rate * options.duration_s)),
        period_ns_(1e9 / options.rate),
        timeout_ns_(options.timeout_ms * kNsPerMs),
        conns_(static_cast<std::size_t>(options.connections)),
        buffer_(64 * 1024) {
    request_ = "GET " + options.path + " HTTP/1.1\r\nHost: " + options.host + ":" + std::to_string(options.port) +
               "\r\n" + (options.new_conn ? "Connection: close\r\n" : "") + "\r\n";
    address_.sin_family = AF_INET;
    address_.sin_port = htons(static_cast<std::uint16_t>(options.port));
    inet_pton(AF_INET, options.host.c_str(), &address_.sin_addr);
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      conns_[i].next_slot = static_cast<std::int64_t>(i);  // keep-alive: connection k owns k, k+C, k+2C...
      if (options.new_conn) pool_.push_back(i);
    }
  }
  ~Generator() {
    for (Conn& conn : conns_)
      if (conn.fd >= 0) close(conn.fd);
    if (epoll_ >= 0) close(epoll_);
  }
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  bool ready() const { return epoll_ >= 0; }

  // Keep-alive: opens the C connections before the clock starts, so that the first requests do not pay for a
  // handshake, and waits (at most --timeout-ms) until each is connected or has failed. A connection that failed is
  // tried again for its first request, where the failure counts. Returns how many are open.
  int connect_all() {
    const std::int64_t deadline = now_ns() + timeout_ns_;
    for (Conn& conn : conns_) open_socket(conn, deadline);
    epoll_event events[kMaxEvents];
    auto connecting = [this] {
      return std::any_of(conns_.begin(), conns_.end(), [](const Conn& c) { return c.phase == Phase::kConnecting; });
    };
    for (std::int64_t now = now_ns(); connecting() && now < deadline; now = now_ns()) {
      const timespec timeout{0, std::min<std::int64_t>(deadline - now, kNsPerSecond - 1)};
      const int n = epoll_pwait2(epoll_, events, kMaxEvents, &timeout, nullptr);
      for (int i = 0; i < n; ++i) on_event(events[i]);
    }
    int open = 0;
    for (Conn& conn : conns_) {
      if (conn.phase == Phase::kConnecting) drop_socket(conn);  // no answer to the handshake in time
      if (conn.fd >= 0) ++open;
    }
    return open;
  }

  // The schedule, from now (t0) until every request has ended or the deadline has passed.
  void run() {
    cpu_start_ = cpu_times();
    t0_ = now_ns();
    const std::int64_t hard_end = intended(total_) + timeout_ns_;  // the schedule's end, plus one timeout
    for (Conn& conn : conns_) conn.free_since = t0_;
    std::int64_t next_check = t0_ + kCheckEveryNs;
    epoll_event events[kMaxEvents];
    for (;;) {
      const std::int64_t now = now_ns();
      start_due(now);
      if (now >= next_check) {  // timeouts are checked every 10 ms: precise enough for a limit of seconds
        expire(now, false);
        next_check = now + kCheckEveryNs;
      }
      if (sent_ == total_ && busy_ == 0) break;  // every request has ended
      if (now >= hard_end) {
        expire(now, true);  // everything still waiting is a timeout now
        break;
      }
      // Sleep until the next request is due, the next timeout check, or the end, unless an answer comes first.
      const std::int64_t wake = std::min({next_due(), next_check, hard_end});
      const std::int64_t wait = std::max<std::int64_t>(0, wake - now);
      const timespec timeout{static_cast<time_t>(wait / kNsPerSecond), static_cast<long>(wait % kNsPerSecond)};
      const int n = epoll_pwait2(epoll_, events, kMaxEvents, &timeout, nullptr);
      for (int i = 0; i < n; ++i) {
        Conn* conn = on_event(events[i]);
        if (conn != nullptr && !options_.new_conn) serve(*conn, now_ns());  // its next request may be due
      }
    }
    end_ = now_ns();
    cpu_end_ = cpu_times();
  }

  void report() const {
    auto ms = [](auto ns) { return static_cast<double>(ns) / static_cast<double>(kNsPerMs); };
    const double lag_p99_ms = ms(lag_.percentile_ns(0.99));
    // Answers per second over the schedule's duration, or over the time it took if answers came after it.
    const double span_s = std::max(options_.duration_s, static_cast<double>(last_answer_ - t0_) / 1e9);
    const double achieved_rps = static_cast<double>(completed_) / span_s;
    auto share_pct = [this](std::int64_t ns) {  // of the run's time
      return 100.0 * static_cast<double>(ns) / static_cast<double>(std::max<std::int64_t>(1, end_ - t0_));
    };
    const double cpu_pct = share_pct(cpu_end_.on_cpu - cpu_start_.on_cpu);
    const double wait_pct = share_pct(cpu_end_.waiting - cpu_start_.waiting);
    // The rule (see the header): late through our own fault, or no time to spare and the rate not reached.
    const bool late = lag_p99_ms > kMaxLagP99Ms;
    const bool saturated = cpu_pct + wait_pct >= kBusyPct && achieved_rps < 0.99 * options_.rate;
    std::string line;
    char text[512];
    std::snprintf(text, sizeof text,
                  "mode=%s rate=%.10g duration_s=%.10g connections=%d scheduled=%lld sent=%lld completed=%lld "
                  "errors=%lld timeouts=%lld bad_status=%lld bad_length=%lld achieved_rps=%.1f",
                  options_.new_conn ? "new-conn" : "keep-alive", options_.rate, options_.duration_s,
                  options_.connections, static_cast<long long>(total_), static_cast<long long>(sent_),
                  completed_, errors_, timeouts_, bad_status_, bad_length_, achieved_rps);
    line += text;
    // The two latencies, as p50, p90, p99, p99.9, max and mean; "n/a" when not one answer came.
    for (const auto& [prefix, histogram] : {std::pair{"", &corrected_}, std::pair{"u_", &uncorrected_}}) {
      if (histogram->count() == 0) {
        for (const char* key : {"p50", "p90", "p99", "p999", "max", "mean"})
          line += std::string(" ") + prefix + key + "_ms=n/a";
        continue;
      }
      std::snprintf(text, sizeof text, " %sp50_ms=%.3f %sp90_ms=%.3f %sp99_ms=%.3f %sp999_ms=%.3f %smax_ms=%.3f "
                    "%smean_ms=%.3f", prefix, ms(histogram->percentile_ns(0.5)), prefix,
                    ms(histogram->percentile_ns(0.9)), prefix, ms(histogram->percentile_ns(0.99)), prefix,
                    ms(histogram->percentile_ns(0.999)), prefix, ms(histogram->max_ns()), prefix,
                    ms(histogram->mean_ns()));
      line += text;
    }
    std::snprintf(text, sizeof text,
                  " gen_cpu_pct=%.0f gen_wait_pct=%.0f gen_lag_p99_ms=%.3f gen_lag_max_ms=%.3f fell_behind=%d",
                  cpu_pct, wait_pct, lag_p99_ms, ms(lag_.max_ns()), late || saturated ? 1 : 0);
    line += text;
    std::printf("%s\n", line.c_str());

    if (late)
      std::fprintf(stderr, "openloop: warning: the generator fell behind: 1 %% of its requests left more than %.3f ms "
                   "after they could have (the limit is %.0f ms), so the latencies include its own delays\n",
                   lag_p99_ms, kMaxLagP99Ms);
    if (saturated)
      std::fprintf(stderr, "openloop: warning: the generator may have held the rate back: it was on a CPU %.0f %% of "
                   "the time and waited for one %.0f %%, and the answers came at %.0f a second of the %.10g asked "
                   "for\n", cpu_pct, wait_pct, achieved_rps, options_.rate);
    if (errors_ > 0)
      std::fprintf(stderr, "openloop: %lld requests failed; the last error: %s\n", errors_, last_error_.c_str());
    if (sent_ < total_)
      std::fprintf(stderr, "openloop: %lld of the %lld requests could not be sent before the end (%.1f s)\n",
                   static_cast<long long>(total_ - sent_), static_cast<long long>(total_),
                   static_cast<double>(end_ - t0_) / 1e9);
  }

 private:
  static constexpr int kMaxEvents = 256;
  static constexpr std::int64_t kCheckEveryNs = 10 * kNsPerMs;
  static constexpr std::int64_t kNever = INT64_MAX;
  static constexpr double kMaxLagP99Ms = 1.0;   // fell_behind when the lag's p99 is over this,
  static constexpr double kBusyPct = 95;         // or when on (or waiting for) a CPU this much, and the rate missed

  std::int64_t intended(std::int64_t slot) const {  // request `slot`'s place in the schedule
    return t0_ + static_cast<std::int64_t>(static_cast<double>(slot) * period_ns_);
  }

  // ---- Starting requests when they are due ----

  // Starts every request that is due and has a free connection.
  void start_due(std::int64_t now) {
    if (options_.new_conn) {
      // In schedule order, each on a free connection: the one free the longest, so that the lag counts from the
      // first moment one was free.
      while (next_slot_ < total_ && intended(next_slot_) <= now && !pool_.empty()) {
        const std::size_t index = pool_.front();
        pool_.pop_front();
        start(conns_[index], next_slot_++);
      }
      return;
    }
    // Keep-alive: each request that has fallen due since the last turn, if its connection is free. A busy one
    // sends it when its answer arrives (serve() after each event).
    while (frontier_ < total_ && intended(frontier_) <= now) serve(conns_[frontier_++ % conns_.size()], now);
  }

  // Keep-alive: sends the connection's next request if it is free and the request is due. A loop, because a
  // connect that fails at once (refused) frees the connection again for the next one, if that is due too.
  void serve(Conn& conn, std::int64_t now) {
    while (conn.phase == Phase::kIdle && conn.next_slot < total_ && intended(conn.next_slot) <= now) {
      const std::int64_t slot = conn.next_slot;
      conn.next_slot += static_cast<std::int64_t>(conns_.size());
      start(conn, slot);
    }
  }

  std::int64_t next_due() const {  // when a request will be due that a free connection could start
    if (options_.new_conn) return next_slot_ < total_ && !pool_.empty() ? intended(next_slot_) : kNever;
    return frontier_ < total_ ? intended(frontier_) : kNever;
  }

  void start(Conn& conn, std::int64_t slot) {
    const std::int64_t now = now_ns();  // the moment it goes (the caller's `now` may be a few sends old)
    ++sent_;
    ++busy_;
    lag_.record(now - std::max(intended(slot), conn.free_since));
    conn.slot = slot;
    conn.written = 0;
    if (conn.fd >= 0) return write_request(conn, now);  // keep-alive, on its open connection
    if (options_.new_conn) conn.origin = now;            // ab's clock starts at the connect too
    if (!open_socket(conn, now + timeout_ns_)) fail(conn, Outcome::kError, now);
  }

  // ---- Sockets ----

  // A non-blocking socket, connecting (Phase::kConnecting, watched for writability). False if it failed at once.
  bool open_socket(Conn& conn, std::int64_t deadline) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return note_error(errno);
    const int on = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // each request is one write: send it at once
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);  // stamp what arrives (see arrival_time())
    if (connect(fd, reinterpret_cast<const sockaddr*>(&address_), sizeof address_) < 0 && errno != EINPROGRESS) {
      const int error = errno;
      close(fd);
      return note_error(error);
    }
    conn.fd = fd;
    conn.reused = false;
    ++conn.generation;
    conn.phase = Phase::kConnecting;
    conn.deadline = deadline;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT;
    event.data.u64 = tag(conn);
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event);
    return true;
  }

  std::uint64_t tag(const Conn& conn) const {  // the epoll cookie: which connection, and which of its sockets
    return static_cast<std::uint64_t>(conn.generation) << 32 | static_cast<std::uint64_t>(&conn - conns_.data());
  }

  void set_phase(Conn& conn, Phase phase) {  // and watch for writability only in the phases that write
    auto writes = [](Phase p) { return p == Phase::kConnecting || p == Phase::kWriting; };
    if (conn.fd >= 0 && writes(conn.phase) != writes(phase)) {
      epoll_event event{};
      event.events = EPOLLIN | (writes(phase) ? EPOLLOUT : 0u);
      event.data.u64 = tag(conn);
      epoll_ctl(epoll_, EPOLL_CTL_MOD, conn.fd, &event);
    }
    conn.phase = phase;
  }

  void drop_socket(Conn& conn) {  // closing also takes it out of the epoll set
    if (conn.fd >= 0) close(conn.fd);
    conn.fd = -1;
    conn.phase = Phase::kIdle;
  }

  bool note_error(int error) {  // keeps the error for the note at the end; false, for `return note_error(e);`
    last_error_ = std::strerror(error);
    return false;
  }

  // ---- Events ----

  // Handles one event; returns its connection, or nullptr for an event about a socket closed since.
  Conn* on_event(const epoll_event& event) {
    Conn& conn = conns_[event.data.u64 & 0xffffffffu];
    if (conn.fd < 0 || conn.generation != event.data.u64 >> 32) return nullptr;
    const std::int64_t now = now_ns();
    switch (conn.phase) {
      case Phase::kConnecting:
        if ((event.events & (EPOLLERR | EPOLLHUP)) != 0) {  // refused, or reset during the handshake
          int error = 0;
          socklen_t length = sizeof error;
          getsockopt(conn.fd, SOL_SOCKET, SO_ERROR, &error, &length);
          note_error(error != 0 ? error : ECONNRESET);
          fail(conn, Outcome::kError, now);
        } else if (conn.slot < 0) {
          set_phase(conn, Phase::kIdle);  // opened ahead of the schedule (connect_all): ready
        } else {
          write_request(conn, now);
        }
        break;
      case Phase::kWriting:
        write_request(conn, now);
        break;
      case Phase::kReading:
        read_response(conn);
        break;
      case Phase::kIdle:  // the server closed a connection we were not using (or sent what we did not ask for)
        drop_socket(conn);  // not an error: the next request opens a new one
        break;
    }
    return &conn;
  }

  void write_request(Conn& conn, std::int64_t now) {
    if (conn.written == 0) {
      if (!options_.new_conn) conn.origin = now;  // the uncorrected latency counts from here
      conn.deadline = now + timeout_ns_;
    }
    const ssize_t n = send(conn.fd, request_.data() + conn.written, request_.size() - conn.written, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      if (resend(conn, now)) return;
      note_error(errno);
      return fail(conn, Outcome::kError, now);
    }
    if (n > 0) conn.written += static_cast<std::size_t>(n);
    if (conn.written < request_.size()) return set_phase(conn, Phase::kWriting);  // the rest when it is writable
    conn.head.clear();
    conn.head_done = false;
    conn.body_received = 0;
    set_phase(conn, Phase::kReading);
  }

  // When the bytes just read reached our socket. The kernel stamped them (SO_TIMESTAMPNS) on the real-time clock,
  // which we read just after the monotonic one (`now`, `real_now`): how long ago that was, counted back on the
  // monotonic clock. A stamp from before the request was written cannot be about its answer: then, as without a
  // stamp, we count from now.
  std::int64_t arrival_time(msghdr& message, const Conn& conn, std::int64_t now, std::int64_t real_now) const {
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
      timespec stamp{};
      std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
      const std::int64_t waited = real_now - to_ns(stamp);
      if (waited >= 0 && waited <= now - conn.origin) return now - waited;
    }
    return now;
  }

  void read_response(Conn& conn) {
    iovec space{buffer_.data(), buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    msghdr message{};
    message.msg_iov = &space;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(conn.fd, &message, 0);
    const std::int64_t now = now_ns(), real_now = clock_ns(CLOCK_REALTIME);  // the bytes are ours from here on
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n < 0) {  // a reset, typically
      if (resend(conn, now)) return;
      note_error(errno);
      return fail(conn, Outcome::kError, now);
    }
    if (n == 0) {  // the server closed: the end of a body without Content-Length, or of everything
      if (conn.head_done && conn.body_left < 0) return complete(conn, now, now);
      if (resend(conn, now)) return;
      last_error_ = "the server closed the connection before the whole answer";
      return fail(conn, Outcome::kError, now);
    }
    std::size_t body = static_cast<std::size_t>(n);  // how many of these bytes are body
    if (!conn.head_done) {
      // Gather the head until its blank line. Usually the whole answer comes in one read, body and all.
      const std::size_t before = conn.head.size();
      conn.head.append(buffer_.data(), body);
      const std::size_t end = conn.head.find("\r\n\r\n", before < 3 ? 0 : before - 3);
      if (end == std::string::npos) {
        if (conn.head.size() <= kMaxHead) return;  // the rest of the head is still to come
        last_error_ = "an answer whose head is over 64 KiB";
        return fail(conn, Outcome::kError, now);
      }
      if (!parse_head(std::string_view(conn.head).substr(0, end + 4), conn.response)) {
        last_error_ = "an answer that is not HTTP/1.x with a Content-Length: " + conn.head.substr(0, 40);
        return fail(conn, Outcome::kError, now);
      }
      conn.head_done = true;
      conn.body_left = conn.response.body_length;
      body = conn.head.size() - (end + 4);  // what came after the head
    }
    conn.body_received += static_cast<long long>(body);
    if (conn.body_left < 0) return;  // until the server closes
    if (static_cast<long long>(body) > conn.body_left) {
      last_error_ = "more bytes than the answer's Content-Length (we asked for one answer only)";
      return fail(conn, Outcome::kError, now);
    }
    conn.body_left -= static_cast<long long>(body);
    if (conn.body_left == 0) complete(conn, now, arrival_time(message, conn, now, real_now));
  }

  // A keep-alive connection that the server closed just as we reused it: EOF or a reset before one byte of the
  // answer (it closed an idle connection as our request went out, or after the answer that came before without
  // saying `Connection: close`). The request is sent again, once, on a new connection, as browsers do; it is not
  // an error, and it keeps its intended time. True when it went that way.
  bool resend(Conn& conn, std::int64_t now) {
    const bool nothing_received = conn.phase == Phase::kWriting || conn.head.empty();
    if (!conn.reused || !nothing_received) return false;
    drop_socket(conn);
    conn.written = 0;
    if (!open_socket(conn, now + timeout_ns_)) fail(conn, Outcome::kError, now);
    return true;
  }

  // ---- The end of a request ----

  void complete(Conn& conn, std::int64_t now, std::int64_t arrived) {
    corrected_.record(now - intended(conn.slot));
    uncorrected_.record(now - conn.origin);
    ++completed_;
    if (conn.response.status != 200) ++bad_status_;
    else if (options_.expect_length >= 0 && conn.body_received != options_.expect_length) ++bad_length_;
    last_answer_ = now;
    if (options_.new_conn || conn.response.closes || conn.response.body_length < 0) drop_socket(conn);
    else conn.reused = true;  // kept for the next request
    finish(conn, arrived);
  }

  void fail(Conn& conn, Outcome outcome, std::int64_t now) {
    drop_socket(conn);
    if (conn.slot < 0) return;  // opened ahead of the schedule (connect_all): nothing was asked yet
    ++(outcome == Outcome::kError ? errors_ : timeouts_);
    finish(conn, now);
  }

  void finish(Conn& conn, std::int64_t free_since) {  // the connection is free for the next request
    --busy_;
    conn.slot = -1;
    conn.free_since = free_since;
    set_phase(conn, Phase::kIdle);
    if (options_.new_conn) pool_.push_back(static_cast<std::size_t>(&conn - conns_.data()));
  }

  // Times out every request whose deadline has passed; at the end of the run, every request still waiting.
  void expire(std::int64_t now, bool at_end) {
    for (Conn& conn : conns_) {
      if (conn.phase == Phase::kIdle || (!at_end && conn.deadline > now)) continue;
      fail(conn, Outcome::kTimeout, now);
      if (!options_.new_conn && !at_end) serve(conn, now);  // a new connection for its next request, if due
    }
  }

  static constexpr std::size_t kMaxHead = 64 * 1024;

  const Options& options_;
  const std::int64_t total_;       // requests in the schedule: rate x duration
  const double period_ns_;         // 1/rate
  const std::int64_t timeout_ns_;
  std::string request_;
  sockaddr_in address_{};
  int epoll_ = -1;
  std::vector<Conn> conns_;
  std::deque<std::size_t> pool_;   // --new-conn: the free connections, the longest free first
  std::vector<char> buffer_;       // one receive buffer for all connections: we read one at a time
  std::int64_t t0_ = 0, end_ = 0, last_answer_ = 0;
  CpuTimes cpu_start_, cpu_end_;   // at t0 and at the end
  std::int64_t frontier_ = 0;      // keep-alive: the first request not yet due at the last turn
  std::int64_t next_slot_ = 0;     // --new-conn: the next request to start
  std::int64_t sent_ = 0;          // requests started
  int busy_ = 0;                   // requests started and not yet ended
  long long completed_ = 0, errors_ = 0, timeouts_ = 0, bad_status_ = 0, bad_length_ = 0;
  std::string last_error_ = "none";
  Histogram corrected_, uncorrected_, lag_;
};

// Lifts the soft descriptor limit to the hard one; false when even that is too small for `needed`.
bool raise_fd_limit(long needed) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur != RLIM_INFINITY && static_cast<long>(limit.rlim_cur) < needed) {
    std::fprintf(stderr, "openloop: %ld connections need %ld descriptors, but the hard limit is %ld "
                 "(raise it with `ulimit -Hn`)\n", needed - 32, needed, static_cast<long>(limit.rlim_cur));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (!raise_fd_limit(options.connections + 32L)) return 1;
  // epoll_pwait2() may return as late as the thread's timer slack (50 us by default) after its timeout, so that the
  // kernel can batch wake-ups: 1 ns keeps the sends on schedule.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

  Generator generator(options);
  if (!generator.ready()) {
    std::fprintf(stderr, "openloop: cannot create an epoll instance: %s\n", std::strerror(errno));
    return 1;
  }
  if (!options.new_conn && generator.connect_all() == 0)
    std::fprintf(stderr, "openloop: none of the %d connections to %s:%d could be opened; going on, each request "
                 "will try again\n", options.connections, options.host.c_str(), options.port);
  generator.run();
  generator.report();
  return 0;
}
