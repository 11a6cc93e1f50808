// fuzz/path_fuzz.cpp: a libFuzzer target for files::normalize(), the function that decides which path under
// --root a request target names (common/files.hpp, rules 1 to 4). Every traversal spelling that gets past it is a
// file outside the root; the kernel's RESOLVE_BENEATH is the second wall, and this checks the first one alone.
//
// The input is the request target, byte for byte. The promises, each a crash when broken:
//
//   1. The status is 200 or 400; a 400 comes with no path at all.
//   2. A 200's path is relative and clean: no leading '/', no empty segment (so no "//" and no trailing '/'), no "."
//      or ".." segment, no NUL byte.
//   3. It is stable: the path, percent-encoded again and sent as a target, names the same path (with the same
//      trailing slash). So what the server opens is what a plain request for it would open.
//   4. The query does not matter: anything after the first '?' can change without changing the answer.
//   5. Dates: a text that parses as an HTTP date formats back to exactly that text.
//   6. A directory's redirect stays on this site: its Location starts with exactly one '/', holds only bytes a URI
//      may hold, and, requested in turn, names the same path with a trailing slash.
//   7. Ranges and validators: the input read as a Range field, for files of several sizes, names bytes of the
//      file only (a part is 1 or more bytes, all before the end), whatever overflow the numbers try; read as an
//      If-None-Match field, a list that holds our tag (appended to it) matches.
//
// Build and run with ./fuzz/run_fuzz.sh (it runs parser_fuzz and path_fuzz); fuzz/README.md says more.
#include "common/files.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace {

void require(bool kept, const char* promise) {
  if (kept) return;
  std::fprintf(stderr, "path_fuzz: broken promise: %s\n", promise);
  std::abort();
}

bool same(const files::Normalized& a, const files::Normalized& b) {
  return a.status == b.status && a.rel == b.rel && a.trailing_slash == b.trailing_slash;
}

// Promise 2, segment by segment.
void check_clean(const std::string& rel) {
  require(rel.find('\0') == std::string::npos, "no NUL in the path");
  if (rel.empty()) return;  // the root itself
  require(rel.front() != '/', "the path is relative");
  std::size_t start = 0;
  for (;;) {
    std::size_t slash = rel.find('/', start);
    bool last = slash == std::string::npos;
    std::string_view segment = std::string_view(rel).substr(start, last ? rel.npos : slash - start);
    require(!segment.empty(), "no empty segment");
    require(segment != "." && segment != "..", "no dot-segment");
    if (last) break;
    start = slash + 1;
  }
}

// Promise 3: the target a client would send for `rel`: every byte but the unreserved ones and '/' percent-encoded.
std::string encode(const std::string& rel, bool trailing_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string target = "/";
  for (unsigned char c : rel) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                 c == '_' || c == '~' || c == '/';
    if (plain) {
      target += static_cast<char>(c);
    } else {
      target += '%';
      target += kHex[c >> 4];
      target += kHex[c & 15];
    }
  }
  if (trailing_slash && !rel.empty()) target += '/';
  return target;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(bytes), size);
  const files::Normalized n = files::normalize(target);

  require(n.status == 200 || n.status == 400, "the status is 200 or 400");  // promise 1
  if (n.status == 400) {
    require(n.rel.empty() && !n.trailing_slash, "a 400 has no path");
  } else {
    check_clean(n.rel);
    const files::Normalized again = files::normalize(encode(n.rel, n.trailing_slash));
    require(same(again, n), "the path, encoded again, names the same path");  // promise 3
  }

  // Promise 4: the same target with another query, or with a query where there was none.
  std::string_view path = target.substr(0, target.find('?'));
  std::string other(path);
  other += "?../../%2e%2e/etc/passwd";
  require(same(files::normalize(other), n), "the query does not change the answer");

  if (n.status == 200 && !n.rel.empty()) {  // promise 6 (the root itself is never redirected)
    const std::size_t q = target.find('?');
    const std::string location =
        files::directory_location(n.rel, q == std::string_view::npos ? std::string_view() : target.substr(q));
    require(location.size() >= 2 && location[0] == '/' && location[1] != '/', "a Location starts with one '/'");
    for (unsigned char c : location) {
      const bool never_in_a_uri = std::string_view("\"<>\\^`{|}#").find(static_cast<char>(c)) != std::string_view::npos;
      require(c > ' ' && c < 0x7f && !never_in_a_uri, "a Location holds only URI bytes");
    }
    const files::Normalized there = files::normalize(location);
    require(there.status == 200 && there.rel == n.rel && there.trailing_slash, "a Location names the same directory");
  }

  if (auto t = files::parse_http_date(target))  // promise 5
    require(files::format_http_date(*t) == target, "a parsed date formats back to the same text");

  for (const off_t file_size : {off_t{0}, off_t{1}, off_t{1000}, std::numeric_limits<off_t>::max()}) {  // promise 7
    const files::Range r = files::parse_range(target, file_size);
    if (r.kind == files::Range::kPart)
      require(r.first >= 0 && r.length >= 1 && r.length <= file_size && r.first <= file_size - r.length,
              "a range names bytes of the file only");
  }
  const std::string etag = "\"ab-cd\"";
  const std::optional<bool> listed = files::if_none_match(std::string(target) + ", " + etag, etag);
  require(!listed || *listed, "a list that holds our tag matches");
  return 0;
}
