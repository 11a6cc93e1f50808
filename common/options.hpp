// common/options.hpp: the command line, the same for all seven servers.
//
//   ./run_server [--host ADDR] [--port N] [--threads N] [--delay-us N] [--handler wait|sleep|spin]
//                [--idle-timeout S] [--backlog N] [--help]
//
// A bad flag or value prints a sentence and the usage to stderr and exits 2; --help prints the usage and exits 0.
#pragma once

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

enum class Handler {
  kWait,   // wait without using the thread: a timer in event loops, a sleep in blocking models (the default)
  kSleep,  // sleep the thread that handles the request, even in an event loop (the classic mistake, for the labs)
  kSpin,   // burn the delay as CPU (the CPU-bound lab)
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port; the real one is printed in the "listening on" line
  int threads = 1;  // 04: pool size; 05, 06, 07: event loops; 01, 02, 03: always 1
  std::chrono::microseconds delay{1000};  // the simulated handler's wait per request
  Handler handler = Handler::kWait;
  std::chrono::seconds idle_timeout{5};  // close a connection that sends nothing for this long
  int backlog = 4096;                    // the kernel also caps it at net.core.somaxconn
};

// What a server says about itself to the option parser.
struct Model {
  const char* name;             // "05-epoll"
  int default_threads;          // 0: the flag does not apply to this model
  const char* threads_refusal;  // why --threads does not apply (when default_threads is 0)
};

// The parser's answer, so that tests can check it without exiting.
struct ParsedOptions {
  Options options;
  std::string error;  // non-empty: a sentence saying what is wrong
  bool help = false;
};

inline int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

inline std::string usage(const Model& model) {
  std::string u = "usage: ./run_server [--host ADDR] [--port N] [--threads N] [--delay-us N]\n"
                  "                    [--handler wait|sleep|spin] [--idle-timeout S] [--backlog N] [--help]\n\n";
  u += std::string(model.name) + ": a small HTTP/1.1 server that answers every GET or HEAD with a 1 KB body after\n"
       "a simulated handler that waits --delay-us microseconds.\n\n"
       "  --host ADDR         numeric IPv4 or IPv6 address to listen on (default 127.0.0.1)\n"
       "  --port N            TCP port, 0 for any free one (default 8080)\n";
  if (model.default_threads > 0)
    u += "  --threads N         threads (default " + std::to_string(model.default_threads) + ")\n";
  else
    u += std::string("  --threads N         not for this model: ") + model.threads_refusal + "\n";
  u += "  --delay-us N        simulated handler time per request in microseconds (default 1000)\n"
       "  --handler MODE      wait (default): wait without blocking other clients; sleep: block the thread\n"
       "                      that runs the handler; spin: burn the time as CPU\n"
       "  --idle-timeout S    close connections that send nothing for S seconds (default 5)\n"
       "  --backlog N         listen backlog (default 4096)\n";
  return u;
}

inline ParsedOptions parse_options(const std::vector<std::string>& args, const Model& model) {
  ParsedOptions r;
  Options& o = r.options;
  o.threads = model.default_threads > 0 ? model.default_threads : 1;

  // A whole number in [lo, hi], or an error naming the flag.
  auto number = [&r](const std::string& flag, const std::string& text, long long lo, long long hi) -> long long {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
      r.error = flag + " takes a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                ", not '" + text + "'";
      return lo;
    }
    return v;
  };

  for (std::size_t i = 0; i < args.size() && r.error.empty(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      r.help = true;
      return r;
    }
    bool known = flag == "--host" || flag == "--port" || flag == "--threads" || flag == "--delay-us" ||
                 flag == "--handler" || flag == "--idle-timeout" || flag == "--backlog";
    if (!known) {
      r.error = "unknown option '" + flag + "'";
      break;
    }
    if (i + 1 >= args.size()) {
      r.error = flag + " needs a value";
      break;
    }
    const std::string& value = args[++i];
    if (flag == "--host") {
      unsigned char buf[16];
      if (inet_pton(AF_INET, value.c_str(), buf) != 1 && inet_pton(AF_INET6, value.c_str(), buf) != 1)
        r.error = "--host takes a numeric IPv4 or IPv6 address, not '" + value + "'";
      o.host = value;
    } else if (flag == "--port") {
      o.port = static_cast<int>(number(flag, value, 0, 65535));
    } else if (flag == "--threads") {
      if (model.default_threads == 0)
        r.error = std::string("--threads does not apply to ") + model.name + ": " + model.threads_refusal;
      else
        o.threads = static_cast<int>(number(flag, value, 1, 1024));
    } else if (flag == "--delay-us") {
      o.delay = std::chrono::microseconds(number(flag, value, 0, 60'000'000));
    } else if (flag == "--handler") {
      if (value == "wait") o.handler = Handler::kWait;
      else if (value == "sleep") o.handler = Handler::kSleep;
      else if (value == "spin") o.handler = Handler::kSpin;
      else r.error = "--handler takes wait, sleep or spin, not '" + value + "'";
    } else if (flag == "--idle-timeout") {
      o.idle_timeout = std::chrono::seconds(number(flag, value, 1, 3600));
    } else if (flag == "--backlog") {
      o.backlog = static_cast<int>(number(flag, value, 1, INT_MAX));
    }
  }
  return r;
}

// The options, or the process ends: exit 0 after --help, exit 2 after a bad flag.
inline Options options_or_exit(int argc, char** argv, const Model& model) {
  ParsedOptions r = parse_options(std::vector<std::string>(argv + 1, argv + argc), model);
  if (r.help) {
    std::fputs(usage(model).c_str(), stdout);
    std::exit(0);
  }
  if (!r.error.empty()) {
    std::fprintf(stderr, "error: %s\n\n%s", r.error.c_str(), usage(model).c_str());
    std::exit(2);
  }
  return r.options;
}
