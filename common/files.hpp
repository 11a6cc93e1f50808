// common/files.hpp: which file a request target names under --root, the same for all seven servers.
//
// lookup(root_fd, target) turns a request target into an open file, or into the status that refuses it. It does no
// network I/O, so every I/O model shares it; how the file's bytes then reach the socket is each model's lesson
// (response.hpp, and 06's splice). The rules, in order:
//
// [excerpt:rules]
//   1. The target must start with '/' (origin-form). http.hpp's parser has already turned an absolute-form target
//      ("http://host/x?y") into its origin-form ("/x?y"). Anything else ('*', "host:80", "") is 400.
//   2. The query, from the first '?', is ignored. ('#' never reaches a server; here it is an ordinary byte.)
//   3. The path is split on '/' first, then each segment is percent-decoded. A bad escape ("%zz", "%4") is 400.
//      A segment that decodes to a '/' ("%2f") or a NUL ("%00") is 400: no file name contains either. Decoding
//      after splitting is what keeps "%2f" from becoming a separator, and so from smuggling in a "..".
//   4. Empty segments ("//") and "." are dropped. A ".." in any spelling ("..", "%2e%2e", ".%2E") is 400, even one
//      that would stay inside the root: clients remove dot-segments before sending (RFC 3986 5.2.4), so a ".." on
//      the wire is a probe. nginx answers 400 too.
//   5. The remaining segments, joined by '/', are opened relative to the root with openat2(RESOLVE_BENEATH): the
//      kernel refuses any ".." or symbolic link that would resolve outside the root (EXDEV), which answers 404 like
//      a missing file, so a probe learns nothing. Symbolic links that stay inside the root are followed. Where
//      openat2 is missing (Linux < 5.6: ENOSYS) or blocked (a seccomp filter: EPERM), the path is walked one
//      segment at a time with openat(O_NOFOLLOW) instead, which refuses every symbolic link (404).
//   6. A path that ends in '/' (or in a "." segment: "/a/." is "/a/") is opened with its trailing slash, so a
//      regular file followed by '/' fails with ENOTDIR: 404. ENOENT, ENOTDIR, ELOOP, EXDEV, ENAMETOOLONG: 404.
//      EACCES, EPERM: 403. EMFILE, ENFILE (out of descriptors): 503. Anything else: 500.
//   7. A directory without a trailing slash is 301 to the same path with one (so that relative links in its
//      index.html resolve inside it), query kept. The Location is built from the segments rules 1 to 4 kept, never
//      echoed from the target: "//evil.example" moves to "/evil.example/", not to the host evil.example. With a
//      trailing slash, or for "/", it serves its index.html, opened by the same rules from the root; no
//      index.html, or one that is not a regular file, is 403.
//   8. Anything else that is not a regular file (a FIFO, a socket, a device) is 403. Files are opened with
//      O_NONBLOCK, so opening a FIFO with no writer does not block the server.
// [/excerpt:rules]
//
// A file's size and mtime are taken once, at open time: the response promises that Content-Length, and a file
// that changes meanwhile is the sender's problem (response.hpp: a shrunk file closes the connection).
#pragma once

#include <fcntl.h>
#include <linux/openat2.h>  // struct open_how, RESOLVE_*: glibc 2.36 has no openat2() wrapper, so we call syscall()
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "http.hpp"
#include "net.hpp"

namespace files {

// Rules 1 to 4: the path a target names, relative to the root, or the status that refuses it.
struct Normalized {
  int status = 400;             // 200: `rel` is the path; 400: refused
  std::string rel;              // "docs/a b.txt": decoded segments joined by '/'; "" is the root itself
  bool trailing_slash = false;  // the path ended in '/' (or "."): it must name a directory
};

// What lookup() found.
struct Lookup {
  int status = 500;               // 200, 301, 400, 403, 404, 500 or 503
  Fd file;                        // 200: the open regular file (read-only, O_NONBLOCK)
  off_t size = 0;                 // 200: its size when it was opened: the Content-Length
  std::time_t mtime = 0;          // 200: its modification time (seconds): Last-Modified
  std::string etag;               // 200: entity_tag() of its size and mtime (nanoseconds): ETag
  std::string_view content_type;  // 200: from the file name's extension
  std::string location;           // 301: where the directory is, with its trailing slash: directory_location()
};

namespace detail {

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes one segment into `out`. False on a bad escape, or on a decoded '/' or NUL (rule 3).
inline bool decode_segment(std::string_view segment, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < segment.size(); ++i) {
    char c = segment[i];
    if (c == '%') {
      if (i + 2 >= segment.size()) return false;  // fewer than two characters after the '%'
      int hi = hex_value(segment[i + 1]), lo = hex_value(segment[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '/' || c == '\0') return false;
    out += c;
  }
  return true;
}

}  // namespace detail

// Rules 1 to 4, without touching the file system: what the unit tests and the fuzzer check.
inline Normalized normalize(std::string_view target) {
  const Normalized refused;  // status 400, no path
  if (target.empty() || target.front() != '/') return refused;  // rule 1
  std::string_view path = target.substr(0, target.find('?'));  // rule 2
  // The parser has already refused whitespace and control bytes in a target; refuse them here too, so that this
  // function keeps its promises (no NUL in `rel`) whoever calls it.
  for (unsigned char c : path)
    if (c <= ' ' || c == 0x7f) return refused;
  Normalized n;
  std::string segment;
  for (std::size_t start = 1;;) {  // start: just after a '/'
    std::size_t slash = path.find('/', start);
    bool last = slash == std::string_view::npos;
    std::string_view raw = path.substr(start, last ? path.npos : slash - start);
    if (!detail::decode_segment(raw, segment)) return refused;  // rule 3
    if (segment == "..") return refused;                        // rule 4
    if (!segment.empty() && segment != ".") {
      if (!n.rel.empty()) n.rel += '/';
      n.rel += segment;
    }
    if (last) {
      n.trailing_slash = segment.empty() || segment == ".";
      break;
    }
    start = slash + 1;
  }
  n.status = 200;
  return n;
}

namespace detail {

// RFC 3986 3.3: pchar = unreserved / pct-encoded / sub-delims / ":" / "@". These bytes may stand for themselves in
// a path segment or a query; any other byte must be percent-encoded there. (Written out rather than with
// std::isalnum(), whose answer for bytes above 127 depends on the locale.)
inline bool is_pchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-._~!$&'()*+,;=:@").find(static_cast<char>(c)) != std::string_view::npos;
}

inline void append_escaped(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789ABCDEF";  // RFC 3986 2.1: upper case
  out += '%';
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

}  // namespace detail

// Rule 7: the Location of the directory `rel` (normalize()'s path) named without its trailing slash. `query` is
// the target's, from its '?' ("" for none).
//
// Built from what normalize() validated, never copied from the request: echoing the target turned
// "GET //evil.example" into "Location: //evil.example/", which a browser reads as a network-path reference
// (RFC 3986 4.2), that is the host evil.example: an open redirect. Here the path is one '/', then the decoded
// segments, percent-encoded again where RFC 3986 requires it and joined by '/', then the trailing slash;
// normalize() keeps no empty segment, so "//" cannot appear. The query is the client's, kept so that it reaches
// the index, with the bytes a URI may not hold ('"', '<', '#', a '%' that starts no escape, bytes above 127...)
// encoded, because Location is a URI-reference (RFC 9110 10.2.2). (The parser has already refused whitespace and
// control bytes, so no CR or LF could reach the header anyway.)
inline std::string directory_location(std::string_view rel, std::string_view query) {
  std::string out = "/";
  for (unsigned char c : rel) {  // a '/' in rel separates segments: rule 3 refused any inside one
    if (c == '/' || detail::is_pchar(c)) {
      out += static_cast<char>(c);
    } else {
      detail::append_escaped(out, c);
    }
  }
  if (!rel.empty()) out += '/';  // "" is the root, already "/" (and never redirected: "/" has its slash)
  for (std::size_t i = 0; i < query.size(); ++i) {
    auto c = static_cast<unsigned char>(query[i]);
    bool escape = c == '%' && i + 2 < query.size() && detail::hex_value(query[i + 1]) >= 0 &&
                  detail::hex_value(query[i + 2]) >= 0;  // an escape the client made: keep it as it is
    if (detail::is_pchar(c) || c == '/' || c == '?' || escape) {
      out += static_cast<char>(c);
    } else {
      detail::append_escaped(out, c);
    }
  }
  return out;
}

// The Content-Type for a file name, from its extension (case-insensitive). Text types say they are UTF-8.
inline std::string_view content_type(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {"html", "text/html; charset=utf-8"},  {"htm", "text/html; charset=utf-8"},
      {"css", "text/css; charset=utf-8"},    {"js", "text/javascript; charset=utf-8"},
      {"mjs", "text/javascript; charset=utf-8"}, {"json", "application/json"},
      {"txt", "text/plain; charset=utf-8"},  {"md", "text/markdown; charset=utf-8"},
      {"csv", "text/csv; charset=utf-8"},    {"xml", "text/xml; charset=utf-8"},
      {"svg", "image/svg+xml"},              {"png", "image/png"},
      {"jpg", "image/jpeg"},                 {"jpeg", "image/jpeg"},
      {"gif", "image/gif"},                  {"ico", "image/x-icon"},
      {"webp", "image/webp"},                {"avif", "image/avif"},
      {"bmp", "image/bmp"},                  {"wasm", "application/wasm"},
      {"pdf", "application/pdf"},            {"swf", "application/x-shockwave-flash"},
      {"zip", "application/zip"},            {"gz", "application/gzip"},
      {"tar", "application/x-tar"},          {"mp3", "audio/mpeg"},
      {"mp4", "video/mp4"},                  {"webm", "video/webm"},
      {"ogg", "audio/ogg"},                  {"woff", "font/woff"},
      {"woff2", "font/woff2"},               {"ttf", "font/ttf"},
      {"otf", "font/otf"},
  };
  std::size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  std::size_t dot = name.rfind('.');
  if (dot != std::string_view::npos) {
    std::string_view ext = name.substr(dot + 1);
    for (const auto& [known, type] : kTypes)
      if (::http::detail::iequals(ext, known)) return type;
  }
  return "application/octet-stream";
}

// IMF-fixdate (RFC 9110 5.6.7), the one date format a server sends: "Sun, 06 Nov 1994 08:49:37 GMT".
// Written by hand rather than with strftime(), whose day and month names follow the locale.
inline std::string format_http_date(std::time_t t) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm{};
  if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday], tm.tm_mday,
                kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return text;
}

// An If-Modified-Since value, parsed strictly as IMF-fixdate; std::nullopt for anything else. RFC 9110 13.1.3 says
// to ignore a value that is not a valid date, which is safe: the client then gets the whole file. Strict means
// exactly what format_http_date() would write back (so a wrong weekday or "Feb 30" is not a date).
inline std::optional<std::time_t> parse_http_date(std::string_view text) {
  if (text.size() != 29) return std::nullopt;  // "Sun, 06 Nov 1994 08:49:37 GMT"
  std::string s(text);
  std::tm tm{};
  const char* end = ::strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return std::nullopt;
  std::time_t t = ::timegm(&tm);
  if (format_http_date(t) != s) return std::nullopt;
  return t;
}

// ---------------------------------------------------------------------------------------------------------------
// Validators and ranges (RFC 9110 8.8, 13, 14): pure functions of the request's fields and the file's size and
// mtime, which respond() (response.hpp) applies in the order RFC 9110 13.2.2 gives:
//
// [excerpt:preconditions]
//   1. If-None-Match, when present and well-formed: "*" or a tag that weakly matches ours -> 304 (GET, HEAD).
//   2. Otherwise If-Modified-Since: the file not modified since that date -> 304. (Step 1 present: ignored.)
//   3. Range, on GET only (14.2: a server MUST ignore it for a method whose range handling is not defined, and
//      only GET's is), when If-Range is absent or still names this file: one satisfiable range -> 206, none -> 416.
//   4. Anything else -> 200, the whole file.
// [/excerpt:preconditions]
//
// The functions never fail: a field they cannot read is ignored, which is always safe, since the client then gets
// the whole file. (If-Match and If-Unmodified-Since, the preconditions of writers, are not implemented.)

// The ETag of a file: a strong validator (RFC 9110 8.8.3) from its size and its modification time in nanoseconds,
// both in hex: "\"2f-1665a1b2c3d4e5f6\"". Any write moves the mtime, so the tag changes; the size catches a write
// that lands within one tick of the file system's clock (the mtime may then stay put, an append's size does not).
// What it cannot see: a same-size rewrite within one tick, or a file put back with its old mtime (`cp -p`,
// `rsync -t`, `touch -d`). nginx and Apache derive their tags from the same two facts and live with that; a hash of
// the content would see everything, at the price of reading every file before its first byte is sent.
inline std::string entity_tag(off_t size, timespec mtime) {
  // Unsigned arithmetic: a date before 1970 (negative tv_sec) wraps, and still gives a tag that differs.
  const std::uint64_t ns = static_cast<std::uint64_t>(mtime.tv_sec) * 1000000000u +
                           static_cast<std::uint64_t>(mtime.tv_nsec);
  char text[40];
  std::snprintf(text, sizeof text, "\"%llx-%llx\"", static_cast<unsigned long long>(size),
                static_cast<unsigned long long>(ns));
  return text;
}

// If-None-Match (RFC 9110 13.1.2): true when `field` names the file whose (strong) tag is `etag`: it is "*", or a
// list of entity-tags one of which weakly matches (8.8.3.2: the opaque-tags are equal, a "W/" on either side ignored).
// Then a GET or HEAD gets 304. std::nullopt when the field is absent or is not such a list: it is ignored, and
// If-Modified-Since decides in its place. The parser joins several If-None-Match lines with ", ".
//
// An opaque-tag may hold a comma ("\"a,b\""), so the list is read tag by tag, not split on commas.
inline std::optional<bool> if_none_match(std::string_view field, std::string_view etag) {
  const auto ows = [](char c) { return c == ' ' || c == '\t'; };
  std::size_t i = 0;
  while (i < field.size() && ows(field[i])) ++i;
  std::size_t end = field.size();
  while (end > i && ows(field[end - 1])) --end;
  field = field.substr(i, end - i);
  if (field.empty()) return std::nullopt;
  if (field == "*") return true;  // any current representation: the file exists, so this one
  bool matched = false;
  bool any = false;
  for (i = 0;;) {
    while (i < field.size() && (ows(field[i]) || field[i] == ',')) ++i;  // 5.6.1: empty elements are allowed
    if (i == field.size()) break;
    if (field.compare(i, 2, "W/") == 0) i += 2;  // a weak tag: the weak comparison ignores the flag
    if (i == field.size() || field[i] != '"') return std::nullopt;
    std::size_t close = i + 1;
    // etagc = %x21 / %x23-7E / obs-text: any visible byte but '"', or a byte above 127
    for (; close < field.size() && field[close] != '"'; ++close) {
      const auto c = static_cast<unsigned char>(field[close]);
      if (c < 0x21 || c == 0x7f) return std::nullopt;
    }
    if (close == field.size()) return std::nullopt;  // no closing quote
    matched = matched || field.substr(i, close + 1 - i) == etag;
    any = true;
    i = close + 1;
    while (i < field.size() && ows(field[i])) ++i;
    if (i < field.size() && field[i] != ',') return std::nullopt;  // two tags without a comma between them
  }
  if (!any) return std::nullopt;
  return matched;
}

// If-Range (RFC 9110 13.1.5): whether a Range still applies. An entity-tag must strongly match ours (8.8.3.2: both
// strong and equal; ours is strong, so a "W/" tag never does), an HTTP-date must be exactly Last-Modified. Anything
// else, including a value that is neither, means the file changed since the client got its first part: it gets
// the whole file (200), rather than a piece of a new file to append to a piece of the old one. An empty field (none
// sent) lets the range apply.
//
// Exact equality is the simple reading of 13.1.5's date rule; 8.8.2.2 calls a date strong only if the file cannot
// have changed twice within that second, which a server cannot know. A client that has an ETag sends that instead.
inline bool if_range_allows(std::string_view field, std::string_view etag, std::time_t mtime) {
  if (field.empty() || field == etag) return true;
  const auto date = parse_http_date(field);
  return date && *date == mtime;
}

// What a Range field asks of a file of `size` bytes (RFC 9110 14.1.2, 14.2).
struct Range {
  enum Kind {
    kWhole,          // no usable Range: 200 and the whole file
    kPart,           // 206: `length` bytes from `first`
    kUnsatisfiable,  // 416, with "Content-Range: bytes */size"
  };
  Kind kind = kWhole;
  off_t first = 0;
  off_t length = 0;
};

namespace detail {

// 1*DIGIT, saturating at the largest off_t (a first-pos past every file is merely unsatisfiable; a last-pos or a
// suffix-length past it means "to the end"). False when `digits` is empty or holds anything else.
inline bool parse_position(std::string_view digits, off_t& out) {
  if (digits.empty()) return false;
  constexpr off_t kMax = std::numeric_limits<off_t>::max();
  out = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    const int d = c - '0';
    out = out > (kMax - d) / 10 ? kMax : out * 10 + d;
  }
  return true;
}

}  // namespace detail

// [excerpt:parse-range]
// Range: bytes=first-last | first- | -suffix (14.1.1), one range only:
//   "bytes=0-99"   the first 100 bytes      "bytes=100-"  from byte 100 to the end
//   "bytes=-100"   the last 100 bytes       a last-pos past the end is read as the end
// Unsatisfiable (416): a first-pos at or past the end (of an empty file too), or a suffix of 0 bytes. Whole file
// (200) for everything else: no field, a unit other than bytes, a syntax error (last < first, a sign, a space in a
// number...; 14.2 lets a server ignore the field), several ranges (one 206 of each would need a multipart body;
// the whole file is an answer 14.2 allows), or a suffix of an empty file (satisfiable by 14.1.1, but no
// Content-Range can name zero bytes: the whole, empty file is the honest answer).
inline Range parse_range(std::string_view field, off_t size) {
  const Range whole;
  const std::size_t equals = field.find('=');
  if (equals == std::string_view::npos || !::http::detail::iequals(field.substr(0, equals), "bytes")) return whole;
  std::string_view spec;  // the one non-empty element of the range-set (5.6.1: empty elements are allowed)
  for (std::size_t at = equals + 1; at <= field.size();) {
    const std::size_t comma = std::min(field.find(',', at), field.size());
    std::string_view element = field.substr(at, comma - at);
    while (!element.empty() && (element.front() == ' ' || element.front() == '\t')) element.remove_prefix(1);
    while (!element.empty() && (element.back() == ' ' || element.back() == '\t')) element.remove_suffix(1);
    if (!element.empty()) {
      if (!spec.empty()) return whole;  // several ranges
      spec = element;
    }
    at = comma + 1;
  }
  const std::size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return whole;
  off_t first = 0, last = 0;
  Range r;
  if (dash == 0) {  // suffix-range: the last N bytes
    off_t n = 0;
    if (!detail::parse_position(spec.substr(1), n)) return whole;
    if (n == 0) return Range{Range::kUnsatisfiable};
    if (size == 0) return whole;
    r.length = std::min(n, size);
    r.first = size - r.length;
  } else {  // int-range: first-pos "-" [ last-pos ]
    if (!detail::parse_position(spec.substr(0, dash), first)) return whole;
    const std::string_view rest = spec.substr(dash + 1);
    last = std::numeric_limits<off_t>::max();
    if (!rest.empty() && !detail::parse_position(rest, last)) return whole;
    if (last < first) return whole;  // 14.1.1: an invalid range-spec
    if (first >= size) return Range{Range::kUnsatisfiable};
    r.first = first;
    r.length = std::min(last, size - 1) - first + 1;
  }
  r.kind = Range::kPart;
  return r;
}
// [/excerpt:parse-range]

namespace detail {

// Rule 6: what an errno from opening says to the client.
inline int status_for_errno(int err) {
  switch (err) {
    case ENOENT: case ENOTDIR: case ELOOP: case EXDEV: case ENAMETOOLONG: return 404;
    case EACCES: case EPERM: return 403;
    case EMFILE: case ENFILE: return 503;
    default: return 500;
  }
}

constexpr int kOpenFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;

// Rule 5, the fallback: walks `rel` one segment at a time, refusing every symbolic link (O_NOFOLLOW), so nothing
// can lead outside the root (normalize() has already refused ".."). Returns an fd, or -1 with errno set.
inline int open_walking(int root_fd, const std::string& rel, bool trailing_slash) {
  if (rel.empty()) return ::openat(root_fd, ".", kOpenFlags | O_DIRECTORY);
  Fd dir;  // the directory reached so far; invalid: the root
  std::size_t start = 0;
  for (;;) {
    std::size_t slash = rel.find('/', start);
    std::string segment = rel.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    int at = dir.valid() ? dir.get() : root_fd;
    if (slash == std::string::npos)  // the last one: a directory if the path ended in '/'
      return ::openat(at, segment.c_str(), kOpenFlags | O_NOFOLLOW | (trailing_slash ? O_DIRECTORY : 0));
    int next = ::openat(at, segment.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return -1;
    dir.reset(next);
    start = slash + 1;
  }
}

// Whether this kernel lets us call openat2; asked once per process.
inline bool have_openat2() {
  static const bool have = [] {
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    long fd = ::syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how);
    if (fd >= 0) ::close(static_cast<int>(fd));
    return fd >= 0 || (errno != ENOSYS && errno != EPERM);
  }();
  return have;
}

// Rule 5: opens `rel` (a directory when trailing_slash) beneath the root. Returns an fd, or -1 with errno set.
inline int open_beneath(int root_fd, const std::string& rel, bool trailing_slash) {
  if (!have_openat2()) return open_walking(root_fd, rel, trailing_slash);
  // The trailing slash goes to the kernel with the path: "file/" then fails with ENOTDIR.
  std::string path = rel.empty() ? "." : trailing_slash ? rel + "/" : rel;
  open_how how{};
  how.flags = kOpenFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  for (;;) {
    long fd = ::syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != EINTR) return static_cast<int>(fd);
  }
}

}  // namespace detail

// Rules 1 to 8: the file a request target names under the directory `root_fd`, or the status that refuses it.
inline Lookup lookup(int root_fd, std::string_view target) {
  Lookup r;
  Normalized n = normalize(target);
  if (n.status != 200) {
    r.status = n.status;
    return r;
  }
  Fd fd(detail::open_beneath(root_fd, n.rel, n.trailing_slash));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    r.status = detail::status_for_errno(errno);
    return r;
  }
  std::string name = n.rel;  // what the Content-Type comes from
  if (S_ISDIR(st.st_mode)) {  // rule 7
    if (!n.trailing_slash) {
      r.status = 301;
      std::size_t query = target.find('?');
      r.location = directory_location(n.rel, query == std::string_view::npos ? "" : target.substr(query));
      return r;
    }
    name = n.rel.empty() ? "index.html" : n.rel + "/index.html";
    Fd index(detail::open_beneath(root_fd, name, false));
    if (!index.valid() || ::fstat(index.get(), &st) != 0) {
      int status = detail::status_for_errno(errno);
      r.status = status == 404 ? 403 : status;  // no index.html: the directory cannot be listed
      return r;
    }
    fd = std::move(index);  // closes the directory
  }
  if (!S_ISREG(st.st_mode)) {  // rule 8 (and an index.html that is not a regular file)
    r.status = 403;
    return r;
  }
  r.status = 200;
  r.file = std::move(fd);
  r.size = st.st_size;
  r.mtime = st.st_mtime;
  r.etag = entity_tag(st.st_size, st.st_mtim);
  r.content_type = content_type(name);
  return r;
}

}  // namespace files
