#pragma once
// A test client for 127.0.0.1 that never blocks without a deadline.
//
// Every socket is non-blocking and every wait is a poll() bounded by a deadline, so a server that stalls,
// answers short or never closes makes a test fail with a message instead of hanging the whole suite.
// Responses are parsed strictly (CRLF line endings, no bytes left over) and framed as RFC 9112 6.3 says; the
// seven servers' own contract, a Content-Length on every response that has a body, is enforced on top of that
// except when tests/grade.sh grades a general server (course_framing()).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace psp::test {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using std::chrono::milliseconds;

inline Deadline deadline_in(Clock::duration d) { return Clock::now() + d; }

// poll() timeout for the time left until `deadline`, rounded up so we never wake a hair early and spin.
inline int poll_timeout_ms(Deadline deadline) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

inline std::string errno_text(int err) { return std::string(std::strerror(err)); }

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline bool contains_ci(std::string_view haystack, std::string_view needle) {
  return lower(haystack).find(lower(needle)) != std::string::npos;
}

// Where two byte strings first differ, in words: "they differ from byte 1024 on (of 1024 and 2048)".
inline std::string first_difference(std::string_view got, std::string_view want) {
  std::size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  return "they differ from byte " + std::to_string(at) + " on (of " + std::to_string(got.size()) + " and " +
         std::to_string(want.size()) + ")";
}

// A byte as a message shows it: itself if printable, else \xNN, so that a NUL is told from a dot.
inline std::string shown_byte(char c) {
  if (std::isprint(static_cast<unsigned char>(c))) return std::string(1, c);
  static const char hex[] = "0123456789abcdef";
  const auto b = static_cast<unsigned char>(c);
  return {'\\', 'x', hex[b >> 4], hex[b & 15]};
}

// Owns one file descriptor. Deliberately not common/net.hpp's Fd: the harness shares no code with the servers it
// judges, so a bug there cannot hide itself from the tests.
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
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct HttpResponse {
  std::string status_line;  // without CRLF
  std::string version;      // "HTTP/1.1"
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // in order, as received (values trimmed)
  std::string body;
  bool close_delimited = false;  // the body ended with the connection (RFC 9112 6.3, rule 8)

  // The server will send nothing more on this connection after this response (RFC 9112 9.3, 9.6): it said
  // `Connection: close`, it answered in HTTP/1.0 without `Connection: keep-alive`, or its body ran to the close.
  // A client that has more to ask opens a new connection; that is no fault of the server.
  bool ends_connection() const {
    const std::string connection = lower(header("Connection").value_or(""));
    if (close_delimited || connection.find("close") != std::string::npos) return true;
    return version == "HTTP/1.0" && connection.find("keep-alive") == std::string::npos;
  }

  int header_count(std::string_view name) const {
    return static_cast<int>(std::count_if(headers.begin(), headers.end(),
                                          [&](const auto& h) { return lower(h.first) == lower(name); }));
  }
  std::optional<std::string> header(std::string_view name) const {
    for (const auto& h : headers)
      if (lower(h.first) == lower(name)) return h.second;
    return std::nullopt;
  }
  std::string head_text() const {
    std::string out = status_line + "\n";
    for (const auto& h : headers) out += h.first + ": " + h.second + "\n";
    return out;
  }
};

// What the test's clients sent and received, so that a failure can show the exchange (tests/grade.sh puts it in
// its report): the last few entries, consecutive sends on one connection merged. The fixture clears it before
// each test. Process-wide and locked, since some tests drive clients from several threads.
class Transcript {
 public:
  static void sent(int fd, std::string_view bytes) { add(fd, "sent", bytes); }
  static void received(int fd, const HttpResponse& r) {
    add(fd, "got", r.head_text() + "(" + std::to_string(r.body.size()) + " bytes of body)");
  }
  static void clear() {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().entries.clear();
  }
  static std::string text() {
    std::lock_guard<std::mutex> lock(state().mutex);
    std::string out;
    for (const Entry& e : state().entries)
      out += "connection " + std::to_string(e.fd) + " " + e.what + ": " + e.bytes + "\n";
    return out;
  }

 private:
  struct Entry {
    int fd;
    std::string what;
    std::string bytes;
  };
  struct State {
    std::mutex mutex;
    std::vector<Entry> entries;
  };
  static State& state() {
    static State s;
    return s;
  }
  static void add(int fd, const char* what, std::string_view bytes) {
    constexpr std::size_t kEntries = 8, kBytes = 400;
    std::lock_guard<std::mutex> lock(state().mutex);
    auto& entries = state().entries;
    if (entries.empty() || entries.back().fd != fd || entries.back().what != what) {
      if (entries.size() == kEntries) entries.erase(entries.begin());
      entries.push_back({fd, what, ""});
    }
    std::string& kept = entries.back().bytes;
    for (char c : bytes.substr(0, kBytes - std::min(kBytes, kept.size()))) {
      if (c == '\r') kept += "\\r";
      else if (c == '\n') kept += what == std::string_view("sent") ? "\\n" : " | ";
      else kept += shown_byte(c);
    }
  }
};

enum class Parse { complete, need_more, malformed };

// True unless tests/grade.sh grades a general server (--profile static, PSP_GRADE_PROFILE=static). The seven
// servers, and any server graded against this course's contract, put exactly one Content-Length on every response
// that can have a body; RFC 9112 6.3 also lets a body be chunked or end with the connection, and lets a HEAD
// response leave the length out (RFC 9110 9.3.2, 8.6), which the general profile accepts.
inline bool course_framing() {
  static const bool strict = [] {
    const char* profile = std::getenv("PSP_GRADE_PROFILE");
    return profile == nullptr || std::string_view(profile) != "static";
  }();
  return strict;
}

// Decodes a chunked body (RFC 9112 7.1) from `buffer` at `at`: need_more until the last chunk and its trailer
// section have arrived, then `body` holds the data and `at` the offset just past the message.
inline Parse parse_chunked(const std::string& buffer, std::size_t& at, std::string& body, std::string& error) {
  std::size_t pos = at;
  std::string data;
  for (;;) {
    const std::size_t eol = buffer.find("\r\n", pos);
    if (eol == std::string::npos) return Parse::need_more;
    const std::string line = buffer.substr(pos, eol - pos);
    const std::size_t digits = std::min(line.find_first_not_of("0123456789abcdefABCDEF"), line.size());
    if (digits == 0 || digits > 15 || (digits < line.size() && line[digits] != ';' && line[digits] != ' ' &&
                                       line[digits] != '\t')) {
      error = "malformed chunk-size line: '" + line + "'";
      return Parse::malformed;
    }
    const std::size_t size = std::stoul(line.substr(0, digits), nullptr, 16);
    pos = eol + 2;
    if (size == 0) break;
    if (buffer.size() < pos + size + 2) return Parse::need_more;
    if (buffer.compare(pos + size, 2, "\r\n") != 0) {
      error = "chunk of " + std::to_string(size) + " bytes not followed by CRLF";
      return Parse::malformed;
    }
    data.append(buffer, pos, size);
    pos += size + 2;
  }
  for (;;) {  // the trailer section: field lines up to an empty line
    const std::size_t eol = buffer.find("\r\n", pos);
    if (eol == std::string::npos) return Parse::need_more;
    const bool last = eol == pos;
    pos = eol + 2;
    if (last) break;
  }
  body = std::move(data);
  at = pos;
  return Parse::complete;
}

// Parses one response from the front of `buffer` and removes it. Its body is framed as RFC 9112 6.3 says: none
// for a response to HEAD, nor for 1xx, 204 and 304, whatever the headers; else the chunked coding, else
// Content-Length (every value the same), else everything up to the close: `at_eof` says the peer has closed, and
// until then such a response is need_more. Under course_framing() a response that can have a body must carry
// exactly one Content-Length. Bodies are kept whole here, so only up to 256 MiB; a larger one (a file served with
// --root) is read with Download (tests/support/static_root.hpp) after parsing its head alone.
inline Parse parse_response(std::string& buffer, bool head, HttpResponse& out, std::string& error,
                            bool at_eof = false) {
  constexpr std::size_t kMaxHead = 64 * 1024;
  const std::size_t end = buffer.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (buffer.size() > kMaxHead) {
      error = "no end of response head in the first 64 KiB";
      return Parse::malformed;
    }
    return Parse::need_more;
  }
  HttpResponse r;
  std::vector<std::string> lines;
  for (std::size_t pos = 0; pos < end + 2;) {
    const std::size_t eol = buffer.find("\r\n", pos);
    lines.push_back(buffer.substr(pos, eol - pos));
    pos = eol + 2;
  }
  r.status_line = lines.front();
  const std::string& sl = r.status_line;
  // "HTTP/1.1 200 OK": version, one space, three digits, one space, reason.
  if (sl.size() < 13 || sl.compare(0, 7, "HTTP/1.") != 0 || sl[8] != ' ' || !std::isdigit(static_cast<unsigned char>(sl[9])) ||
      !std::isdigit(static_cast<unsigned char>(sl[10])) || !std::isdigit(static_cast<unsigned char>(sl[11])) || sl[12] != ' ') {
    error = "malformed status line: '" + sl + "'";
    return Parse::malformed;
  }
  r.version = sl.substr(0, 8);
  r.status = std::stoi(sl.substr(9, 3));
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0 || line.find_first_of(" \t\r\n") < colon) {
      error = "malformed header line: '" + line + "'";
      return Parse::malformed;
    }
    std::string value = line.substr(colon + 1);
    const std::size_t first = value.find_first_not_of(" \t");
    const std::size_t last = value.find_last_not_of(" \t");
    value = first == std::string::npos ? std::string() : value.substr(first, last - first + 1);
    if (value.find_first_of("\r\n") != std::string::npos) {
      error = "bare CR or LF in header line: '" + line + "'";
      return Parse::malformed;
    }
    r.headers.emplace_back(line.substr(0, colon), value);
  }
  // RFC 9112 6.3 rules 1 and 2: these responses end at their empty line.
  const bool bodiless_status = r.status / 100 == 1 || r.status == 204 || r.status == 304;
  const bool no_body = head || bodiless_status;
  const int lengths = r.header_count("Content-Length");
  if (course_framing() && lengths != 1 && !(bodiless_status && lengths == 0)) {
    error = "response needs exactly one Content-Length header (this course's contract; RFC 9112 6.3 would also "
            "allow a chunked body or one that ends with the connection):\n" + r.head_text();
    return Parse::malformed;
  }
  // Every Content-Length value, repeated headers and comma lists alike, must be the same number (RFC 9112 6.3 rule 5).
  std::string cl;
  for (const auto& [name, value] : r.headers) {
    if (lower(name) != "content-length") continue;
    for (std::size_t pos = 0; pos <= value.size();) {
      const std::size_t comma = std::min(value.find(',', pos), value.size());
      std::string one = value.substr(pos, comma - pos);
      one.erase(0, std::min(one.find_first_not_of(" \t"), one.size()));
      one.erase(std::min(one.find_last_not_of(" \t") + 1, one.size()));
      if (one.empty() || one.size() > 18 || one.find_first_not_of("0123456789") != std::string::npos ||
          (course_framing() && comma < value.size())) {  // the course's servers send one plain number
        error = "bad Content-Length '" + value + "'";
        return Parse::malformed;
      }
      if (!cl.empty() && one != cl) {
        error = "Content-Length values differ ('" + cl + "' and '" + one + "'):\n" + r.head_text();
        return Parse::malformed;
      }
      cl = one;
      pos = comma + 1;
    }
  }
  const std::string te = lower(r.header("Transfer-Encoding").value_or(""));
  std::size_t total = end + 4;
  if (no_body) {
    // nothing follows the head
  } else if (!te.empty() && !course_framing()) {
    // Rule 4: chunked last means chunked; any other coding runs to the close. Either way Content-Length is ignored.
    const std::size_t last_coding = te.find_last_not_of(" \t");
    if (last_coding >= 6 && te.compare(last_coding - 6, 7, "chunked") == 0) {
      const Parse p = parse_chunked(buffer, total, r.body, error);
      if (p != Parse::complete) return p;
    } else if (!at_eof) {
      return Parse::need_more;
    } else {
      r.body = buffer.substr(total);
      r.close_delimited = true;
      total = buffer.size();
    }
  } else if (!cl.empty()) {
    constexpr unsigned long long kMaxBuffered = 256ULL << 20;
    if (std::stoull(cl) > kMaxBuffered) {
      error = "Content-Length " + cl + " is too large to buffer: read such a body with Download";
      return Parse::malformed;
    }
    const std::size_t body_length = std::stoul(cl);
    if (buffer.size() < total + body_length) return Parse::need_more;
    r.body = buffer.substr(total, body_length);
    total += body_length;
  } else if (!at_eof) {
    return Parse::need_more;  // rule 8: the body is everything up to the close
  } else {
    r.body = buffer.substr(total);
    r.close_delimited = true;
    total = buffer.size();
  }
  buffer.erase(0, total);
  out = std::move(r);
  return Parse::complete;
}

inline bool is_reset_errno(int err) { return err == ECONNRESET || err == EPIPE || err == ECONNABORTED; }

struct ClientOptions {
  bool nodelay = false;  // TCP_NODELAY: each send() leaves as its own segment
  int rcvbuf = 0;        // SO_RCVBUF before connect (small values make the server's writes block)
};

class Client {
 public:
  using Options = ClientOptions;
  // How a wait for the server to close ended.
  enum class Closed { eof, reset, timeout, data };

  Client() = default;

  // Connects to 127.0.0.1:port. Check ok() and error().
  static Client connect_to(std::uint16_t port, Deadline deadline, Options options = {}) {
    Client c;
    c.fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.fd_.valid()) { c.fail("socket: " + errno_text(errno)); return c; }
    if (options.nodelay) {
      const int one = 1;
      ::setsockopt(c.fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (options.rcvbuf > 0)
      ::setsockopt(c.fd_.get(), SOL_SOCKET, SO_RCVBUF, &options.rcvbuf, sizeof options.rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno != EINPROGRESS) { c.fail("connect: " + errno_text(errno)); return c; }
      pollfd p{c.fd_.get(), POLLOUT, 0};
      int n;
      while ((n = ::poll(&p, 1, poll_timeout_ms(deadline))) < 0 && errno == EINTR) {
      }
      if (n == 0) { c.fail("connect: timed out"); return c; }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) { c.fail("connect: " + errno_text(err)); return c; }
    }
    return c;
  }

  bool ok() const { return fd_.valid() && error_.empty(); }
  const std::string& error() const { return error_; }
  int fd() const { return fd_.get(); }
  bool is_open() const { return fd_.valid(); }
  // Bytes received and not consumed by read_response().
  const std::string& buffered() const { return in_; }
  // Hands over the bytes received and not consumed, leaving none: a body read past its head.
  std::string take_buffered() { return std::exchange(in_, std::string()); }
  // The peer closed (EOF) or reset the connection.
  bool closed_by_peer() const { return eof_ || read_errno_ != 0; }

  std::uint16_t local_port() const {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    return ntohs(addr.sin_port);
  }

  // Sends all of `bytes`. MSG_NOSIGNAL: a server that closed early must fail the test, not kill it.
  bool send(std::string_view bytes, Deadline deadline) {
    Transcript::sent(fd_.get(), bytes);
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (errno == EAGAIN && !wait_for(POLLOUT, deadline)) return set_error("send: timed out (server not reading)");
      } else {
        send_errno_ = errno;
        return set_error("send: " + errno_text(errno));
      }
    }
    return true;
  }
  int send_errno() const { return send_errno_; }

  // One send() per byte; with Options::nodelay each byte is its own TCP segment.
  bool send_byte_by_byte(std::string_view bytes, Deadline deadline) {
    for (char c : bytes)
      if (!send(std::string_view(&c, 1), deadline)) return false;
    return true;
  }

  // Reads until one whole response is buffered, then returns it. nullopt with error() on EOF, reset, timeout
  // or a malformed response.
  std::optional<HttpResponse> read_response(Deadline deadline, bool head = false) {
    for (;;) {
      HttpResponse r;
      std::string err;
      switch (parse_response(in_, head, r, err, eof_)) {
        case Parse::complete: Transcript::received(fd_.get(), r); return r;
        case Parse::malformed: set_error(err); return std::nullopt;
        case Parse::need_more: break;
      }
      if (eof_ || read_errno_ != 0) {
        set_error(describe_end("before a whole response arrived"));
        return std::nullopt;
      }
      if (!wait_for(POLLIN, deadline)) {
        set_error("timed out waiting for a response; received so far: " + preview(in_));
        return std::nullopt;
      }
      read_available();
    }
  }

  // Non-blocking: one recv() into the buffer. False once the peer closed or reset.
  bool read_available() {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
      if (n > 0) {
        in_.append(chunk, static_cast<std::size_t>(n));
        return true;
      }
      if (n == 0) {
        eof_ = true;
        return false;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      read_errno_ = errno;
      return false;
    }
  }

  // Parses one response from what is already buffered.
  // A body that runs to the close is whole once the peer has closed (EOF; a reset may have cut it).
  Parse take_response(bool head, HttpResponse& out, std::string& err) {
    return parse_response(in_, head, out, err, eof_);
  }

  // Waits for the server to close: EOF or reset. Any byte that arrives instead is reported as `data`
  // (and kept in buffered()).
  Closed wait_closed(Deadline deadline) {
    if (!in_.empty()) return Closed::data;
    for (;;) {
      if (eof_) return Closed::eof;
      if (read_errno_ != 0) return Closed::reset;
      if (!wait_for(POLLIN, deadline)) return Closed::timeout;
      read_available();
      if (!in_.empty()) return Closed::data;
    }
  }

  // Reads everything the server sends until it closes (eof or reset) or the deadline (timeout). The bytes stay in
  // buffered(), so a test can check every byte that came back, not only one parsed response.
  Closed read_until_closed(Deadline deadline) {
    for (;;) {
      if (eof_) return Closed::eof;
      if (read_errno_ != 0) return Closed::reset;
      if (!wait_for(POLLIN, deadline)) return Closed::timeout;
      read_available();
    }
  }

  static const char* describe(Closed c) {
    switch (c) {
      case Closed::eof: return "closed (EOF)";
      case Closed::reset: return "reset";
      case Closed::timeout: return "still open at the deadline";
      case Closed::data: return "sent unexpected bytes instead of closing";
    }
    return "?";
  }

  void half_close() { ::shutdown(fd_.get(), SHUT_WR); }

  // Abortive close: SO_LINGER with a zero timeout makes close() send RST and drop everything unsent.
  void reset() {
    const linger l{1, 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    fd_.reset();
  }

  void close() { fd_.reset(); }

  std::string describe_end(std::string_view when) const {
    std::string what = eof_ ? "server closed the connection" : "connection failed: " + errno_text(read_errno_);
    return what + " " + std::string(when) + "; received: " + preview(in_);
  }

  static std::string preview(std::string_view bytes) {
    if (bytes.empty()) return "(nothing)";
    std::string out = std::to_string(bytes.size()) + " bytes '";
    for (char c : bytes.substr(0, 300)) {
      if (c == '\r') out += "\\r";
      else if (c == '\n') out += "\\n";
      else out += shown_byte(c);
    }
    return out + (bytes.size() > 300 ? "'..." : "'");
  }

 private:
  void fail(std::string message) {
    error_ = std::move(message);
    fd_.reset();
  }
  bool set_error(std::string message) {
    error_ = std::move(message);
    return false;
  }
  // True when the fd is ready (or in error: the next call reports it); false on timeout.
  bool wait_for(short events, Deadline deadline) {
    pollfd p{fd_.get(), events, 0};
    for (;;) {
      const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
      if (n > 0) return true;
      if (n == 0) return false;
      if (errno != EINTR) return false;
    }
  }

  Fd fd_;
  std::string in_;
  std::string error_;
  bool eof_ = false;
  int read_errno_ = 0;
  int send_errno_ = 0;
};

// What became of one client when many are read at once.
struct Outcome {
  enum class Kind { pending, response, closed, malformed };
  Kind kind = Kind::pending;
  HttpResponse response;  // when kind == response
  std::string detail;     // for closed and malformed
};

struct CollectOptions {
  bool close_when_done = true;  // close each client as soon as its outcome is known (01 needs it to move on)
  // When set, stop once at least one outcome is known and nothing has happened for this long; clients still
  // waiting then stay `pending`. For servers that legitimately leave some clients waiting (EMFILE).
  std::optional<Clock::duration> settle;
};

// Reads one response from each client concurrently with a single poll() loop.
inline std::vector<Outcome> collect_responses(std::vector<Client>& clients, Deadline deadline,
                                              CollectOptions options = {}) {
  std::vector<Outcome> outcomes(clients.size());
  std::size_t unresolved = 0;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if (clients[i].is_open()) {
      ++unresolved;
    } else {
      outcomes[i].kind = Outcome::Kind::closed;
      outcomes[i].detail = "not connected: " + clients[i].error();
    }
  }
  bool any_resolved = unresolved < clients.size();
  Clock::time_point last_event = Clock::now();
  auto resolve = [&](std::size_t i, Outcome::Kind kind, std::string detail) {
    outcomes[i].kind = kind;
    outcomes[i].detail = std::move(detail);
    --unresolved;
    any_resolved = true;
    if (options.close_when_done) clients[i].close();
  };
  // Something may already be buffered.
  auto try_parse = [&](std::size_t i) {
    std::string err;
    switch (clients[i].take_response(false, outcomes[i].response, err)) {
      case Parse::complete: resolve(i, Outcome::Kind::response, ""); return true;
      case Parse::malformed: resolve(i, Outcome::Kind::malformed, err); return true;
      case Parse::need_more: return false;
    }
    return false;
  };
  for (std::size_t i = 0; i < clients.size(); ++i)
    if (outcomes[i].kind == Outcome::Kind::pending) try_parse(i);

  std::vector<pollfd> fds;
  std::vector<std::size_t> index;
  while (unresolved > 0) {
    Deadline wake = deadline;
    if (options.settle && any_resolved) wake = std::min(wake, last_event + *options.settle);
    if (Clock::now() >= wake) break;
    fds.clear();
    index.clear();
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (outcomes[i].kind != Outcome::Kind::pending) continue;
      fds.push_back(pollfd{clients[i].fd(), POLLIN, 0});
      index.push_back(i);
    }
    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(wake));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    last_event = Clock::now();
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const std::size_t i = index[k];
      const bool open = clients[i].read_available();
      if (try_parse(i)) continue;
      if (!open)
        resolve(i, clients[i].buffered().empty() ? Outcome::Kind::closed : Outcome::Kind::malformed,
                clients[i].describe_end("before a whole response arrived"));
    }
  }
  return outcomes;
}

}  // namespace psp::test
