// common/exchange.hpp: what a connection of an event loop needs while a request is in progress, and only then.
//
// An event loop (05, 06, 07) keeps one of these per busy connection, from the first byte of a request to the last
// byte of its response (and, at the end, through the graceful close). It creates it when bytes arrive and destroys
// it as soon as the connection is between requests again, so an idle keep-alive connection costs its descriptor,
// its timer and a few words, not a parser and a response: at a million idle connections, that is the difference
// between megabytes and gigabytes. nginx does the same: between keep-alive requests it frees the request's buffers
// (ngx_http_set_keepalive) and takes new ones when the next request's bytes arrive.
#pragma once

#include <chrono>
#include <string>

#include "closing.hpp"
#include "http.hpp"
#include "response.hpp"

// Destroy it (unique_ptr::reset()), never assign a fresh one over it: `x = Exchange(...)` would free nothing, since
// libstdc++'s std::string, moved from a short string, copies into the capacity it already has and keeps it.
struct Exchange {
  explicit Exchange(long long max_body) : reader(max_body) {}

  std::string in;              // bytes received and not yet read by `reader`: may hold pipelined requests
  http::RequestReader reader;  // where the request being read stands (common/http.hpp)
  http::Request request;       // the request the handler is working on
  Outgoing out;                // the response, how far it has got, and whether to close after it
  Lingering lingering;         // after the last response: the graceful close's deadline, and the bytes thrown away
  std::chrono::steady_clock::time_point began;  // when the request being read began (connection.hpp bounds a body)

  // True when nothing of a next request has arrived: the connection is idle, and this can go.
  bool between_requests() const { return reader.idle(in); }
};
