// common/http.hpp: the HTTP/1.1 every server speaks, the same for all seven I/O models.
//
// parse_request() looks at the bytes a connection has received and says one of three things:
//   kIncomplete  the request head has not ended yet: read more (unless it is already too long: then 414 or 431)
//   kComplete    one request head of `length` bytes is at the front: answer it, then drop those bytes
//   kError       the head is malformed: answer error_response(status) and close the connection
//
// It looks again from the start of the buffer every time it is called. A head is at most kMaxHead bytes, so that
// costs at most 8 KiB per read, even for a client that sends one byte at a time, and there is no saved state that
// could get out of step with the buffer. Request bodies are never read: a request that announces one is refused,
// because after it the framing of the connection would depend on bytes we did not read.
#pragma once

#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace http {

constexpr std::size_t kMaxHead = 8 * 1024;  // a longer request line is answered 414, a longer head 431
constexpr std::size_t kBodySize = 1024;      // the fixed response body of the course's one workload

struct Request {
  bool head_only = false;   // HEAD: the same headers, no body
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
  enum Status { kIncomplete, kComplete, kError };
  Status status = kIncomplete;
  std::size_t length = 0;  // kComplete: bytes of the head, to drop from the buffer once answered
  int error = 0;           // kError: the HTTP status to answer
  Request request;         // kComplete: what was asked
};

namespace detail {

inline bool is_tchar(unsigned char c) {  // RFC 9110 5.6.2: the characters of a token
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
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
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
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
  for (unsigned char c : value)
    if (!std::isalnum(c) && std::string_view("-._~%!$&'()*+,;=:[]").find(static_cast<char>(c)) == std::string_view::npos)
      return false;
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

}  // namespace detail

inline Parse parse_request(std::string_view data) {
  using namespace detail;
  Parse p;
  auto fail = [&p](int status) {
    p.status = Parse::kError;
    p.error = status;
    return p;
  };

  // Lines end in CRLF; RFC 9112 2.2 lets a server accept a bare LF too. Empty lines before a request are skipped.
  std::size_t pos = 0;
  std::string_view line;
  auto next_line = [&]() {
    std::size_t lf = data.find('\n', pos);
    if (lf == std::string_view::npos) return false;
    line = data.substr(pos, lf - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = lf + 1;
    return true;
  };
  std::size_t start = 0;
  do {
    start = pos;
    if (pos >= kMaxHead) return fail(431);
    if (!next_line()) return data.size() - start > kMaxHead ? fail(414) : p;
  } while (line.empty());
  // RFC 9112 3: a request-target longer than we wish to parse is 414 (URI Too Long), not a header problem.
  if (line.size() > kMaxHead) return fail(414);

  // The request line: method SP target SP version, single spaces, nothing else.
  std::size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp1 == sp2) return fail(400);
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (!is_token(method) || target.empty()) return fail(400);
  for (unsigned char c : target)
    if (c <= ' ' || c == 0x7f) return fail(400);
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return fail(400);
  // RFC 9110 6.2: a major version is a different protocol (HTTP/2 and 3 have their own framing, 0.9 none): 505.
  // A higher minor version of HTTP/1 "SHOULD" be processed as the highest one we implement (RFC 9112 2.3 too):
  // HTTP/1.2 to 1.9 are taken as HTTP/1.1, and the response says HTTP/1.1, the version we conform to.
  if (version[5] != '1') return fail(505);
  bool http11 = version[7] != '0';

  // The header fields, up to the empty line that ends the head.
  int hosts = 0;
  std::string_view if_modified_since, if_range, range;
  std::string if_none_match;
  bool has_length = false, has_chunked = false, close = false, keep_alive = false;
  long long length = 0;
  for (;;) {
    if (!next_line()) return data.size() - start > kMaxHead ? fail(431) : p;
    if (pos - start > kMaxHead) return fail(431);
    if (line.empty()) break;
    // RFC 9112 5.2: obsolete line folding (a line starting with whitespace) is refused with 400.
    if (line.front() == ' ' || line.front() == '\t') return fail(400);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail(400);
    // A name is a token, so whitespace before the colon (RFC 9112 5.1) fails this test too.
    std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
    if (!is_token(name)) return fail(400);
    for (unsigned char c : value)  // field-vchar, SP, HTAB, obs-text; this also refuses a bare CR (RFC 9112 2.2)
      if ((c < ' ' && c != '\t') || c == 0x7f) return fail(400);

    if (iequals(name, "Host")) {
      if (!is_host(value)) return fail(400);  // RFC 9112 3.2: an invalid Host value is refused
      ++hosts;
    } else if (iequals(name, "Content-Length")) {
      long long n = 0;
      if (!parse_content_length(value, n) || (has_length && n != length)) return fail(400);
      has_length = true;
      length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      has_chunked = true;
    } else if (iequals(name, "If-Modified-Since")) {
      if_modified_since = value;  // checked only when a file is served (files.hpp parses it)
    } else if (iequals(name, "If-None-Match")) {
      if (!if_none_match.empty()) if_none_match += ", ";
      if_none_match += value;
    } else if (iequals(name, "If-Range")) {
      if_range = value;
    } else if (iequals(name, "Range")) {
      range = value;
    } else if (iequals(name, "Connection")) {
      for_each_element(value, [&](std::string_view option) {
        if (iequals(option, "close")) close = true;
        if (iequals(option, "keep-alive")) keep_alive = true;
      });
    }
  }

  // RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; more than one is refused in any version.
  if ((http11 && hosts == 0) || hosts > 1) return fail(400);
  // RFC 9112 6.1 and 6.3: Transfer-Encoding in HTTP/1.0, or with Content-Length, means framing we cannot trust.
  if (has_chunked && (!http11 || has_length)) return fail(400);
  if (has_chunked) return fail(501);         // we read no request bodies, so we implement no transfer coding
  if (length > 0) return fail(413);          // the same: a body we would have to read and skip
  // RFC 9110 15.5.6: 405 for a method we know but do not allow (error_response() adds the Allow header it MUST
  // carry); 15.6.2: 501 for one we do not recognise. The method comes before the target's form, because the form
  // depends on it: "OPTIONS *" and "CONNECT host:443" are well-formed, and refused for their method.
  if (method != "GET" && method != "HEAD") return fail(is_known_method(method) ? 405 : 501);
  std::optional<std::string> origin = origin_form(target);
  if (!origin) return fail(400);

  p.status = Parse::kComplete;
  p.length = pos;
  p.request.head_only = method == "HEAD";
  p.request.keep_alive = http11 ? !close : (keep_alive && !close);
  p.request.target = std::move(*origin);
  p.request.if_modified_since = std::string(if_modified_since);
  p.request.if_none_match = std::move(if_none_match);
  p.request.if_range = std::string(if_range);
  p.request.range = std::string(range);
  return p;
}

// The Date header (RFC 9110 5.6.7), formatted once per second per thread.
inline std::string_view http_date() {
  thread_local std::time_t cached_second = 0;
  thread_local std::array<char, 40> text{};
  std::time_t now = std::time(nullptr);
  if (now != cached_second) {
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(text.data(), text.size(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    cached_second = now;
  }
  return text.data();
}

inline const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 301: return "Moved Permanently";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
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

// The answer to a well-formed request: 200 with the 1 KB body (none for HEAD).
inline std::string response(const Request& request) {
  static const std::string body = [] {
    std::string b(kBodySize, 'x');
    b.back() = '\n';
    return b;
  }();
  std::string out = status_and_headers(200, body.size(), request.keep_alive);
  out += "\r\n";
  if (!request.head_only) out += body;
  return out;
}

// The answer to a request we refuse: a short text body, and the connection closes after it.
inline std::string error_response(int status) {
  std::string body = std::to_string(status) + ' ' + reason_phrase(status) + '\n';
  std::string out = status_and_headers(status, body.size(), false);
  if (status == 405) out += "Allow: GET, HEAD\r\n";
  out += "\r\n";
  return out + body;
}

}  // namespace http
