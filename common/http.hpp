// common/http.hpp: the HTTP/1.1 every server speaks, the same for all seven I/O models.
//
// A RequestReader reads one connection's requests from the bytes it has received, in any split, and says one of:
//   kIncomplete  read more (unless the request is already too long: then kError, 414 or 431)
//   kContinue    the client waits for "100 Continue" before it sends the body: send interim_continue(), read more
//   kComplete    one whole request was read from the front of the buffer, body and all: answer it
//   kError       the request is malformed or too large: answer error_response(status) and close the connection
//
// Its states, one request after another on a keep-alive connection:
//
//   HEAD ---- head ends, no body ------------------------------------------------------------> complete
//     |  \--- head ends, Content-Length: N ---> BODY (N bytes) -------------------------------> complete
//     |   `-- head ends, chunked -----------> CHUNK SIZE ---> CHUNK DATA ---> CHUNK END --.
//     |                                         ^   | size 0                               |
//     |                                         |   `------> TRAILERS ---- empty line ----+---> complete
//     |                                         `------------------------------------------'
//     `-- malformed, or over a limit: error (the connection closes after the answer)
//
// The reader remembers where it stopped, so each byte of a head is looked at once however the client splits it (a
// client that sends one byte at a time costs O(bytes), not O(bytes x head)); only an unfinished chunk-size or trailer
// line is looked at again when more of it comes, and its limit bounds that (kMaxChunkLine, kMaxHead). It reads the
// body as it comes and throws it away: the course's handler answers the same 1 KB whatever was posted, so a body is
// framed, counted against --max-body, and never held in memory. What is unread after kComplete (unread()) is the
// next pipelined request; what was read leaves the buffer in one erase, once it is half of it (see next()).
//
// Why read a body at all: the framing (Content-Length, or the chunked coding of RFC 9112 7.1, which a recipient
// MUST be able to parse) is what tells where the next request starts. A server that cannot frame a body must close
// the connection after any request that has one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace http {

constexpr std::size_t kMaxHead = 8 * 1024;         // a longer request line is answered 414, a longer head 431
constexpr std::size_t kBodySize = 1024;             // the fixed response body of the course's one workload
constexpr long long kDefaultMaxBody = 1024 * 1024;  // --max-body's default: a longer request body is 413
constexpr std::size_t kMaxChunkLine = 1024;         // a chunk-size line (with its extensions) longer than this: 400

struct Request {
  bool head_only = false;   // HEAD: the same headers, no body
  bool post = false;        // POST: answered as GET in the 1 KB mode (its body was read and thrown away)
  bool keep_alive = false;  // the connection stays open after the response
  // The request target in origin-form: path and query ("/", "/index.html?x=1"). An absolute-form target
  // ("http://host/index.html?x=1") arrives here as the origin-form it names, so later code sees one form only.
  std::string target;
  // The conditional and range fields as sent, empty when absent: only --root mode looks at them (files.hpp).
  // The last If-Modified-Since, If-Range and Range win; several If-None-Match lines are one list (RFC 9110 5.3).
  std::string if_modified_since;
  std::string if_none_match;
  std::string if_range;
  std::string range;
};

struct Parse {
  enum Status { kIncomplete, kContinue, kComplete, kError };
  Status status = kIncomplete;
  std::size_t length = 0;  // kComplete: the bytes the request took, head and body (parse_request() reports it)
  int error = 0;           // kError: the HTTP status to answer
  Request request;         // kComplete: what was asked; kError: head_only, once the method is known
};

namespace detail {

// The character tests below run for every byte of every field name, so they are plain ASCII comparisons: <cctype>'s
// functions are calls into the C library that consult the locale, for bytes whose meaning the RFCs fix.
constexpr bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
constexpr bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
constexpr char to_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
constexpr bool is_hex_digit(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

inline bool is_tchar(unsigned char c) {  // RFC 9110 5.6.2: the characters of a token
  if (is_digit(c) || is_alpha(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

inline bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  return true;
}

inline std::string_view trim(std::string_view s) {  // optional whitespace (OWS) around a field value
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Host = uri-host [ ":" port ] (RFC 9112 3.2, RFC 3986 3.2.2): a name or address made of unreserved characters,
// percent-encodings, sub-delims, and the brackets and colons of an IPv6 literal. Empty is allowed.
inline bool is_host(std::string_view value) {
  constexpr std::string_view kOthers = "-._~%!$&'()*+,;=:[]";
  for (unsigned char c : value)
    if (!is_digit(c) && !is_alpha(c) && kOthers.find(static_cast<char>(c)) == std::string_view::npos) return false;
  return true;
}

// RFC 9110 9.1: method names are case-sensitive, so "get" is not GET but a method nobody defined.
inline bool is_known_method(std::string_view method) {
  // RFC 9110 9.3 defines the first eight; PATCH is RFC 5789's.
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
    if (method == known) return true;
  return false;
}

// RFC 9112 3.2 gives a request-target four forms. GET and HEAD ask for a resource, so only the two that name one
// are theirs:
//
//   origin-form     "/path?query"              3.2.1: what a client sends to an origin server. Kept as it is.
//   absolute-form   "http://host/path?query"   3.2.2: what clients send to a proxy, and "a server MUST accept" it.
//                                              Reduced to its path and query: the origin-form a client would have
//                                              sent us. Its authority replaces Host (3.2.2), and this server of one
//                                              site ignores both. An empty path is "/" (RFC 9110 4.2.3).
//   authority-form  "host:port"                3.2.3: for CONNECT only.
//   asterisk-form   "*"                        3.2.4: for OPTIONS only.
//
// Neither of the last two names something a GET or a HEAD could fetch, so with those methods they are malformed:
// 400 (nginx answers 400 too). Returns the origin-form, or std::nullopt for a target in neither of the first two
// forms.
inline std::optional<std::string> origin_form(std::string_view target) {
  if (!target.empty() && target.front() == '/') return std::string(target);
  // absolute-URI = scheme ":" hier-part [ "?" query ] (RFC 3986 4.3). An http or https URI's hier-part is
  // "//" authority path-abempty (RFC 9110 4.2.1, 4.2.2); other schemes (ftp:, mailto:, and "host:port", whose
  // scheme would be "host") name nothing this server has. Schemes are case-insensitive (RFC 3986 3.1).
  std::size_t colon = target.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view scheme = target.substr(0, colon), rest = target.substr(colon + 1);
  if ((!iequals(scheme, "http") && !iequals(scheme, "https")) || rest.substr(0, 2) != "//") return std::nullopt;
  rest.remove_prefix(2);
  std::size_t path_start = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_start);
  // RFC 9110 4.2.1: an http URI with an empty host is invalid and MUST be rejected. 4.2.4: userinfo ("user@") is
  // treated as an error; is_host() refuses the '@'.
  if (authority.empty() || authority.front() == ':' || !is_host(authority)) return std::nullopt;
  std::string_view path = path_start == std::string_view::npos ? std::string_view() : rest.substr(path_start);
  if (path.empty() || path.front() == '?') return "/" + std::string(path);
  return std::string(path);
}

// Calls f(token) for each comma-separated element of a list value ("keep-alive, Upgrade").
template <class F>
void for_each_element(std::string_view list, F f) {
  while (!list.empty()) {
    std::size_t comma = list.find(',');
    f(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

// Content-Length is 1*DIGIT; a list of equal values ("5, 5") is allowed by RFC 9112 6.3, different ones are not.
// Any number of digits is valid (RFC 9110 8.6), so huge values saturate instead of overflowing: they are refused
// as too large (413) like every other length above 0.
inline bool parse_content_length(std::string_view value, long long& out) {
  constexpr long long kSaturated = 1'000'000'000'000'000'000;  // far above any body, far below LLONG_MAX
  bool ok = true, seen = false;
  for_each_element(value, [&](std::string_view v) {
    if (!ok) return;
    long long n = 0;
    for (char c : v) {
      if (c < '0' || c > '9') ok = false;
      if (!ok) return;
      n = n > kSaturated / 10 ? kSaturated : n * 10 + (c - '0');
    }
    if (v.empty() || (seen && n != out)) ok = false;
    out = n;
    seen = true;
  });
  return ok && seen;
}


// A Transfer-Encoding list (all its field lines joined): 0 when its last coding is chunked, the only framing we can
// read; 400 when chunked is applied twice or is not last (RFC 9112 6.3: the length cannot be determined, and a
// proxy may have framed it differently: request smuggling); 501 for a coding we do not implement (RFC 9112 6.1).
inline int transfer_coding_status(std::string_view list) {
  int chunked = 0, others = 0;
  bool last_is_chunked = false, empty = false;
  for_each_element(list, [&](std::string_view coding) {
    // A coding may carry parameters ("gzip;q=1"): its name is what comes before them.
    std::string_view name = trim(coding.substr(0, coding.find(';')));
    if (name.empty()) empty = true;
    last_is_chunked = iequals(name, "chunked");
    (last_is_chunked ? chunked : others) += 1;
  });
  if (empty || chunked > 1 || (chunked == 1 && !last_is_chunked)) return 400;
  return others > 0 ? 501 : 0;
}

// The head of one request, parsed a line at a time as its lines arrive, so that a malformed line is refused as soon
// as it ends (without waiting for the rest of the head) and no line is looked at twice. What the head says about
// the request goes to `request`; how its body is framed (RFC 9112 6.3), to the fields below.
struct Head {
  Request request;
  bool chunked = false;          // the body is in the chunked coding
  long long length = 0;          // else Content-Length (0: no body)
  bool expect_continue = false;  // "Expect: 100-continue" in an HTTP/1.1 request

  // The request line: method SP target SP version, single spaces, nothing else. Returns 0, or the error status.
  int request_line(std::string_view line) {
    std::size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string_view::npos || sp1 == sp2) return 400;
    method_ = line.substr(0, sp1);
    target_ = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string_view version = line.substr(sp2 + 1);
    if (!is_token(method_) || target_.empty()) return 400;
    request.head_only = method_ == "HEAD";  // known from here on, so that even an error answers HEAD without content
    request.post = method_ == "POST";
    for (unsigned char c : target_)
      if (c <= ' ' || c == 0x7f) return 400;
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" ||
        !is_digit(static_cast<unsigned char>(version[5])) || version[6] != '.' ||
        !is_digit(static_cast<unsigned char>(version[7])))
      return 400;
    // RFC 9110 6.2: a major version is a different protocol (HTTP/2 and 3 have their own framing, 0.9 none): 505.
    // A higher minor version of HTTP/1 "SHOULD" be processed as the highest one we implement (RFC 9112 2.3 too):
    // HTTP/1.2 to 1.9 are taken as HTTP/1.1, and the response says HTTP/1.1, the version we conform to.
    if (version[5] != '1') return 505;
    http11_ = version[7] != '0';
    return 0;
  }

  // One header field line. Returns 0, or the error status.
  int field_line(std::string_view line) {
    // RFC 9112 5.2: obsolete line folding (a line starting with whitespace) is refused with 400.
    if (line.front() == ' ' || line.front() == '\t') return 400;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return 400;
    // A name is a token, so whitespace before the colon (RFC 9112 5.1) fails this test too.
    std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
    if (!is_token(name)) return 400;
    for (unsigned char c : value)  // field-vchar, SP, HTAB, obs-text; this also refuses a bare CR (RFC 9112 2.2)
      if ((c < ' ' && c != '\t') || c == 0x7f) return 400;

    if (iequals(name, "Host")) {
      if (!is_host(value)) return 400;  // RFC 9112 3.2: an invalid Host value is refused
      ++hosts_;
    } else if (iequals(name, "Content-Length")) {
      long long n = 0;
      if (!parse_content_length(value, n) || (has_length_ && n != length)) return 400;
      has_length_ = true;
      length = n;
    } else if (iequals(name, "Transfer-Encoding")) {  // several lines are one list (RFC 9110 5.3)
      transfer_codings_ += transfer_codings_.empty() ? "" : ", ";
      transfer_codings_ += value;
      has_transfer_coding_ = true;
    } else if (iequals(name, "Expect")) {
      // RFC 9110 10.1.1: 100-continue is the only expectation defined; we ignore others (a server MAY).
      for_each_element(value, [&](std::string_view e) { expect_continue |= iequals(e, "100-continue"); });
    } else if (iequals(name, "Connection")) {
      for_each_element(value, [&](std::string_view option) {
        if (iequals(option, "close")) close_ = true;
        if (iequals(option, "keep-alive")) keep_alive_ = true;
      });
    } else if (iequals(name, "If-Modified-Since")) {  // checked only when a file is served (files.hpp)
      request.if_modified_since = value;
    } else if (iequals(name, "If-None-Match")) {
      request.if_none_match += request.if_none_match.empty() ? "" : ", ";
      request.if_none_match += value;
    } else if (iequals(name, "If-Range")) {
      request.if_range = value;
    } else if (iequals(name, "Range")) {
      request.range = value;
    }
    return 0;
  }

  // The empty line: what the whole head says. Returns 0, or the error status.
  int end() {
    // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; more than one is refused in any version.
    if ((http11_ && hosts_ == 0) || hosts_ > 1) return 400;
    // RFC 9112 6.1 and 6.3: Transfer-Encoding in HTTP/1.0, or with Content-Length, means a framing we cannot trust
    // (a proxy in front of us may have read it the other way: request smuggling).
    if (has_transfer_coding_ && (!http11_ || has_length_)) return 400;
    if (has_transfer_coding_) {
      if (int status = transfer_coding_status(transfer_codings_)) return status;
      chunked = true;
    }
    expect_continue &= http11_;  // RFC 9110 10.1.1: an HTTP/1.0 client cannot understand a 100
    // RFC 9110 15.5.6: 405 for a method we know but do not allow (error_response() adds the Allow header it MUST
    // carry); 15.6.2: 501 for one we do not recognise. The method comes before the target's form, because the
    // form depends on it: "OPTIONS *" and "CONNECT host:443" are well-formed, and refused for their method.
    if (method_ != "GET" && method_ != "HEAD" && method_ != "POST") return is_known_method(method_) ? 405 : 501;
    std::optional<std::string> origin = origin_form(target_);
    if (!origin) return 400;
    request.target = std::move(*origin);
    request.keep_alive = http11_ ? !close_ : (keep_alive_ && !close_);
    return 0;
  }

 private:
  std::string method_, target_;  // copies: the request line leaves the buffer before the head has ended
  bool http11_ = false;
  int hosts_ = 0;
  std::string transfer_codings_;
  bool has_length_ = false, has_transfer_coding_ = false, close_ = false, keep_alive_ = false;
};

}  // namespace detail

// One connection's requests, read incrementally (see the top of this file). Keep one per connection, and hand it
// the connection's whole buffer each time bytes arrive.
class RequestReader {
 public:
  explicit RequestReader(long long max_body = kDefaultMaxBody) : max_body_(max_body) {}

  // Reads on from where it stopped, and says what to do next. The caller only ever appends to `in` between calls.
  // What has been read stays at the front of `in` until it is half of it, then goes in one erase: erasing each
  // request as it is read would move the rest of the buffer once per request, quadratic in what a client pipelines
  // (a loop can buffer hundreds of KiB of small requests); this way each byte moves at most once. unread(in) is what
  // is left to read.
  Parse next(std::string& in) {
    std::string_view rest(in);
    rest.remove_prefix(read_);
    const std::size_t before = rest.size();
    Parse p = step(rest);
    read_ += before - rest.size();
    if (read_ == in.size()) {
      in.clear();  // all of it read: nothing to move
      read_ = 0;
    } else if (read_ >= in.size() / 2) {
      in.erase(0, read_);
      read_ = 0;
    }
    if (p.status == Parse::kComplete || p.status == Parse::kError) {
      p.length = taken_;
      const std::size_t read = read_;
      *this = RequestReader(max_body_);  // the next request starts from nothing (and after an error, nothing comes)
      read_ = read;
    }
    return p;
  }

  // The bytes of `in` not read yet: the rest of this request, and the pipelined ones after it.
  std::string_view unread(const std::string& in) const { return std::string_view(in).substr(read_); }

  // True between requests: nothing of the next one has been read yet (a stop may close such a connection).
  bool idle(const std::string& in) const { return state_ == State::kHead && in.size() == read_; }

  // True once the head has ended and the body is being read: its deadline is a gap between reads (deadline.hpp).
  bool reading_body() const { return state_ != State::kHead; }

  // The bytes the head search has looked at so far, over the reader's life (a unit test checks it is O(bytes)).
  std::size_t scanned() const { return scanned_total_; }

 private:
  enum class State { kHead, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailers };

  // `in` is the unread part of the buffer; what each state reads is taken off its front.
  Parse step(std::string_view& in) {
    if (state_ == State::kHead) {
      if (int error = read_head(in)) return fail(error);
      if (state_ == State::kHead) return {};  // the head has not ended yet
      // RFC 9110 10.1.1: the client waits for our 100 before sending the body. Not when the body is too large
      // (read_head() has answered 413 at once), nor when some of it has already come.
      if (head_.expect_continue && (head_.chunked || head_.length > 0) && in.empty()) {
        head_.expect_continue = false;
        Parse p;
        p.status = Parse::kContinue;
        return p;
      }
    }
    std::size_t used = 0;  // bytes of `in` read by the body states below, taken off at the end
    int error = read_body(in, used);
    in.remove_prefix(used);
    taken_ += used;
    if (error) return fail(error);
    if (state_ != State::kHead) return {};  // the body has not ended yet
    Parse p;
    p.status = Parse::kComplete;
    p.request = std::move(head_.request);
    return p;
  }

  // HEAD: reads the lines of the head that have ended since the last call, each handed to head_ as it ends. When the
  // empty line comes, takes the head (and the empty lines before it) out of `in` and moves on to the body's state.
  // Returns an error status, or 0.
  int read_head(std::string_view& in) {
    while (scanned_ < in.size()) {
      // The next line's end, from where the last call stopped looking: find() is memchr(), many bytes per step.
      std::size_t lf = in.find('\n', scanned_);
      std::size_t looked_at = lf == std::string::npos ? in.size() : lf + 1;
      scanned_total_ += looked_at - scanned_;
      scanned_ = looked_at;
      if (lf == std::string::npos) break;
      std::size_t line_end = lf + 1;
      std::string_view line(in.data() + line_start_, line_end - 1 - line_start_);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // RFC 9112 2.2: a bare LF ends a line too
      bool first = line_start_ == head_start_;
      line_start_ = line_end;
      if (first && line.empty()) {  // RFC 9112 2.2: empty lines before a request are skipped
        head_start_ = line_end;
        if (head_start_ >= kMaxHead) return 431;
        continue;
      }
      if (first && line_end - head_start_ > kMaxHead) return 414;  // RFC 9112 3: the target is too long
      if (line_end - head_start_ > kMaxHead) return 431;
      int error = first ? head_.request_line(line) : line.empty() ? head_.end() : head_.field_line(line);
      if (error) return error;
      if (!line.empty()) continue;
      // The head is whole: take it out of the buffer, and read the body it announced (perhaps none).
      in.remove_prefix(line_end);
      taken_ += line_end;
      if (!head_.chunked && head_.length > max_body_) return 413;  // at once, before any body is sent
      state_ = head_.chunked ? State::kChunkSize : State::kBody;
      body_left_ = head_.length;
      return 0;
    }
    // No end yet: refuse as soon as the head can no longer fit, rather than wait for an end that cannot be good.
    if (in.size() - head_start_ > kMaxHead) return line_start_ == head_start_ ? 414 : 431;
    return 0;
  }

  // The body states: read what `in` holds from `used` on, and advance `used`. Returns an error status, or 0; the
  // body is over when the state is back to kHead.
  int read_body(std::string_view in, std::size_t& used) {
    for (;;) {
      std::size_t avail = in.size() - used;
      switch (state_) {
        case State::kHead:
          return 0;
        case State::kBody:  // Content-Length: N bytes, thrown away
        case State::kChunkData: {
          std::size_t n = static_cast<std::size_t>(std::min<long long>(body_left_, static_cast<long long>(avail)));
          used += n;
          body_left_ -= static_cast<long long>(n);
          if (body_left_ > 0) return 0;
          state_ = state_ == State::kBody ? State::kHead : State::kChunkEnd;
          break;
        }
        case State::kChunkSize:  // chunk-size [ chunk-ext ] CRLF (RFC 9112 7.1)
        case State::kChunkEnd:   // the CRLF after a chunk's data
        case State::kTrailers: {  // field lines, then an empty line (RFC 9112 7.1.2): read and ignored
          std::size_t lf = in.find('\n', used);
          if (lf == std::string::npos) return avail > limit_of_line() ? (state_ == State::kTrailers ? 431 : 400) : 0;
          std::string_view line(in.data() + used, lf - used);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          if (line.size() > limit_of_line()) return state_ == State::kTrailers ? 431 : 400;
          used = lf + 1;
          if (int error = end_of_line(line)) return error;
          break;
        }
      }
    }
  }

  // The longest line the current state accepts: a chunk-size line, or what is left of the trailers' kMaxHead.
  std::size_t limit_of_line() const {
    if (state_ != State::kTrailers) return kMaxChunkLine;
    return trailer_bytes_ < kMaxHead ? kMaxHead - trailer_bytes_ : 0;
  }

  // A whole line of the chunked coding, in the state that expected it.
  int end_of_line(std::string_view line) {
    if (state_ == State::kChunkEnd) {  // a chunk's data ends exactly where its size said, with a CRLF
      if (!line.empty()) return 400;
      state_ = State::kChunkSize;
      return 0;
    }
    if (state_ == State::kTrailers) {  // trailer fields are allowed, and ignored: nothing here needs one
      if (line.empty()) {
        state_ = State::kHead;
        return 0;
      }
      trailer_bytes_ += line.size() + 2;
      return line.find(':') == std::string_view::npos || !detail::is_token(line.substr(0, line.find(':'))) ? 400 : 0;
    }
    // chunk-size = 1*HEXDIG, then extensions (";" name [= value]), which we ignore (RFC 9112 7.1.1).
    std::size_t digits = 0;
    long long size = 0;
    for (; digits < line.size() && detail::is_hex_digit(static_cast<unsigned char>(line[digits])); ++digits) {
      if (size > max_body_) return 413;  // before it could overflow: already more than we would read
      char c = detail::to_lower(line[digits]);
      size = size * 16 + (c <= '9' ? c - '0' : c - 'a' + 10);
    }
    std::string_view ext = detail::trim(line.substr(digits));
    if (digits == 0 || (!ext.empty() && ext.front() != ';')) return 400;
    for (unsigned char c : ext)
      if ((c < ' ' && c != '\t') || c == 0x7f) return 400;
    body_total_ += size;
    if (body_total_ > max_body_) return 413;
    body_left_ = size;
    state_ = size == 0 ? State::kTrailers : State::kChunkData;  // the last chunk is followed by the trailers
    return 0;
  }

  Parse fail(int status) {
    Parse p;
    p.status = Parse::kError;
    p.error = status;
    p.request.head_only = head_.request.head_only;
    return p;
  }

  long long max_body_;
  State state_ = State::kHead;
  // kHead: where the head starts (after skipped empty lines), where the current line starts, and how far the
  // search for the head's end has looked.
  std::size_t head_start_ = 0, line_start_ = 0, scanned_ = 0, scanned_total_ = 0;
  std::size_t taken_ = 0;  // bytes of this request read so far
  std::size_t read_ = 0;   // bytes at the front of the caller's buffer already read (see next())
  detail::Head head_;      // the request being read, and its body's framing
  long long body_left_ = 0;      // kBody, kChunkData: bytes still to throw away
  long long body_total_ = 0;     // chunked: the bytes of all chunks so far, against max_body_
  std::size_t trailer_bytes_ = 0;  // kTrailers: bounded like a head
};

// The request at the front of `data`, as a fresh reader sees it: for tests and the fuzzers, which look at one
// buffer at a time. `length` is the bytes the request took (head and body), 0 unless kComplete or kError.
inline Parse parse_request(std::string_view data, long long max_body = kDefaultMaxBody) {
  std::string in(data);
  RequestReader reader(max_body);
  Parse p = reader.next(in);
  if (p.status == Parse::kContinue) p = reader.next(in);  // the body, if it is there: no one to send a 100 to
  if (p.status == Parse::kError) p.length = 0;
  if (p.status == Parse::kIncomplete) p.length = 0;
  return p;
}

// An HTTP-date in the IMF-fixdate form (RFC 9110 5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT". The day and month
// names are spelled out here rather than taken from strftime()'s %a and %b, which follow the locale.
inline std::string format_http_date(std::time_t t) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[40];
  std::snprintf(text, sizeof text, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday], tm.tm_mday,
                kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return text;
}

// The Date header of every response: format_http_date(now), formatted once per second per thread.
inline std::string_view http_date() {
  thread_local std::time_t cached_second = 0;
  thread_local std::string text;
  std::time_t now = std::time(nullptr);
  if (now != cached_second) {
    text = format_http_date(now);
    cached_second = now;
  }
  return text;
}

inline const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

// The status line and the header fields, each line ending in CRLF, without the empty line that ends the head (the
// caller may add fields). `content_length`: std::nullopt for a response without one (a 304); `content_type`: empty
// for none; `fields`: more header lines, each ending in CRLF ("Location: /dir/\r\n").
inline std::string status_and_headers(int status, std::optional<std::uint64_t> content_length, bool keep_alive,
                                      std::string_view content_type = "text/plain", std::string_view fields = {}) {
  std::string head;
  head.reserve(200 + fields.size());
  head += "HTTP/1.1 ";
  head += std::to_string(status);
  head += ' ';
  head += reason_phrase(status);
  head += "\r\nServer: psp\r\nDate: ";
  head += http_date();
  head += "\r\n";
  if (!content_type.empty()) {
    head += "Content-Type: ";
    head += content_type;
    head += "\r\n";
  }
  if (content_length) {
    head += "Content-Length: ";
    head += std::to_string(*content_length);
    head += "\r\n";
  }
  head += fields;
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  return head;
}

// The answer to a well-formed request: 200 with the 1 KB body (none for HEAD). Only its Date changes, once a
// second, so each thread formats it (keep-alive and close) once per second and hands out copies: formatting it
// anew for every request took four times as long as copying it.
inline std::string response(const Request& request) {
  struct Formatted {
    std::string date;           // the http_date() it was formatted with: a new second formats it again
    std::string text;           // head and body
    std::size_t head_size = 0;  // where the body starts: a HEAD gets only what comes before
  };
  thread_local Formatted formatted[2];  // [keep_alive]
  Formatted& f = formatted[request.keep_alive];
  if (f.date != http_date()) {
    f.date = http_date();
    f.text = status_and_headers(200, kBodySize, request.keep_alive) + "\r\n";
    f.head_size = f.text.size();
    f.text.append(kBodySize - 1, 'x');
    f.text += '\n';
  }
  return request.head_only ? f.text.substr(0, f.head_size) : f.text;
}

// The answer to a request we refuse: a short text body, and the connection closes after it. A response to HEAD
// has no content, whatever its status (RFC 9110 9.3.2); its Content-Length is the one a GET would get. A 405
// MUST say which methods are allowed (RFC 9110 15.5.6): `allow`, which depends on the server's mode.
inline std::string error_response(int status, bool head_only = false, std::string_view allow = "GET, HEAD, POST") {
  std::string body = std::to_string(status) + ' ' + reason_phrase(status) + '\n';
  std::string fields = status == 405 ? "Allow: " + std::string(allow) + "\r\n" : std::string();
  std::string out = status_and_headers(status, body.size(), false, "text/plain", fields) + "\r\n";
  return head_only ? out : out + body;
}

// The interim response that tells a client waiting with "Expect: 100-continue" to send its body (RFC 9110 15.2.1).
// It ends at its empty line; the final response follows once the request has been read.
constexpr std::string_view kContinueResponse = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace http
