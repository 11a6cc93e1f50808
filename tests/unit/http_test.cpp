// Unit tests of common/http.hpp: the request parser and the responses.
#include "common/http.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace {

using http::Parse;

Parse parse(const std::string& s, long long max_body = http::kDefaultMaxBody) {
  return http::parse_request(s, max_body);
}

const std::vector<std::string> kValidRequests = {
    "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "HEAD /x?y=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
    "GET /index.html HTTP/1.0\r\n\r\n",
    "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: a\r\n\r\n",  // what ab -k sends
    "GET / HTTP/1.1\nHost: a\n\n",                                   // bare LF line ends
    "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",                         // an empty line before the request
    "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nX-Empty:\r\n\r\n",
    "GET http://a/x?y HTTP/1.1\r\nHost: a\r\n\r\n",                  // absolute-form (RFC 9112 3.2.2)
    "GET / HTTP/1.2\r\nHost: a\r\n\r\n",                             // a higher minor version: handled as 1.1
};

TEST(Parser, AcceptsValidRequests) {
  for (const auto& r : kValidRequests) {
    Parse p = parse(r);
    EXPECT_EQ(p.status, Parse::kComplete) << r;
    EXPECT_EQ(p.length, r.size()) << r;
  }
}

// Every valid request, cut at every byte: each prefix is incomplete, and the whole is complete.
TEST(Parser, EveryPrefixIsIncomplete) {
  for (const auto& r : kValidRequests) {
    for (std::size_t cut = 0; cut < r.size(); ++cut)
      EXPECT_EQ(parse(r.substr(0, cut)).status, Parse::kIncomplete) << "cut at " << cut << " of " << r;
    EXPECT_EQ(parse(r).status, Parse::kComplete);
  }
}

TEST(Parser, ReadsMethodTargetAndKeepAlive) {
  Parse p = parse("HEAD /a%20b?q HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_EQ(p.status, Parse::kComplete);
  EXPECT_TRUE(p.request.head_only);
  EXPECT_TRUE(p.request.keep_alive);
  EXPECT_EQ(p.request.target, "/a%20b?q");

  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, CLOSE\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").request.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nHost: h\r\n\r\n").request.head_only);
}

TEST(Parser, PipelinedRequestsComeOneAtATime) {
  std::string one = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n", two = "HEAD /2 HTTP/1.1\r\nHost: a\r\n\r\n";
  std::string buffer = one + two + "GET /3 HTT";
  Parse p = parse(buffer);
  ASSERT_EQ(p.status, Parse::kComplete);
  EXPECT_EQ(p.request.target, "/1");
  buffer.erase(0, p.length);
  p = parse(buffer);
  ASSERT_EQ(p.status, Parse::kComplete);
  EXPECT_EQ(p.request.target, "/2");
  buffer.erase(0, p.length);
  EXPECT_EQ(parse(buffer).status, Parse::kIncomplete);
}

struct Bad {
  std::string request;
  int status;
};

TEST(Parser, RefusesMalformedRequests) {
  const std::vector<Bad> corpus = {
      {"garbage\r\n\r\n", 400},
      {"GET\r\n\r\n", 400},
      {"GET /\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},               // two spaces
      {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400},               // trailing space
      {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},                // not a token
      {"GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", 400},              // bare CR
      {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},             // bare CR in a value
      {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},               // whitespace before the colon
      {"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  folded\r\n\r\n", 400},  // obs-fold
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n: empty-name\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},                           // HTTP/1.1 without Host
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},     // two Hosts
      {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},              // an invalid Host value
      {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 1\r\n\r\n", 400},
      {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},      // a coding we lack
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},  // chunked not last
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n", 400},
      {"PUT / HTTP/1.1\r\nHost: a\r\n\r\n", 405},
      {"DELETE / HTTP/1.0\r\n\r\n", 405},
      {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
      {"GET / HTTP/0.9\r\n\r\n", 505},
      {"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505},
      {"GET / HTTP/1.2\r\n\r\n", 400},                       // handled as HTTP/1.1, so Host is required
      {"GET / HTTX/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.10\r\n\r\n", 400},
      {std::string("GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n", 28), 400},  // NUL in a value
  };
  for (const auto& bad : corpus) {
    Parse p = parse(bad.request);
    EXPECT_EQ(p.status, Parse::kError) << bad.request;
    EXPECT_EQ(p.error, bad.status) << bad.request;
  }
}

// RFC 9112 3.2.2: a server MUST accept the absolute-form. What comes out is the same origin-form target a client
// would have sent for that URI (RFC 9112 3.2.1: an empty path is sent as "/"), so nothing after the parser sees
// the scheme or the authority.
TEST(Parser, AbsoluteFormBecomesItsPathAndQuery) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://a/x.txt", "/x.txt"},
      {"http://other.example:8080/d/x?y=1", "/d/x?y=1"},
      {"HTTPS://A/x", "/x"},  // scheme and host are case-insensitive (RFC 3986 3.1, 3.2.2)
      {"http://a", "/"},
      {"http://a?q", "/?q"},
      {"http://[::1]:80/x", "/x"},
      {"http://a//evil.example", "//evil.example"},  // the path as sent: files.hpp decides what it names
  };
  for (const auto& [target, want] : cases) {
    Parse p = parse("GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_EQ(p.status, Parse::kComplete) << target;
    EXPECT_EQ(p.request.target, want) << target;
  }
}

// RFC 9112 3.2: the authority-form is for CONNECT and the asterisk-form for OPTIONS; a GET or HEAD with either,
// or with a target in no form at all, is malformed (400). An absolute URI must be an http or https one with a
// host (RFC 9110 4.2.1) and no userinfo (RFC 9110 4.2.4).
TEST(Parser, OtherTargetFormsAre400) {
  for (const char* target : {"*", "a:80", "127.0.0.1:8080", "x", "a.txt", "%2f", "?x", "ftp://a/x", "mailto:a@b",
                             "http:/x", "http:x", "http://", "http:///x", "http://?x", "http://:80/x",
                             "http://u@a/x", "http://a{b}/", "http://a\\b/"}) {
    for (const char* method : {"GET", "HEAD"}) {
      Parse p = parse(std::string(method) + " " + target + " HTTP/1.1\r\nHost: h\r\n\r\n");
      EXPECT_EQ(p.status, Parse::kError) << method << " " << target;
      EXPECT_EQ(p.error, 400) << method << " " << target;
    }
  }
}

// RFC 9110 15.5.6: 405 for a method the server knows but does not allow here (with Allow); 15.6.2: 501 for one
// it does not recognise. Methods are case-sensitive (RFC 9110 9.1), so "get" is not GET.
TEST(Parser, KnownMethodsAre405AndUnknownOnes501) {
  for (const char* method : {"PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
    EXPECT_EQ(parse(std::string(method) + " / HTTP/1.1\r\nHost: h\r\n\r\n").error, 405) << method;
  for (const char* method : {"FOO", "get", "Head", "PROPFIND", "BREW", "GETS"})
    EXPECT_EQ(parse(std::string(method) + " / HTTP/1.1\r\nHost: h\r\n\r\n").error, 501) << method;
  // The forms that belong to OPTIONS and CONNECT are theirs: the method is what we refuse.
  EXPECT_EQ(parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").error, 405);
  EXPECT_EQ(parse("CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n").error, 405);
}

// RFC 9110 6.2, RFC 9112 2.3: a message with a higher minor version of a major version we implement SHOULD be
// processed as the highest minor version we know (1.1). Other major versions are 505.
TEST(Parser, HigherMinorVersionsAreHttp11) {
  for (const char* version : {"HTTP/1.2", "HTTP/1.9"}) {
    Parse p = parse(std::string("GET /v ") + version + "\r\nHost: h\r\n\r\n");
    ASSERT_EQ(p.status, Parse::kComplete) << version;
    EXPECT_TRUE(p.request.keep_alive) << version;  // HTTP/1.1's default
    EXPECT_EQ(p.request.target, "/v");
    EXPECT_FALSE(parse(std::string("GET / ") + version + "\r\nHost: h\r\nConnection: close\r\n\r\n")
                     .request.keep_alive);
  }
  for (const char* version : {"HTTP/0.9", "HTTP/2.0", "HTTP/2.1", "HTTP/3.0", "HTTP/9.9"})
    EXPECT_EQ(parse(std::string("GET / ") + version + "\r\nHost: h\r\n\r\n").error, 505) << version;
}

TEST(Parser, LimitsTheHeadTo8KiB) {
  std::string big = "GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(9000, 'a');
  EXPECT_EQ(parse(big).error, 431);  // incomplete, but already too long: no need to wait for the rest
  EXPECT_EQ(parse(big + "\r\n\r\n").error, 431);
  EXPECT_EQ(parse(std::string(9000, 'G')).error, 414);  // a request line that never ends: its target is too long
  EXPECT_EQ(parse("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n").error, 414);
  EXPECT_EQ(parse(std::string(5000, '\n') + std::string(5000, '\n')).error, 431);  // endless empty lines

  std::string fits = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
  fits += std::string(http::kMaxHead - fits.size() - 4, 'a') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), http::kMaxHead);
  EXPECT_EQ(parse(fits).status, Parse::kComplete);
  EXPECT_EQ(parse(fits.substr(0, fits.size() - 1)).status, Parse::kIncomplete);
}

// Everything a response needs, found in the text (std::string::find keeps the test independent of header order).
TEST(Response, HasTheHeadersAndTheBody) {
  http::Request get;
  get.keep_alive = true;
  std::string r = http::response(get);
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  for (const char* h : {"\r\nServer: psp\r\n", "\r\nDate: ", "\r\nContent-Type: text/plain\r\n",
                        "\r\nContent-Length: 1024\r\n", "\r\nConnection: keep-alive\r\n"})
    EXPECT_NE(r.find(h), std::string::npos) << h;
  std::size_t end = r.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(r.size() - end - 4, http::kBodySize);

  http::Request head;
  head.head_only = true;
  std::string h = http::response(head);
  EXPECT_NE(h.find("\r\nContent-Length: 1024\r\n"), std::string::npos);
  EXPECT_NE(h.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_EQ(h.size(), h.find("\r\n\r\n") + 4);  // no body
}

TEST(Response, ErrorsCloseAndSayWhy) {
  for (int status : {400, 405, 413, 414, 431, 501, 503, 505}) {
    std::string r = http::error_response(status);
    EXPECT_EQ(r.rfind("HTTP/1.1 " + std::to_string(status) + " ", 0), 0u);
    EXPECT_NE(r.find("\r\nConnection: close\r\n"), std::string::npos);
    std::size_t end = r.find("\r\n\r\n");
    std::string body = r.substr(end + 4);
    EXPECT_NE(r.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
    EXPECT_EQ(r.find("Allow:") != std::string::npos, status == 405);
  }
  EXPECT_NE(http::error_response(405).find("\r\nAllow: GET, HEAD, POST\r\n"), std::string::npos);
  EXPECT_NE(http::error_response(405, false, "GET, HEAD").find("\r\nAllow: GET, HEAD\r\n"), std::string::npos);
}

// RFC 9110 9.3.2: a response to HEAD has no content, errors included. Its Content-Length is the one a GET would get.
TEST(Response, ErrorsToHeadHaveNoContent) {
  for (int status : {400, 405, 413, 431, 501}) {
    std::string get = http::error_response(status), head = http::error_response(status, true);
    EXPECT_EQ(head.size(), head.find("\r\n\r\n") + 4) << status;
    EXPECT_EQ(head, get.substr(0, head.size())) << status;
  }
  Parse p = parse("HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n");
  EXPECT_EQ(p.error, 413);
  EXPECT_TRUE(p.request.head_only);  // known before the refusal, so that the server can leave the content out
  EXPECT_TRUE(parse("HEAD / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n").request.head_only);
}

TEST(Response, DateIsAnImfFixdate) {
  std::string d(http::http_date());
  ASSERT_EQ(d.size(), 29u) << d;  // "Sun, 06 Nov 1994 08:49:37 GMT"
  EXPECT_EQ(d.substr(25), " GMT");
}

// A body framed by Content-Length or by the chunked coding is read and dropped, and the request after it is whole.
TEST(Bodies, AreTakenOutOfTheBufferAndThePipelinedRequestStays) {
  const std::string next = "GET /next HTTP/1.1\r\nHost: a\r\n\r\n";
  const std::vector<std::string> requests = {
      "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
      "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"  // extensions and trailers: ignored
      "5;name=value;x\r\nhello\r\nA ; y=\"q\"\r\n0123456789\r\n000\r\nTrailer: t\r\nOther: u\r\n\r\n",
      "POST /a HTTP/1.1\nHost: a\nTransfer-Encoding: chunked\n\n1\nx\n0\n\n",  // bare LF line ends
      "GET /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",  // a GET may have a body too
      "POST /a HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
  };
  for (const std::string& r : requests) {
    std::string in = r + next;
    http::RequestReader reader;
    Parse p = reader.next(in);
    ASSERT_EQ(p.status, Parse::kComplete) << r;
    EXPECT_EQ(p.length, r.size()) << r;
    EXPECT_EQ(p.request.target, "/a");
    EXPECT_EQ(reader.unread(in), next) << r;
    p = reader.next(in);
    ASSERT_EQ(p.status, Parse::kComplete) << r;
    EXPECT_EQ(p.request.target, "/next");
    EXPECT_TRUE(in.empty());
  }
  EXPECT_TRUE(parse(requests[0]).request.post);
  EXPECT_FALSE(parse(requests[4]).request.post);
}

// Pipelined requests are read where they are: the buffer is not moved once per request (quadratic in what a client
// pipelines), but once what was read is half of it, so each byte moves at most once.
TEST(Pipelining, ReadBytesLeaveTheBufferInOneEraseOnceTheyAreHalfOfIt) {
  const std::string one = "GET /p HTTP/1.1\r\nHost: a\r\n\r\n";
  constexpr int kRequests = 1000;
  std::string in;
  for (int i = 0; i < kRequests; ++i) in += one;
  const char* const data = in.data();
  http::RequestReader reader;
  int read = 0;
  for (; read < kRequests / 2 - 1; ++read) {
    ASSERT_EQ(reader.next(in).status, Parse::kComplete);
    ASSERT_EQ(in.size(), kRequests * one.size()) << "request " << read << ": the buffer moved";
    ASSERT_EQ(in.data(), data);
    ASSERT_EQ(reader.unread(in).size(), (kRequests - read - 1) * one.size());
  }
  ASSERT_EQ(reader.next(in).status, Parse::kComplete);  // half of it read: one erase
  EXPECT_EQ(in.size(), kRequests / 2 * one.size());
  for (read = kRequests / 2; read < kRequests; ++read) ASSERT_EQ(reader.next(in).status, Parse::kComplete);
  EXPECT_TRUE(in.empty());
  EXPECT_TRUE(reader.idle(in));
}

// However the bytes are split, the same requests come out: each byte at a time, and in pieces of every size.
TEST(Bodies, AnySplitGivesTheSameRequests) {
  const std::string stream =
      "POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n1234567"
      "POST /2 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n10\r\n0123456789abcdef\r\n"
      "0\r\nT: v\r\n\r\n"
      "HEAD /3 HTTP/1.1\r\nHost: a\r\n\r\n";
  for (std::size_t piece = 1; piece <= stream.size(); ++piece) {
    http::RequestReader reader;
    std::string in;
    std::vector<std::string> targets;
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      in += stream.substr(at, piece);
      for (Parse p = reader.next(in); p.status == Parse::kComplete; p = reader.next(in))
        targets.push_back(p.request.target);
    }
    EXPECT_EQ(targets, (std::vector<std::string>{"/1", "/2", "/3"})) << "pieces of " << piece;
    EXPECT_TRUE(in.empty());
    EXPECT_TRUE(reader.idle(in));
  }
}

TEST(Bodies, MalformedChunksAre400) {
  for (const char* chunks : {"x\r\n", "\r\n", "5\r\nhelloX\r\n0\r\n\r\n", "5 junk\r\nhello\r\n", "-5\r\n",
                             "5\r\nhello\r\n0\r\nno colon\r\n\r\n", "5\r\nhello\r\n0\r\n: v\r\n\r\n",
                             "5;\x01\r\nhello\r\n0\r\n\r\n"}) {
    Parse p = parse(std::string("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n") + chunks);
    EXPECT_EQ(p.status, Parse::kError) << chunks;
    EXPECT_EQ(p.error, 400) << chunks;
  }
  std::string endless_size_line = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                                   std::string(http::kMaxChunkLine + 10, 'x');
  EXPECT_EQ(parse(endless_size_line).error, 400);
  std::string endless_trailers = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n";
  for (int i = 0; i < 1000; ++i) endless_trailers += "Trailer: 0123456789\r\n";
  EXPECT_EQ(parse(endless_trailers).error, 431);
}

// --max-body: a Content-Length over it is refused at once, before any of the body is sent; a chunked body as soon
// as its chunks add up to more, however large each chunk-size claims to be.
TEST(Bodies, OverTheLimitAre413) {
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n", 10).error, 413);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789", 10).status,
            Parse::kComplete);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n").error, 413);
  const std::string chunked = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(parse(chunked + "6\r\n012345\r\n5\r\n", 10).error, 413);
  EXPECT_EQ(parse(chunked + "fffffffffffffffffffffffffffffff\r\n", 10).error, 413);  // no overflow on the way
  EXPECT_EQ(parse(chunked + "5\r\n01234\r\n5\r\n01234\r\n0\r\n\r\n", 10).status, Parse::kComplete);
}

// RFC 9110 10.1.1: a client that sent "Expect: 100-continue" waits for a 100 before sending its body. The reader
// asks for one when a body will be read and none of it has come yet; a body it will refuse gets the refusal at once.
TEST(Bodies, ExpectContinue) {
  const std::string head = "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
  http::RequestReader reader;
  std::string in = head;
  EXPECT_EQ(reader.next(in).status, Parse::kContinue);
  EXPECT_EQ(reader.next(in).status, Parse::kIncomplete);  // asked once
  in += "abc";
  EXPECT_EQ(reader.next(in).status, Parse::kComplete);

  EXPECT_EQ(parse(head + "abc").status, Parse::kComplete);  // the body came anyway: no 100 needed
  http::RequestReader with_body;
  in = head + "a";
  EXPECT_EQ(with_body.next(in).status, Parse::kIncomplete);
  in = "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";  // HTTP/1.0 knows no 100
  EXPECT_EQ(http::RequestReader().next(in).status, Parse::kIncomplete);
  in = "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n";  // no body to wait for
  EXPECT_EQ(http::RequestReader().next(in).status, Parse::kComplete);
  in = "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n";
  Parse p = http::RequestReader(10).next(in);
  EXPECT_EQ(p.error, 413);  // a final status, so the client does not send the body for nothing
  in = "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n";
  EXPECT_EQ(http::RequestReader().next(in).error, 405);
}

// The reader remembers where it stopped: a head sent one byte at a time is looked at once, not once per byte.
TEST(Reader, ByteAtATimeCostsLinearTime) {
  std::string head = "GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(http::kMaxHead - 100, 'a') + "\r\n\r\n";
  http::RequestReader reader;
  std::string in;
  Parse p;
  for (char c : head) {
    in += c;
    p = reader.next(in);
    if (p.status != Parse::kIncomplete) break;
  }
  EXPECT_EQ(p.status, Parse::kComplete);
  EXPECT_LE(reader.scanned(), 2 * head.size());  // each byte once while waiting, and once more to parse the head
}

}  // namespace
