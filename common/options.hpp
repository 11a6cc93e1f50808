// common/options.hpp: the command line, the same for all seven servers.
//
//   ./run_server [--host ADDR] [--port N] [--threads N] [--delay-us N] [--handler wait|sleep|spin]
//                [--idle-timeout T] [--backlog N] [--max-body BYTES] [--root DIR] [--help]
//                (and a server's own flags, if any)
//
// A bad flag or value prints a sentence and the usage to stderr and exits 2; --help prints the usage and exits 0.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
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
  std::chrono::seconds idle_timeout{5};  // the time to send each request head; a reader's time to make progress
  int backlog = 4096;                    // the kernel also caps it at net.core.somaxconn
  long long max_body = 1024 * 1024;      // the largest request body read (and thrown away); past it, 413
  std::string root;                      // --root DIR: serve the files under DIR; empty: the fixed 1 KB body
  int root_fd = -1;  // an O_PATH descriptor of DIR, opened once by options_or_exit() and never closed; -1: no --root
  std::map<std::string, std::string> extra;  // the server's own flags that were given: name -> value ("" for a switch)
};

// A flag that only one server has (e.g. a switch for a lab). The parser records it in Options::extra; the server
// checks its value and calls usage_error() if it does not like it.
struct ExtraFlag {
  const char* name;        // "--no-splice"
  const char* value_name;  // "N" for "--flag N"; nullptr: a switch without a value
  const char* help;        // one line for the usage text
};

// What a server says about itself to the option parser.
struct Model {
  const char* name;             // "05-epoll"
  int default_threads;          // 0: the flag does not apply to this model
  const char* threads_refusal;  // why --threads does not apply (when default_threads is 0)
  std::vector<ExtraFlag> extra_flags = {};  // this server's own flags, if any
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
                  "                    [--handler wait|sleep|spin] [--idle-timeout T] [--backlog N]\n"
                  "                    [--max-body BYTES] [--root DIR]";
  std::size_t line_start = u.rfind('\n') + 1;
  auto add = [&](const std::string& item) {  // wrap under the first flag, as the lines above do
    if (u.size() - line_start + 1 + item.size() > 110) {
      u += "\n                   ";
      line_start = u.rfind('\n') + 1;
    }
    u += " " + item;
  };
  for (const ExtraFlag& f : model.extra_flags)
    add(std::string("[") + f.name + (f.value_name ? std::string(" ") + f.value_name : "") + "]");
  add("[--help]");
  u += "\n\n";
  u += std::string(model.name) + ": a small HTTP/1.1 server that answers every GET, HEAD or POST with a 1 KB body\n"
       "(or, with --root, the file asked for) after a simulated handler that waits --delay-us microseconds.\n\n"
       "  --host ADDR         numeric IPv4 or IPv6 address to listen on (default 127.0.0.1)\n"
       "  --port N            TCP port, 0 for any free one (default 8080)\n";
  if (model.default_threads > 0)
    u += "  --threads N         threads (default " + std::to_string(model.default_threads) + ")\n";
  else
    u += std::string("  --threads N         not for this model: ") + model.threads_refusal + "\n";
  u += "  --delay-us N        simulated handler time per request in microseconds (default 1000)\n"
       "  --handler MODE      wait (default): wait without blocking other clients; sleep: block the thread\n"
       "                      that runs the handler; spin: burn the time as CPU\n"
       "  --idle-timeout T    close a connection that takes more than T seconds to send a request, or that\n"
       "                      reads nothing of a response for T seconds (default 5)\n"
       "  --backlog N         listen backlog (default 4096)\n"
       "  --max-body BYTES    the largest request body accepted, read and thrown away (default 1048576)\n"
       "  --root DIR          serve the files under DIR (GET and HEAD; POST gets 405) instead of the 1 KB body\n";
  for (const ExtraFlag& f : model.extra_flags) {
    std::string left = std::string("  ") + f.name + (f.value_name ? std::string(" ") + f.value_name : "");
    left.resize(std::max<std::size_t>(left.size() + 1, 22), ' ');  // the help column, as above
    u += left + f.help + "\n";
  }
  return u;
}

// The model's own flag called `name`, or nullptr.
inline const ExtraFlag* find_extra_flag(const Model& model, const std::string& name) {
  for (const ExtraFlag& f : model.extra_flags)
    if (name == f.name) return &f;
  return nullptr;
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
    if (const ExtraFlag* extra = find_extra_flag(model, flag); extra && !extra->value_name) {
      o.extra[flag] = "";  // a switch: present or not
      continue;
    }
    bool known = flag == "--host" || flag == "--port" || flag == "--threads" || flag == "--delay-us" ||
                 flag == "--handler" || flag == "--idle-timeout" || flag == "--backlog" || flag == "--max-body" ||
                 flag == "--root" ||
                 find_extra_flag(model, flag);
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
    } else if (flag == "--max-body") {
      o.max_body = number(flag, value, 0, 1LL << 40);
    } else if (flag == "--root") {
      if (value.empty()) r.error = "--root takes a directory, not ''";
      o.root = value;  // only recorded here; options_or_exit() opens it
    } else {
      o.extra[flag] = value;  // one of the model's own flags: the server checks the value
    }
  }
  return r;
}

// A bad command line: the sentence and the usage on stderr, exit 2. Servers call it for a bad value of their own flag.
[[noreturn]] inline void usage_error(const Model& model, const std::string& sentence) {
  std::fprintf(stderr, "error: %s\n\n%s", sentence.c_str(), usage(model).c_str());
  std::exit(2);
}

// The options, or the process ends: exit 0 after --help, exit 2 after a bad flag or a --root it cannot open.
inline Options options_or_exit(int argc, char** argv, const Model& model) {
  ParsedOptions r = parse_options(std::vector<std::string>(argv + 1, argv + argc), model);
  if (r.help) {
    std::fputs(usage(model).c_str(), stdout);
    std::exit(0);
  }
  if (!r.error.empty()) usage_error(model, r.error);
  if (!r.options.root.empty()) {
    // O_PATH: a handle on the directory itself, to resolve every request's path from (files.hpp); it needs no read
    // permission and is never read. Opened once: it names the directory itself, so renaming DIR later does not
    // change what is served.
    r.options.root_fd = ::open(r.options.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r.options.root_fd < 0)
      usage_error(model, "--root: cannot open directory '" + r.options.root + "': " + std::strerror(errno));
  }
  return r.options;
}
