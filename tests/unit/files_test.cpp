// Unit tests of common/files.hpp: the path rules, the lookup under a real temporary root, types and dates.
#include "common/files.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

using files::normalize;

struct Case {
  std::string target;
  std::string rel;
  bool trailing_slash;
};

TEST(Normalize, KeepsWhatStaysInsideTheRoot) {
  const std::vector<Case> ok = {
      {"/", "", true},
      {"/a.txt", "a.txt", false},
      {"/a/b/c.css", "a/b/c.css", false},
      {"/dir/", "dir", true},
      {"//etc/passwd", "etc/passwd", false},  // empty segments are dropped: it stays under the root
      {"/a//b///c", "a/b/c", false},
      {"/./a/./b", "a/b", false},
      {"/a/.", "a", true},    // "/a/." is "/a/" (RFC 3986 5.2.4)
      {"/a/%2e", "a", true},  // "." in any spelling
      {"/%2E/a", "a", false},
      {"/a%20b.txt", "a b.txt", false},
      {"/a.txt?x=1", "a.txt", false},
      {"/a.txt?x=/../../etc/passwd", "a.txt", false},  // the query is not part of the path
      {"/dir/?x", "dir", true},
      {"/a%3fb", "a?b", false},
      {"/%7Euser/%41", "~user/A", false},
      {"/a#frag", "a#frag", false},  // '#' never reaches a server: an ordinary byte here
      {"/...", "...", false},        // not a dot-segment: an ordinary name
      {"/..a/b..", "..a/b..", false},
      {"/a+b", "a+b", false},  // '+' is not a space in a path
  };
  for (const Case& c : ok) {
    files::Normalized n = normalize(c.target);
    EXPECT_EQ(n.status, 200) << c.target;
    EXPECT_EQ(n.rel, c.rel) << c.target;
    EXPECT_EQ(n.trailing_slash, c.trailing_slash) << c.target;
  }
}

TEST(Normalize, RefusesEveryOtherSpelling) {
  const std::vector<std::string> bad = {
      "",
      "*",                      // asterisk-form
      "http://h/a.txt",         // absolute-form: http.hpp's parser turns it into origin-form first
      "a.txt",                  // no leading '/'
      "/..",                    // ".." in any spelling, anywhere
      "/../etc/passwd",
      "/a/../b",                // even one that would stay inside the root
      "/a/..",
      "/a/../",
      "/%2e%2e/etc/passwd",
      "/%2E%2E/etc/passwd",
      "/%2E./etc/passwd",
      "/.%2e/etc/passwd",
      "/.%2E",
      "/a/%2e%2e?x",
      "/%2f",                   // a '/' inside a segment
      "/%2Fetc%2Fpasswd",
      "/..%2fetc",
      "/a%2F..%2F..%2Fetc",
      "/%00",                   // a NUL inside a segment
      "/a.txt%00.png",
      "/%zz",                   // bad escapes
      "/%4",
      "/%",
      "/a%",
      "/a%g0",
      "/a%0g",
      "/a b",                   // raw whitespace and control bytes (the parser refuses them first)
      std::string("/a\0b", 4),
      "/a\tb",
      "/a\x7f",
  };
  for (const std::string& t : bad) {
    files::Normalized n = normalize(t);
    EXPECT_EQ(n.status, 400) << t;
    EXPECT_EQ(n.rel, "") << t;
  }
}

// A temporary root, and a file just outside it that no request may ever reach:
//
//   <tmp>/outside.txt          "SECRET"
//   <tmp>/root/a.txt           "hello"
//   <tmp>/root/a b.txt, UPPER.PNG, dir/index.html, dir/sub/ (no index), noindex/, indexdir/index.html/ (a dir)
//   <tmp>/root/evil.example/, a b/, 100%/, q?dir/, ü/ (directories whose names look like hosts or need escapes)
//   <tmp>/root/link-in -> a.txt, link-dir -> dir, link-out -> ../outside.txt, link-abs -> <tmp>/outside.txt,
//   link-up -> .., fifo, secret.txt (mode 000)
class Root : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/psp-files-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    top_ = tmpl;
    root_ = top_ + "/root";
    write(top_ + "/outside.txt", "SECRET");
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    for (const char* d : {"dir", "dir/sub", "noindex", "indexdir", "indexdir/index.html", "evil.example", "a b", "100%",
                          "q?dir", "\xc3\xbc"})
      ASSERT_EQ(::mkdir((root_ + "/" + d).c_str(), 0755), 0);
    write(root_ + "/a.txt", "hello");
    write(root_ + "/a b.txt", "spaced");
    write(root_ + "/UPPER.PNG", "png");
    write(root_ + "/dir/index.html", "<h1>dir</h1>");
    write(root_ + "/secret.txt", "no");
    ASSERT_EQ(::chmod((root_ + "/secret.txt").c_str(), 0), 0);
    ASSERT_EQ(::symlink("a.txt", (root_ + "/link-in").c_str()), 0);
    ASSERT_EQ(::symlink("dir", (root_ + "/link-dir").c_str()), 0);
    ASSERT_EQ(::symlink("../outside.txt", (root_ + "/link-out").c_str()), 0);
    ASSERT_EQ(::symlink((top_ + "/outside.txt").c_str(), (root_ + "/link-abs").c_str()), 0);
    ASSERT_EQ(::symlink("..", (root_ + "/link-up").c_str()), 0);
    ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
    root_fd_.reset(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_.valid());
  }
  void TearDown() override { std::system(("rm -rf '" + top_ + "'").c_str()); }

  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  files::Lookup lookup(const std::string& target) { return files::lookup(root_fd_.get(), target); }

  // The bytes of an open file, from the start.
  static std::string contents(const Fd& fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    for (off_t at = 0; (n = ::pread(fd.get(), buf, sizeof buf, at)) > 0; at += n) s.append(buf, n);
    return s;
  }

  std::string top_, root_;
  Fd root_fd_;
};

TEST_F(Root, ServesARegularFile) {
  files::Lookup r = lookup("/a.txt");
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(r.file.valid());
  EXPECT_EQ(r.size, 5);
  EXPECT_EQ(contents(r.file), "hello");
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  struct stat st {};
  ASSERT_EQ(::stat((root_ + "/a.txt").c_str(), &st), 0);
  EXPECT_EQ(r.mtime, st.st_mtime);
  EXPECT_EQ(r.etag, files::entity_tag(st.st_size, st.st_mtim));
  EXPECT_TRUE(::fcntl(r.file.get(), F_GETFD) & FD_CLOEXEC);

  EXPECT_EQ(lookup("/a%20b.txt").status, 200);
  EXPECT_EQ(lookup("/a.txt?v=2").status, 200);
  EXPECT_EQ(lookup("//a.txt").status, 200);
  EXPECT_EQ(lookup("/UPPER.PNG").content_type, "image/png");
}

TEST_F(Root, DirectoriesServeTheirIndexOrRedirectOrRefuse) {
  files::Lookup r = lookup("/dir");
  EXPECT_EQ(r.status, 301);
  EXPECT_EQ(r.location, "/dir/");
  EXPECT_FALSE(r.file.valid());
  EXPECT_EQ(lookup("/dir?x=1").location, "/dir/?x=1");  // the query goes along
  EXPECT_EQ(lookup("/dir/sub").location, "/dir/sub/");

  r = lookup("/dir/");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(contents(r.file), "<h1>dir</h1>");
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(lookup("/dir/.").status, 200);
  EXPECT_EQ(lookup("/dir/index.html").status, 200);

  EXPECT_EQ(lookup("/").status, 403);  // the root has no index.html
  EXPECT_EQ(lookup("/noindex/").status, 403);
  EXPECT_EQ(lookup("/dir/sub/").status, 403);
  EXPECT_EQ(lookup("/indexdir/").status, 403);  // its index.html is a directory

  write(root_ + "/index.html", "home");
  r = lookup("/");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(contents(r.file), "home");
}

// Rule 7's Location is built from the segments normalize() kept, percent-encoded again, never copied from the
// target: "//evil.example" echoed back as "Location: //evil.example/" is a network-path reference (RFC 3986 4.2),
// which a browser follows to the host evil.example.
TEST_F(Root, RedirectsStayOnThisSite) {
  struct Want {
    std::string target, location;
  };
  const std::vector<Want> cases = {
      {"//evil.example", "/evil.example/"},
      {"///evil.example", "/evil.example/"},
      {"/.//evil.example", "/evil.example/"},
      {"/%2e//evil.example", "/evil.example/"},
      {"//evil.example?x=1", "/evil.example/?x=1"},                         // the query is kept
      {"//evil.example?//evil.example", "/evil.example/?//evil.example"},  // where it is only a query
      {"/%65vil.example", "/evil.example/"},  // unreserved bytes are sent plain (RFC 3986 2.3)
      {"/a%20b", "/a%20b/"},
      {"/100%25", "/100%25/"},
      {"/q%3fdir", "/q%3Fdir/"},  // a '?' in a name must not start a query
      {"/%C3%BC", "/%C3%BC/"},    // nor bytes outside ASCII appear raw: Location is a URI (RFC 9110 10.2.2)
      {"//dir//sub", "/dir/sub/"},
      {"/dir?a=<b>|%zz%2F#f", "/dir/?a=%3Cb%3E%7C%25zz%2F%23f"},  // query bytes a URI may not hold are encoded
  };
  for (const Want& w : cases) {
    files::Lookup r = lookup(w.target);
    EXPECT_EQ(r.status, 301) << w.target;
    EXPECT_EQ(r.location, w.location) << w.target;
    EXPECT_NE(r.location.rfind("//", 0), 0u) << w.target;
    // Following the redirect names the same directory, now with its slash.
    files::Normalized there = normalize(r.location), here = normalize(w.target);
    EXPECT_EQ(there.rel, here.rel) << w.target;
    EXPECT_TRUE(there.trailing_slash) << w.target;
  }
  // A '/' spelled %2f is refused before any redirect (rule 3).
  for (const char* t : {"/%2fevil.example", "/%2F%2Fevil.example", "/%2f/evil.example"}) {
    files::Lookup r = lookup(t);
    EXPECT_EQ(r.status, 400) << t;
    EXPECT_EQ(r.location, "") << t;
  }
}

TEST_F(Root, MissingThingsAre404) {
  EXPECT_EQ(lookup("/missing").status, 404);
  EXPECT_EQ(lookup("/missing/").status, 404);
  EXPECT_EQ(lookup("/missing/a.txt").status, 404);
  EXPECT_EQ(lookup("/a.txt/").status, 404);  // a file followed by a slash
  EXPECT_EQ(lookup("/a.txt/x").status, 404);
  EXPECT_EQ(lookup("/" + std::string(5000, 'a')).status, 404);  // ENAMETOOLONG
  EXPECT_EQ(lookup("/outside.txt").status, 404);
}

TEST_F(Root, SymbolicLinksInsideAreFollowedAndOutsideAre404) {
  files::Lookup r = lookup("/link-in");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(contents(r.file), "hello");
  EXPECT_EQ(lookup("/link-dir/").status, 200);
  EXPECT_EQ(lookup("/link-dir").status, 301);
  for (const char* escape : {"/link-out", "/link-abs", "/link-up/outside.txt", "/link-up/", "/link-up/root/a.txt"})
    EXPECT_EQ(lookup(escape).status, 404) << escape;
}

TEST_F(Root, TraversalNeverReachesTheFileOutside) {
  for (const char* t : {"/../outside.txt", "/%2e%2e/outside.txt", "/.%2E/outside.txt", "/%2E./outside.txt",
                        "/..%2foutside.txt", "/dir/../../outside.txt", "//../outside.txt", "/%2e%2e%2foutside.txt",
                        "/link-up/outside.txt", "/link-out", "/link-abs", "http://h/../outside.txt"}) {
    files::Lookup r = lookup(t);
    EXPECT_NE(r.status, 200) << t;
    EXPECT_FALSE(r.file.valid()) << t;
  }
}

TEST_F(Root, AFifoIs403AndOpeningItDoesNotBlock) {
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(lookup("/fifo").status, 403);  // no writer: a blocking open would wait here forever
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(Root, AnUnreadableFileIs403) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  EXPECT_EQ(lookup("/secret.txt").status, 403);
}

// The fallback for kernels without openat2 refuses every symbolic link, and still finds everything else.
TEST_F(Root, TheWalkingFallbackRefusesAllSymbolicLinks) {
  auto open_walking = [&](const std::string& rel, bool slash) {
    errno = 0;
    Fd fd(files::detail::open_walking(root_fd_.get(), rel, slash));
    return fd.valid() ? 200 : files::detail::status_for_errno(errno);
  };
  EXPECT_EQ(open_walking("a.txt", false), 200);
  EXPECT_EQ(open_walking("a b.txt", false), 200);
  EXPECT_EQ(open_walking("dir", true), 200);
  EXPECT_EQ(open_walking("dir/index.html", false), 200);
  EXPECT_EQ(open_walking("", true), 200);
  EXPECT_EQ(open_walking("a.txt", true), 404);
  EXPECT_EQ(open_walking("missing", false), 404);
  for (const char* link : {"link-in", "link-out", "link-abs"}) EXPECT_EQ(open_walking(link, false), 404) << link;
  EXPECT_EQ(open_walking("link-dir", true), 404);
  EXPECT_EQ(open_walking("link-dir/index.html", false), 404);
  EXPECT_EQ(open_walking("link-up/outside.txt", false), 404);
}

TEST(Files, ErrnoToStatus) {
  using files::detail::status_for_errno;
  for (int e : {ENOENT, ENOTDIR, ELOOP, EXDEV, ENAMETOOLONG}) EXPECT_EQ(status_for_errno(e), 404) << e;
  for (int e : {EACCES, EPERM}) EXPECT_EQ(status_for_errno(e), 403) << e;
  for (int e : {EMFILE, ENFILE}) EXPECT_EQ(status_for_errno(e), 503) << e;
  EXPECT_EQ(status_for_errno(EIO), 500);
}

TEST(Files, ContentTypeFromTheExtension) {
  using files::content_type;
  EXPECT_EQ(content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type("INDEX.HTM"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type("a/b/style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(content_type("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type("m.mjs"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type("d.json"), "application/json");
  EXPECT_EQ(content_type("p.JPG"), "image/jpeg");
  EXPECT_EQ(content_type("p.jpeg"), "image/jpeg");
  EXPECT_EQ(content_type("i.svg"), "image/svg+xml");
  EXPECT_EQ(content_type("m.wasm"), "application/wasm");
  EXPECT_EQ(content_type("f.woff2"), "font/woff2");
  EXPECT_EQ(content_type("x.tar.gz"), "application/gzip");
  EXPECT_EQ(content_type("doc.pdf"), "application/pdf");
  EXPECT_EQ(content_type("movie.swf"), "application/x-shockwave-flash");
  for (const char* other : {"README", "x.", ".bashrc", "dir.d/file", "a.exe", "a.html.bak", ""})
    EXPECT_EQ(content_type(other), "application/octet-stream") << other;
}

TEST(Files, HttpDatesRoundTrip) {
  EXPECT_EQ(files::format_http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(files::format_http_date(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");  // RFC 9110's example
  EXPECT_EQ(files::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), std::time_t(784111777));
  const std::time_t now = std::time(nullptr);
  for (std::time_t t : {std::time_t(0), std::time_t(951782400) /* 29 Feb 2000 */, std::time_t(2147483648),
                        std::time_t(4102444799), now}) {
    std::string text = files::format_http_date(t);
    EXPECT_EQ(files::parse_http_date(text), t) << text;
  }
}

TEST(Files, OnlyAnImfFixdateParses) {
  for (const char* bad : {"", "yesterday", "Sunday, 06-Nov-94 08:49:37 GMT",  // RFC 850 form
                          "Sun Nov  6 08:49:37 1994",                           // asctime form
                          "Mon, 06 Nov 1994 08:49:37 GMT",                      // the wrong weekday
                          "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 25:49:37 GMT", "Tue, 31 Feb 2026 00:00:00 GMT",
                          "Sun, 06 Nov 1994 08:49:37 GMT ", " Sun, 06 Nov 1994 08:49:37 GMT",
                          "sun, 06 nov 1994 08:49:37 GMT"})
    EXPECT_FALSE(files::parse_http_date(bad).has_value()) << bad;
}

// ---------------------------------------------------------------------------------------------------------------
// Validators and ranges.

TEST(Validators, TheEtagIsSizeAndMtimeInNanosecondsInHex) {
  EXPECT_EQ(files::entity_tag(0, timespec{0, 0}), "\"0-0\"");
  EXPECT_EQ(files::entity_tag(255, timespec{1, 5}), "\"ff-3b9aca05\"");  // 1 s + 5 ns = 1000000005 ns
  // 5 GiB, and StaticRoot's date: 64 bits on both sides.
  EXPECT_EQ(files::entity_tag(off_t{5} << 30, timespec{1614834367, 0}), "\"140000000-16690b4d1020b600\"");
  // One nanosecond, or one byte, is another tag.
  EXPECT_NE(files::entity_tag(10, timespec{100, 1}), files::entity_tag(10, timespec{100, 2}));
  EXPECT_NE(files::entity_tag(10, timespec{100, 1}), files::entity_tag(11, timespec{100, 1}));
}

TEST(Validators, IfNoneMatchComparesWeakly) {
  const std::string tag = "\"1f-abc\"";
  struct Case {
    const char* field;
    std::optional<bool> matches;
  };
  const Case cases[] = {
      {"\"1f-abc\"", true},
      {"W/\"1f-abc\"", true},  // 8.8.3.2: the weak comparison ignores W/
      {"*", true},
      {"  *  ", true},
      {"\"x\", \"1f-abc\"", true},
      {"\"x\",\"1f-abc\"", true},
      {"\"x\", , W/\"1f-abc\" ,", true},  // 5.6.1: empty list elements are allowed
      {"\"x\", \"y\"", false},
      {"\"1f-ABC\"", false},  // opaque-tags compare byte for byte
      {"\"1f-abc,\"", false},  // a comma inside a tag is part of it
      {"\"\"", false},
      {"", std::nullopt},  // absent
      {"1f-abc", std::nullopt},  // no quotes: not an entity-tag, the field is ignored
      {"\"1f-abc", std::nullopt},
      {"\"a\" \"1f-abc\"", std::nullopt},  // no comma between them
      {"w/\"1f-abc\"", std::nullopt},  // the weak flag is case-sensitive
      {"\"a b\"", std::nullopt},  // etagc has no space
      {"*, \"1f-abc\"", std::nullopt},
      {", ,", std::nullopt},
  };
  for (const Case& k : cases)
    EXPECT_EQ(files::if_none_match(k.field, tag), k.matches) << "If-None-Match: " << k.field;
}

TEST(Validators, IfRangeNeedsTheSameStrongTagOrTheExactDate) {
  const std::string tag = "\"1f-abc\"";
  const std::time_t mtime = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_TRUE(files::if_range_allows("", tag, mtime));  // no If-Range
  EXPECT_TRUE(files::if_range_allows(tag, tag, mtime));
  EXPECT_TRUE(files::if_range_allows("Sun, 06 Nov 1994 08:49:37 GMT", tag, mtime));
  for (const char* stale : {"\"1f-abd\"", "W/\"1f-abc\"", "Sun, 06 Nov 1994 08:49:38 GMT",
                            "Sun, 06 Nov 1994 08:49:36 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "*", "1f-abc"})
    EXPECT_FALSE(files::if_range_allows(stale, tag, mtime)) << "If-Range: " << stale;
}

TEST(Ranges, OneRangeInEachForm) {
  using files::Range;
  struct Case {
    const char* field;
    off_t size;
    Range::Kind kind;
    off_t first;
    off_t length;
  };
  constexpr off_t kMax = std::numeric_limits<off_t>::max();
  const Case cases[] = {
      {"bytes=0-99", 1000, Range::kPart, 0, 100},
      {"bytes=0-0", 1000, Range::kPart, 0, 1},
      {"bytes=999-999", 1000, Range::kPart, 999, 1},
      {"bytes=100-", 1000, Range::kPart, 100, 900},
      {"bytes=-100", 1000, Range::kPart, 900, 100},
      {"bytes=-1", 1000, Range::kPart, 999, 1},
      {"bytes=-5000", 1000, Range::kPart, 0, 1000},       // a suffix longer than the file: all of it
      {"bytes=500-5000", 1000, Range::kPart, 500, 500},   // a last-pos past the end: to the end
      {"bytes=0-99999999999999999999999", 1000, Range::kPart, 0, 1000},  // past off_t: saturates
      {"BYTES=0-9", 1000, Range::kPart, 0, 10},           // the unit is case-insensitive (14.1)
      {"bytes= 0-9 ", 1000, Range::kPart, 0, 10},         // OWS around a list element
      {"bytes=0-9,", 1000, Range::kPart, 0, 10},          // and empty elements (5.6.1)
      {"bytes=5368709000-", off_t{5} << 30, Range::kPart, 5368709000, 120},  // past 4 GiB
      {"bytes=1000-", 1000, Range::kUnsatisfiable, 0, 0},  // first-pos at the end
      {"bytes=999999999-", 1000, Range::kUnsatisfiable, 0, 0},
      {"bytes=99999999999999999999999-", 1000, Range::kUnsatisfiable, 0, 0},
      {"bytes=-0", 1000, Range::kUnsatisfiable, 0, 0},     // a suffix of nothing
      {"bytes=0-", 0, Range::kUnsatisfiable, 0, 0},        // an empty file has no first byte
      {"bytes=-0", 0, Range::kUnsatisfiable, 0, 0},
      {"bytes=-10", 0, Range::kWhole, 0, 0},               // satisfiable, but no Content-Range names 0 bytes
      {"", 1000, Range::kWhole, 0, 0},                     // no Range
      {"bytes=0-1,5-6", 1000, Range::kWhole, 0, 0},        // several ranges: the whole file (14.2)
      {"bytes=0-0,-1", 1000, Range::kWhole, 0, 0},
      {"bytes=10-5", 1000, Range::kWhole, 0, 0},           // last < first: invalid (14.1.1), ignored
      {"bytes=", 1000, Range::kWhole, 0, 0},
      {"bytes=-", 1000, Range::kWhole, 0, 0},
      {"bytes=a-b", 1000, Range::kWhole, 0, 0},
      {"bytes=+1-2", 1000, Range::kWhole, 0, 0},
      {"bytes=1 -2", 1000, Range::kWhole, 0, 0},
      {"bytes=--1", 1000, Range::kWhole, 0, 0},
      {"bytes=0x10-", 1000, Range::kWhole, 0, 0},
      {"bytes=1-2-3", 1000, Range::kWhole, 0, 0},
      {"bytes 0-9", 1000, Range::kWhole, 0, 0},
      {"items=0-9", 1000, Range::kWhole, 0, 0},            // a unit we do not know (14.2: ignore it)
      {"bytes=0-9", kMax, Range::kPart, 0, 10},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string("Range: ") + k.field + " of " + std::to_string(k.size) + " bytes");
    const Range r = files::parse_range(k.field, k.size);
    EXPECT_EQ(r.kind, k.kind);
    if (k.kind == Range::kPart) {
      EXPECT_EQ(r.first, k.first);
      EXPECT_EQ(r.length, k.length);
    }
  }
}

}  // namespace
