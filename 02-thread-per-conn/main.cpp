// 02-thread-per-conn: blocking sockets, and a new thread for every connection.
//
// Chapter 01's serve() loop, unchanged, but every connection gets a thread of its own, so a slow or silent client
// no longer holds up the others: while one thread sleeps in the 1 ms handler or waits in recv(), the kernel runs
// the rest. The price is one thread per connection, created and destroyed each time, with no upper bound:
// 10,000 idle keep-alive clients are 10,000 sleeping threads, each with its own stack. Chapter 03 serves every
// connection from a single thread with select() instead.
// With --root DIR it serves the files under DIR, each sent by sendfile() with no copy through user space.
//
// Needs:  Linux, g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server            (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include "../common/closing.hpp"
#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/response.hpp"

namespace {

// [excerpt:serve-connection]
// Serves one connection, in its own thread, until the client closes it, an error occurs, or a request head takes
// longer than --idle-timeout to arrive (the request deadline). Chapter 01's loop, word for word: blocking here now
// stops only this thread, and the other connections carry on in theirs. The one addition is the entry in `open`,
// through which a stop can end this thread's wait in recv() (see the stop in main()).
void serve(Fd client, OpenConnections& open, const Options& opts) {
  const OpenConnections::Entry entry(open, client.get());  // removed before `client` closes the descriptor
  if (!entry) return;  // the server is stopping
  set_send_timeout(client.get(), opts.idle_timeout);  // how long a reader may take nothing
  std::string in;  // bytes received and not yet read by `reader`: the rest of a request, pipelined ones
  http::RequestReader reader(opts.max_body);  // where this connection's request stands (common/http.hpp)
  RequestDeadline deadline(opts.idle_timeout, std::chrono::steady_clock::now());  // the head's, then the body's
  for (;;) {
    http::Parse p = reader.next(in);  // takes the request (head and body) out of `in` as it reads it
    if (p.status == http::Parse::kError)  // answer, then end the connection: nothing can follow a framing error
      return end_after_response(client.get(), send_whole(client.get(), refuse(opts, p)));
    if (p.status == http::Parse::kContinue && !send_whole(client.get(), interim_continue()))
      return reset_connection(client.get());  // the client waits for "100 Continue" before sending its body
    if (p.status != http::Parse::kComplete) {  // read more
      long n = recv_before(client.get(), in, deadline, reader.reading_body());  // at a stop, no wait (lifecycle)
      if (n == -2) return reset_connection(client.get());  // the request deadline passed: reset (closing.hpp)
      if (n <= 0) return;  // EOF or an error (the client ended it), or a stop with nothing more to answer
      continue;
    }
    run_handler_here(opts);  // the simulated 1 ms of waiting blocks this connection's thread, and only it
    Outgoing out = respond(opts, p.request);  // the 1 KB body, or with --root a file for sendfile()
    bool sent = send_whole(client.get(), out);
    if (!sent || !out.keep_alive) return end_after_response(client.get(), sent);  // graceful, or reset if not sent
    deadline.next_request(std::chrono::steady_clock::now());
  }
}
// [/excerpt:serve-connection]

}  // namespace

int main(int argc, char** argv) {
  const Options opts = options_or_exit(
      argc, argv, {"02-thread-per-conn", 0, "it starts one thread per connection, as many as there are clients"});
  start_process();
  std::vector<Fd> listener = listen_sockets(opts);
  OpenConnections open;  // the connections being served, one thread each

  // [excerpt:accept-loop]
  // Ownership: the new thread owns the connection (it rebuilds the Fd from the number) and closes it when serve()
  // returns. The thread is detached: nobody joins it, it simply ends. It captures a copy of the options, and a
  // reference to `open`, which lives as long as the process (main() never returns: see the stop). If the thread
  // cannot be created (std::system_error, EAGAIN: the thread limit or no memory left for another stack), this
  // client gets 503 and the server keeps serving everyone else.
  for (;;) {
    Fd client = accept_or_stop(listener[0].get());
    if (!client.valid()) break;  // SIGINT or SIGTERM: stop accepting
    const int fd = client.release();
    try {
      std::thread([fd, &open, opts] {
        serve(Fd(fd), open, opts);
        restore_spare();  // a file this thread opened may have taken the number a shed freed (net.hpp)
      }).detach();
    } catch (const std::system_error&) {
      Fd refused(fd);  // the thread never existed, so the connection is still ours to answer and close
      const bool sent = send_whole(refused.get(), refuse(503));
      end_refused(std::move(refused), sent);  // gracefully, without holding up this loop (closing.hpp)
    }
  }
  // [/excerpt:accept-loop]

  // [excerpt:stop]
  listener.clear();      // new clients are refused from now on, instead of waiting in the listen queue
  open.stop_and_wait();  // wakes every thread waiting in recv(); the requests already read get up to 2 s
  // The threads are detached, so there is nothing to join, and one may still be writing to a slow reader when the
  // 2 s are up: end the process here rather than return from main() under their feet.
  exit_now();
  // [/excerpt:stop]
}
