// fuzz/parser_fuzz.cpp: a libFuzzer target for http::parse_request(), the one function of every server that reads
// bytes chosen by a stranger on the network.
//
// libFuzzer calls LLVMFuzzerTestOneInput() again and again with inputs it mutates from the seed corpus (corpus/),
// keeping the ones that reach new branches of the parser. AddressSanitizer and UndefinedBehaviorSanitizer turn a stray
// read or an integer overflow into a crash; the checks below turn a wrong answer into one too. Each is a promise that
// the seven servers rely on without checking it themselves:
//
//   1. The answer is one of the three, with the fields that go with it; an error is a status the servers can send.
//   2. It depends on the bytes only: parsed again from a copy at another address, they give the same answer.
//   3. The buffer stays bounded. Leading empty lines are fewer than kMaxHead bytes, and the head after them is at most
//      kMaxHead: a server that reads until kComplete never holds more than 2 x 8 KiB (plus its last read).
//   4. Where the reads split the bytes does not matter: a prefix never says more than the whole (below).
//   5. Pipelining: after a complete request, the bytes that follow are parsed with all the same checks.
//   6. The response to the answer frames itself: Content-Length is the size of the body that follows.
//
// Build and run with ./fuzz/run_fuzz.sh; fuzz/README.md says how to run it longer and what to do with a crash.
#include "common/http.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using http::Parse;

// A broken promise is a crash, like a sanitizer report: libFuzzer then saves the input as crash-<sha1> and stops.
void require(bool kept, const char* promise) {
  if (kept) return;
  std::fprintf(stderr, "parser_fuzz: broken promise: %s\n", promise);
  std::abort();
}

bool ends_with(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

bool same(const Parse& a, const Parse& b) {
  return a.status == b.status && a.length == b.length && a.error == b.error &&
         a.request.head_only == b.request.head_only && a.request.keep_alive == b.request.keep_alive &&
         a.request.target == b.request.target && a.request.if_modified_since == b.request.if_modified_since;
}

// The bytes of the empty lines ("\n" or "\r\n") before the request line, which the parser skips (RFC 9112 2.2).
// Counted here independently of the parser, to check its size limits against.
std::size_t leading_empty_lines(std::string_view data) {
  std::size_t n = 0;
  for (;;) {
    if (data.substr(n, 1) == "\n") {
      n += 1;
    } else if (data.substr(n, 2) == "\r\n") {
      n += 2;
    } else {
      return n;
    }
  }
}

// Promises 1 and 3: what each status comes with.
void check_answer(std::string_view data, const Parse& p) {
  const std::size_t skipped = leading_empty_lines(data);
  switch (p.status) {
    case Parse::kIncomplete:
      require(p.length == 0 && p.error == 0, "kIncomplete has no length and no error");
      require(skipped < http::kMaxHead && data.size() <= skipped + http::kMaxHead,
              "kIncomplete only while the head can still fit in kMaxHead (else 414 or 431)");
      break;
    case Parse::kComplete: {
      require(p.error == 0, "kComplete has no error");
      require(p.length > 0 && p.length <= data.size(), "kComplete has 0 < length <= input size");
      require(skipped < http::kMaxHead && p.length <= skipped + http::kMaxHead,
              "a complete head is at most kMaxHead bytes after fewer than kMaxHead of empty lines");
      std::string_view head = data.substr(0, p.length);
      require(ends_with(head, "\n\n") || ends_with(head, "\n\r\n"), "a complete head ends with an empty line");
      // The target is in origin-form, and comes from the head: as sent, or the path and query of an absolute-form
      // target, with the "/" that an empty path stands for (RFC 9110 4.2.3) put in front.
      const std::string& target = p.request.target;
      require(!target.empty() && target.front() == '/', "the target is in origin-form");
      require(head.find(target) != std::string_view::npos ||
                  head.find(std::string_view(target).substr(1)) != std::string_view::npos,
              "the target comes from the head");
      for (unsigned char c : target) require(c > ' ' && c != 0x7f, "the target has no whitespace or control byte");
      break;
    }
    case Parse::kError:
      require(p.length == 0, "kError has no length");
      require(p.error == 400 || p.error == 405 || p.error == 413 || p.error == 414 || p.error == 431 ||
                  p.error == 501 || p.error == 505,
              "kError is 400, 405, 413, 414, 431, 501 or 505");
      break;
    default:
      require(false, "the status is kIncomplete, kComplete or kError");
  }
}

// Promise 4. The servers parse after every read, so a prefix of the bytes is what they see first:
//
//   whole is kComplete(L)   a prefix shorter than L is kIncomplete; one of L bytes or more is the same kComplete
//   whole is kError         a prefix is kIncomplete or kError. The status may differ: a line longer than kMaxHead
//                           is 414 or 431 before it ends, and may be 400 once it ends and says something malformed
//   whole is kIncomplete    a prefix is kIncomplete
//
// The prefix gets a buffer of its own, of exactly `cut` bytes, so that AddressSanitizer sees a read past the cut.
void check_prefix(std::string_view data, const Parse& whole, std::size_t cut) {
  const std::vector<char> prefix(data.begin(), data.begin() + cut);
  Parse part = http::parse_request(std::string_view(prefix.data(), prefix.size()));
  switch (whole.status) {
    case Parse::kComplete:
      if (cut < whole.length)
        require(part.status == Parse::kIncomplete, "a prefix of a complete head is kIncomplete");
      else
        require(same(part, whole), "a prefix that holds the whole head gives the same request");
      break;
    case Parse::kError:
      require(part.status != Parse::kComplete, "a prefix of a refused request is not kComplete");
      break;
    case Parse::kIncomplete:
      require(part.status == Parse::kIncomplete, "a prefix of an incomplete request is kIncomplete");
      break;
  }
}

// A cut point that moves with every mutation: a hash of all the bytes (FNV-1a), folded into 0..size.
std::size_t chosen_cut(std::string_view data) {
  std::uint32_t hash = 2166136261u;
  for (unsigned char c : data) hash = (hash ^ c) * 16777619u;
  return hash % (data.size() + 1);
}

// Promise 6. A response must frame itself, or the client cannot tell where it ends: the head is CRLF lines up to an
// empty line, and exactly the announced Content-Length of body follows. A HEAD response has none: its
// Content-Length is the size of the body a GET would get.
void check_response(std::string_view r, int status, bool head_only, bool keep_alive) {
  const std::string status_line = "HTTP/1.1 " + std::to_string(status) + " ";
  require(r.substr(0, status_line.size()) == status_line, "the status line has the status");
  std::size_t end = r.find("\r\n\r\n");
  require(end != std::string_view::npos, "the response head ends with an empty line");
  std::string_view head = r.substr(0, end + 2), body = r.substr(end + 4);
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '\r') require(i + 1 < head.size() && head[i + 1] == '\n', "no bare CR in the response head");
    if (head[i] == '\n') require(i > 0 && head[i - 1] == '\r', "no bare LF in the response head");
  }

  constexpr std::string_view kField = "\r\nContent-Length: ";
  std::size_t at = head.find(kField);
  require(at != std::string_view::npos, "the response has a Content-Length");
  require(head.find(kField, at + 1) == std::string_view::npos, "the response has one Content-Length");
  std::size_t announced = 0, digits = 0;
  for (std::size_t i = at + kField.size(); i < head.size() && head[i] >= '0' && head[i] <= '9'; ++i, ++digits)
    announced = announced * 10 + static_cast<std::size_t>(head[i] - '0');
  require(digits > 0 && digits < 6, "Content-Length is a small number");
  require(body.size() == (head_only ? 0 : announced), "the body is Content-Length bytes (none after HEAD)");
  require(head.find(keep_alive ? "\r\nConnection: keep-alive\r\n" : "\r\nConnection: close\r\n") !=
              std::string_view::npos,
          "the Connection header says what the server will do");
}

// Every promise about the request at the front of `data`. `copy` holds the same bytes at another address.
Parse check_front(std::string_view data, std::string_view copy) {
  Parse p = http::parse_request(data);
  require(same(p, http::parse_request(copy)), "the same bytes give the same answer");  // promise 2
  check_answer(data, p);

  check_prefix(data, p, chosen_cut(data));
  if (p.status == Parse::kComplete) {  // the two cuts that matter most: one byte short, and exactly the head
    check_prefix(data, p, p.length - 1);
    check_prefix(data, p, p.length);
    check_response(http::response(p.request), 200, p.request.head_only, p.request.keep_alive);
  } else if (p.status == Parse::kError) {
    check_response(http::error_response(p.error), p.error, false, false);
  }
  return p;
}

}  // namespace

// libFuzzer's entry point. It hands over a heap buffer of exactly `size` bytes, so that a read past the end of the
// input is an AddressSanitizer report.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view data(reinterpret_cast<const char*>(bytes), size);
  std::string copy(data);
  std::string_view rest = data, rest_copy = copy;
  // Promise 5, as a server does it: answer the request at the front, drop its bytes, parse what follows. The loop
  // ends because a complete request is at least one byte.
  for (;;) {
    Parse p = check_front(rest, rest_copy);
    if (p.status != Parse::kComplete) break;
    rest.remove_prefix(p.length);
    rest_copy.remove_prefix(p.length);
  }
  return 0;
}
