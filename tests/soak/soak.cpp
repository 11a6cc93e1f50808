// soak: drive one server with a long mix of well-formed, malformed and broken connections, then check that it
// came back to where it started.
//
//   soak --server PATH [--requests N] [--connections C] [--seed S] [--delay-us D] [--rss-slack-kib K]
//
//   1. starts PATH --port 0 --delay-us D (default 0), reads its listening line
//   2. warm-up: the same mix for min(N/20, 5000) requests; then the server is idle: its descriptor count is the
//      baseline, its RSS the starting level (allocator arenas, thread stacks and the like are warm by then)
//   3. the run: C connections at once (default 64), each running scenarios one after another until N requests
//      have been sent:
//        keep-alive   1-20 requests on one connection, one at a time, some HEAD, the last with Connection: close
//        close        one request with Connection: close
//        http10       one HTTP/1.0 request without keep-alive
//        pipelined    2-16 requests in one send(), the last with Connection: close
//        malformed    one bad request: the exact error status, Connection: close, then the close
//        reset        RST after connect, mid-head, right after a whole request, or after part of the answers
//   4. then: descriptors back to the baseline (polled for up to 10 s), RSS within the slack of the starting
//      level (default 2 MiB), GET and HEAD still answered exactly, and SIGTERM exits 0
//   5. prints one summary line; exit 0 when every check passed and not one well-formed request failed, 1 if not,
//      2 on a bad option
//
// A well-formed request fails when it does not get a complete, correct 200 (or the server closes before
// answering without having announced the close). The server may announce `Connection: close` on any response
// (04 does when others wait): the scenario then goes on, with the requests not yet answered, on a new connection.
//
// Build: g++ -std=c++17 -O2 -pthread -I.. -I../.. -o soak soak.cpp   (from tests/soak; CMake does it too)

#include <poll.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/server_process.hpp"

namespace {

using namespace psp::test;
using namespace std::chrono_literals;

struct Config {
  std::string server;
  long long requests = 1'000'000;
  int connections = 64;
  unsigned seed = 1;
  long delay_us = 0;
  long rss_slack_kib = 2048;
};

struct Counters {
  long long sent = 0;            // requests started (each reset and each malformed request counts as one)
  long long ok = 0;              // well-formed requests answered with a correct 200
  long long failed = 0;          // well-formed requests that did not get one
  long long malformed = 0;       // malformed requests answered as expected
  long long malformed_bad = 0;   // ... answered otherwise
  long long resets = 0;          // connections we reset
  long long reconnects = 0;      // the server announced a close with requests left: they went on a new connection
  std::vector<std::string> first_failures;

  void fail(std::string what) {
    ++failed;
    if (first_failures.size() < 5) first_failures.push_back(std::move(what));
  }
};

struct BadSample {
  std::string bytes;
  int status;
};

const std::vector<BadSample>& bad_samples() {
  static const std::vector<BadSample> samples = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},
      {"PUT / HTTP/1.1\r\nHost: h\r\n\r\n", 405},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nHost: h\r\nX : y\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nX-Fill: " + std::string(8500, 'a') + "\r\n\r\n", 431},
  };
  return samples;
}

// What one response must be.
struct Expect {
  bool head = false;
  bool close = false;    // we asked for the close (Connection: close or HTTP/1.0)
  std::string request;   // to resend it on a new connection if the server closes before answering it
};

// One connection slot: runs scenarios one after another.
class Slot {
 public:
  enum class Kind { keep_alive, close, http10, pipelined, malformed, reset };

  Slot(std::uint16_t port, Counters& counters, std::mt19937& rng) : port_(port), n_(counters), rng_(rng) {}

  bool busy() const { return busy_; }
  int fd() const { return c_.is_open() ? c_.fd() : -1; }
  Deadline last_progress() const { return progress_; }
  std::string describe() const { return scenario_ + ": " + Client::preview(c_.buffered()); }

  // Starts a new scenario; returns false when the slot is idle afterwards (resets finish at once).
  void start() {
    busy_ = true;
    progress_ = Clock::now();
    const int dice = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (dice < 30) run_keep_alive(std::uniform_int_distribution<int>(1, 20)(rng_));
    else if (dice < 45) run_requests({make("GET", false, true)}, "close");
    else if (dice < 50) run_requests({make_http10()}, "http10");
    else if (dice < 70) run_pipelined(std::uniform_int_distribution<int>(2, 16)(rng_));
    else if (dice < 80) run_malformed();
    else run_reset();
  }

  // The socket is readable.
  void on_readable() {
    progress_ = Clock::now();
    if (mode_ == Mode::reset_on_data) {
      c_.reset();
      return finish();
    }
    const bool open = c_.read_available();
    for (;;) {
      if (mode_ == Mode::requests) {
        if (expects_.empty()) break;
        HttpResponse r;
        std::string err;
        const Expect& e = expects_.front();
        const Parse p = c_.take_response(e.head, r, err);
        if (p == Parse::need_more) break;
        if (p == Parse::malformed) return fail_all("malformed response: " + err);
        check_ok(r, e);
        expects_.pop_front();
        const bool server_closes = lower(r.header("Connection").value_or("")) == "close";
        if (server_closes) {
          if (!c_.buffered().empty()) return fail_all("bytes after a response with Connection: close");
          if (!expects_.empty() || !queued_.empty()) return reconnect_and_resend();
          mode_ = Mode::await_close;
          break;
        }
        if (expects_.empty() && queued_.empty()) return finish();  // cannot happen: our last request says close
        if (expects_.empty()) send_next();
      } else if (mode_ == Mode::error_response) {
        HttpResponse r;
        std::string err;
        const Parse p = c_.take_response(false, r, err);
        if (p == Parse::need_more) break;
        if (p == Parse::malformed || r.status != bad_status_ ||
            lower(r.header("Connection").value_or("")) != "close") {
          ++n_.malformed_bad;
          if (n_.first_failures.size() < 5)
            n_.first_failures.push_back("malformed request answered " + r.status_line + " " + err + ", want " +
                                        std::to_string(bad_status_));
          return finish();
        }
        ++n_.malformed;
        mode_ = Mode::await_close;
      } else if (mode_ == Mode::await_close) {
        if (!c_.buffered().empty()) {
          n_.fail(scenario_ + ": bytes after the last response: " + Client::preview(c_.buffered()));
          return finish();
        }
        break;
      } else {
        break;
      }
    }
    if (!open) on_closed();
  }

  // No progress for too long.
  void on_stuck() {
    if (mode_ == Mode::reset_on_data) finish();
    else if (mode_ == Mode::requests) fail_all("no response within 10 s");
    else if (mode_ == Mode::error_response) { ++n_.malformed_bad; finish(); }
    else { n_.fail(scenario_ + ": the server did not close within 10 s after Connection: close"); finish(); }
  }

 private:
  enum class Mode { requests, error_response, await_close, reset_on_data };

  Expect make(const char* method, bool head, bool close) {
    Expect e;
    e.head = head;
    e.close = close;
    e.request = std::string(method) + " /soak/" + std::to_string(n_.sent) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                (close ? "Connection: close\r\n" : "") + "\r\n";
    ++n_.sent;
    return e;
  }
  Expect make_http10() {
    Expect e;
    e.close = true;
    e.request = "GET /soak10/" + std::to_string(n_.sent) + " HTTP/1.0\r\n\r\n";
    ++n_.sent;
    return e;
  }

  bool connect_new() {
    c_ = Client::connect_to(port_, deadline_in(5s));
    if (!c_.ok()) return false;
    return true;
  }

  void run_keep_alive(int count) {
    std::vector<Expect> all;
    for (int i = 0; i < count; ++i) {
      const bool head = std::uniform_int_distribution<int>(0, 9)(rng_) == 0;
      all.push_back(make(head ? "HEAD" : "GET", head, i == count - 1));
    }
    run_requests(std::move(all), "keep-alive");
  }

  // One at a time: the next request goes when the previous answer is in.
  void run_requests(std::vector<Expect> all, const char* name) {
    scenario_ = name;
    pipelined_ = false;
    queued_.assign(all.begin(), all.end());
    if (!connect_new()) return fail_queued("connect: " + c_.error());
    mode_ = Mode::requests;
    send_next();
  }

  void run_pipelined(int count) {
    scenario_ = "pipelined";
    pipelined_ = true;
    queued_.clear();
    for (int i = 0; i < count; ++i) queued_.push_back(make("GET", false, i == count - 1));
    if (!connect_new()) return fail_queued("connect: " + c_.error());
    mode_ = Mode::requests;
    send_next();
  }

  // Sends the next queued request (all of them when pipelining).
  void send_next() {
    std::string bytes;
    do {
      bytes += queued_.front().request;
      expects_.push_back(std::move(queued_.front()));
      queued_.pop_front();
    } while (pipelined_ && !queued_.empty());
    if (!c_.send(bytes, deadline_in(10s))) {
      // The server may have closed an idle keep-alive connection (04 closes when others wait): that shows on
      // the read side, where a close announced by the last response lets us go on.
      progress_ = Clock::now();
    }
  }

  void reconnect_and_resend() {
    ++n_.reconnects;
    queued_.insert(queued_.begin(), expects_.begin(), expects_.end());
    expects_.clear();
    if (!connect_new()) return fail_queued("reconnect: " + c_.error());
    send_next();
  }

  void run_malformed() {
    scenario_ = "malformed";
    const auto& samples = bad_samples();
    const BadSample& b = samples[std::uniform_int_distribution<std::size_t>(0, samples.size() - 1)(rng_)];
    ++n_.sent;
    bad_status_ = b.status;
    if (!connect_new()) {
      ++n_.malformed_bad;
      return finish();
    }
    mode_ = Mode::error_response;
    if (!c_.send(b.bytes, deadline_in(10s))) progress_ = Clock::now();
  }

  void run_reset() {
    scenario_ = "reset";
    ++n_.sent;
    ++n_.resets;
    if (!connect_new()) return finish();
    const int stage = std::uniform_int_distribution<int>(0, 3)(rng_);
    if (stage == 1) c_.send("GET /reset HTTP/1.1\r\nHost: 12", deadline_in(1s));
    if (stage == 2) c_.send("GET /reset HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", deadline_in(1s));
    if (stage == 3) {  // reset once the first bytes of the answers arrive (on_readable)
      std::string many;
      for (int i = 0; i < 8; ++i) many += "GET /reset HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
      c_.send(many, deadline_in(1s));
      mode_ = Mode::reset_on_data;
      return;
    }
    c_.reset();
    finish();
  }

  void check_ok(const HttpResponse& r, const Expect& e) {
    std::string problem;
    if (r.status_line != "HTTP/1.1 200 OK") problem = "status line '" + r.status_line + "'";
    else if (r.header("Content-Length").value_or("") != "1024") problem = "Content-Length not 1024";
    else if (r.body.size() != (e.head ? 0U : 1024U)) problem = "body of " + std::to_string(r.body.size()) + " bytes";
    else if (e.close && lower(r.header("Connection").value_or("")) != "close") problem = "no Connection: close";
    if (problem.empty()) ++n_.ok;
    else n_.fail(scenario_ + ": " + problem);
  }

  void on_closed() {
    if (mode_ == Mode::await_close) return finish();
    if (mode_ == Mode::error_response) {
      ++n_.malformed_bad;
      if (n_.first_failures.size() < 5)
        n_.first_failures.push_back("malformed request: " + c_.describe_end("before the error response"));
      return finish();
    }
    if (!expects_.empty() || !queued_.empty()) return fail_all(c_.describe_end("before the response"));
    finish();
  }

  void fail_all(const std::string& why) {
    for (std::size_t i = 0; i < expects_.size(); ++i) n_.fail(scenario_ + ": " + why);
    expects_.clear();
    fail_queued(why);
  }
  void fail_queued(const std::string& why) {
    for (std::size_t i = 0; i < queued_.size(); ++i) n_.fail(scenario_ + ": " + why);
    queued_.clear();
    finish();
  }
  void finish() {
    expects_.clear();
    queued_.clear();
    c_.close();
    busy_ = false;
  }

  std::uint16_t port_;
  Counters& n_;
  std::mt19937& rng_;
  Client c_;
  bool busy_ = false;
  bool pipelined_ = false;
  Mode mode_ = Mode::requests;
  int bad_status_ = 0;
  std::string scenario_;
  std::deque<Expect> queued_;   // not sent yet
  std::deque<Expect> expects_;  // sent, answers expected in this order
  Deadline progress_;
};

// Runs the mix until `until` requests have been sent in all (counters.sent), then lets every slot finish.
void run_mix(std::uint16_t port, int connections, long long until, Counters& n, std::mt19937& rng) {
  std::vector<Slot> slots;
  slots.reserve(static_cast<std::size_t>(connections));
  for (int i = 0; i < connections; ++i) slots.emplace_back(port, n, rng);
  std::vector<pollfd> fds;
  std::vector<std::size_t> index;
  for (;;) {
    bool any_busy = false;
    for (Slot& s : slots) {
      while (!s.busy() && n.sent < until) s.start();
      any_busy = any_busy || s.busy();
    }
    if (!any_busy) return;
    fds.clear();
    index.clear();
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i].busy() || slots[i].fd() < 0) continue;
      fds.push_back(pollfd{slots[i].fd(), POLLIN, 0});
      index.push_back(i);
    }
    const int ready = ::poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) return;
    for (std::size_t k = 0; k < fds.size(); ++k)
      if (fds[k].revents != 0) slots[index[k]].on_readable();
    const auto now = Clock::now();
    for (Slot& s : slots)
      if (s.busy() && now - s.last_progress() > 10s) s.on_stuck();
  }
}

// GET and HEAD, exactly, on one keep-alive connection.
std::string answers_exactly(std::uint16_t port) {
  Client c = Client::connect_to(port, deadline_in(5s));
  if (!c.ok()) return "connect: " + c.error();
  for (bool head : {false, true}) {
    const std::string method = head ? "HEAD" : "GET";
    if (!c.send(method + " /final HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", deadline_in(5s))) return c.error();
    const auto r = c.read_response(deadline_in(5s), head);
    if (!r) return method + ": " + c.error();
    if (r->status_line != "HTTP/1.1 200 OK" || r->header("Content-Length").value_or("") != "1024" ||
        r->body.size() != (head ? 0U : 1024U) || lower(r->header("Connection").value_or("")) != "keep-alive")
      return method + ": unexpected response:\n" + r->head_text();
  }
  return "";
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "soak: " << why << "\n"
            << "usage: soak --server PATH [--requests N] [--connections C] [--seed S] [--delay-us D] "
               "[--rss-slack-kib K]\n";
  std::exit(2);
}

Config parse_args(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::cout << "usage: soak --server PATH [--requests N] [--connections C] [--seed S] [--delay-us D] "
                   "[--rss-slack-kib K]\n";
      std::exit(0);
    }
    if (i + 1 >= argc) usage("missing value for " + flag);
    const std::string value = argv[++i];
    auto number = [&](long long lo, long long hi) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) usage("bad value for " + flag + ": " + value);
      return v;
    };
    if (flag == "--server") cfg.server = value;
    else if (flag == "--requests") cfg.requests = number(1, 1'000'000'000'000LL);
    else if (flag == "--connections") cfg.connections = static_cast<int>(number(1, 10000));
    else if (flag == "--seed") cfg.seed = static_cast<unsigned>(number(0, 4'000'000'000LL));
    else if (flag == "--delay-us") cfg.delay_us = static_cast<long>(number(0, 1'000'000));
    else if (flag == "--rss-slack-kib") cfg.rss_slack_kib = static_cast<long>(number(0, 1'000'000'000));
    else usage("unknown option " + flag);
  }
  if (cfg.server.empty()) usage("--server is required");
  return cfg;
}

std::string mib(long kib) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(kib) / 1024.0);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const Config cfg = parse_args(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  std::string name = cfg.server;
  if (const auto slash = name.rfind('/'); slash != std::string::npos && slash > 0) {
    const auto before = name.rfind('/', slash - 1);
    name = name.substr(before == std::string::npos ? 0 : before + 1, slash - (before == std::string::npos ? 0 : before + 1));
  }

  ServerProcess server(cfg.server, {"--port", "0", "--delay-us", std::to_string(cfg.delay_us)});
  std::string why;
  if (!server.wait_listening(deadline_in(10s), why)) {
    std::cout << name << ": did not start: " << why << "\n";
    return 1;
  }
  const pid_t pid = server.pid();
  std::mt19937 rng(cfg.seed);
  Counters n;

  const long fds_start = open_fd_count(pid);
  const long rss_start = rss_kib(pid);
  const long long warm = std::min<long long>(cfg.requests / 20, 5000);
  run_mix(server.port(), cfg.connections, warm, n, rng);
  const int fds_warm = wait_fd_count_at_most(pid, static_cast<int>(fds_start), deadline_in(3s));
  const long rss_warm = rss_kib(pid);

  // In quarters, with the RSS after each: a leak grows with every quarter, a high-water mark levels off.
  const auto start = Clock::now();
  std::vector<long> rss_quarters;
  for (int q = 1; q <= 4; ++q) {
    run_mix(server.port(), cfg.connections, warm + cfg.requests * q / 4, n, rng);
    rss_quarters.push_back(rss_kib(pid));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const int fds_end = wait_fd_count_at_most(pid, fds_warm, deadline_in(10s));
  const long rss_end = rss_kib(pid);
  const std::string final_check = answers_exactly(server.port());
  const ExitStatus status = server.stop(SIGTERM, deadline_in(5s));

  std::vector<std::string> problems;
  const long long accounted = n.ok + n.failed + n.malformed + n.malformed_bad + n.resets;
  if (accounted != n.sent)
    problems.push_back("soak bug: " + std::to_string(n.sent) + " requests sent, " + std::to_string(accounted) +
                       " accounted for");
  if (n.failed > 0) problems.push_back(std::to_string(n.failed) + " well-formed requests failed");
  if (n.malformed_bad > 0) problems.push_back(std::to_string(n.malformed_bad) + " malformed requests answered wrongly");
  if (fds_end > fds_warm) problems.push_back("descriptors " + std::to_string(fds_warm) + " -> " + std::to_string(fds_end));
  if (rss_end > rss_warm + cfg.rss_slack_kib)
    problems.push_back("RSS grew by " + std::to_string(rss_end - rss_warm) + " KiB (slack " +
                       std::to_string(cfg.rss_slack_kib) + ")");
  if (!final_check.empty()) problems.push_back("final GET/HEAD: " + final_check);
  if (!status.exited_with(0)) problems.push_back("SIGTERM: " + status.describe());

  std::ostringstream line;
  line << name << ": " << (problems.empty() ? "PASS" : "FAIL") << " requests " << (n.sent - warm) << " (+" << warm
       << " warm-up) in " << static_cast<long long>(seconds + 0.5) << " s; well-formed ok " << n.ok << ", failed "
       << n.failed << "; malformed " << n.malformed << " (wrong " << n.malformed_bad << "); resets " << n.resets
       << "; reconnects " << n.reconnects << "; fds " << fds_start << " -> " << fds_warm << " (warm) -> " << fds_end
       << "; RSS " << mib(rss_start) << " -> " << mib(rss_warm) << " (warm) ->";
  for (std::size_t q = 0; q < rss_quarters.size(); ++q) line << (q == 0 ? " " : " / ") << mib(rss_quarters[q]);
  line << " (quarters) -> " << mib(rss_end);
  std::cout << line.str() << "\n";
  for (const auto& p : problems) std::cout << "  problem: " << p << "\n";
  for (const auto& f : n.first_failures) std::cout << "  first failures: " << f << "\n";
  if (!problems.empty() && status.state != ExitStatus::State::running) {
    const std::string err = server.err();
    if (!err.empty()) std::cout << "  server stderr: " << Client::preview(err) << "\n";
  }
  return problems.empty() ? 0 : 1;
}
