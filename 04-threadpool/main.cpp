// 04-threadpool: blocking sockets, one acceptor thread, a bounded queue, and a fixed pool of worker threads.
//
// Chapter 02 created a thread per connection, without limit. Here N threads (--threads, default 16) are started
// once, and each serves one connection at a time with chapter 01's blocking loop; the main thread only accepts and
// queues. The pool bounds the threads, and the queue bounds the waiting: when it is full, new clients get 503. The
// price is that the pool also bounds the concurrency: with the 1 ms handler it tops out near N x 800 requests a
// second, and a worker that holds a silent connection serves nobody else. Chapter 05 serves thousands of
// connections per thread with epoll.
// With --root DIR it serves the files under DIR, each sent by sendfile() with no copy through user space.
//
// Needs:  Linux, g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server --threads 16            (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
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

// Why 16 workers: each request spends ~1 ms waiting (the handler) and ~0.1 ms on the CPU (syscalls, parsing), so
// keeping the cores busy takes about cores x (1 + wait/compute) = 2 x (1 + 10) = 22 threads on the 2-core machines
// this course measures on. 16 is a round figure near it. The pool then tops out near 16 x 800 = 12,800 requests a
// second (a 1 ms sleep lasts ~1.1 ms), close to what the client and the kernel's TCP work allow on 2 cores anyway.
constexpr int kDefaultThreads = 16;

// More than the 500 clients of `ab -c 500`, so the benchmark never sees a 503, yet a flood of clients costs at most
// 1024 descriptors: when the queue is full the acceptor answers 503 instead of growing it.
constexpr std::size_t kQueueCapacity = 1024;

// [excerpt:queue]
// The connections accepted and not yet taken by a worker. The acceptor pushes, the workers pop; one mutex guards
// the deque and the stopping flag, and the condition variable wakes a worker when either changes.
class ConnectionQueue {
 public:
  // False when the queue is full: `client` is then left with the caller, to answer 503.
  bool try_push(Fd& client) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.size() >= kQueueCapacity) return false;
      queue_.push_back(std::move(client));
    }
    changed_.notify_one();
    return true;
  }
  // Blocks until there is a connection to serve; an invalid Fd once stop() was called and the queue is empty.
  Fd pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !queue_.empty() || stopping_; });  // the predicate absorbs spurious wakeups
    if (queue_.empty()) return Fd();
    Fd client = std::move(queue_.front());
    queue_.pop_front();
    return client;
  }
  bool has_waiting() {
    std::lock_guard<std::mutex> lock(mutex_);
    return !queue_.empty();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Fd> queue_;
  bool stopping_ = false;
};
// [/excerpt:queue]

// [excerpt:serve-connection]
// Chapter 01's loop, run by a worker, plus one rule: be fair to the connections waiting in the queue. As in 02, the
// entry in `open` is how a stop ends the worker's wait in recv() (see the stop in main()).
void serve(Fd client, ConnectionQueue& queue, OpenConnections& open, const Options& opts) {
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
    run_handler_here(opts);  // the simulated 1 ms of waiting blocks this worker, and only it
    // Fairness, the classic thread-pool lesson with keep-alive. A worker that keeps a keep-alive connection spends
    // the gaps between its requests in recv(), serving nobody, while the connections queued behind it wait for a
    // worker that never frees up: under `ab -k -c 500`, 16 connections would get every request and the other 484
    // would wait until those 16 fall silent and reach their deadline. So when someone is waiting in the queue and
    // this client has nothing more buffered (the next step would be a blocking recv()), we answer this request with
    // "Connection: close" and move on; the client reconnects and queues like everyone else. When nobody waits, the
    // connection stays open and spares the next request a TCP handshake.
    if (reader.idle(in) && queue.has_waiting()) p.request.keep_alive = false;
    Outgoing out = respond(opts, p.request);  // the 1 KB body, or with --root a file for sendfile()
    bool sent = send_whole(client.get(), out);
    if (!sent || !out.keep_alive) return end_after_response(client.get(), sent);  // graceful, or reset if not sent
    deadline.next_request(std::chrono::steady_clock::now());
  }
}
// [/excerpt:serve-connection]

void worker(ConnectionQueue& queue, OpenConnections& open, const Options& opts) {
  for (;;) {
    Fd client = queue.pop();
    if (!client.valid()) return;  // stop requested and nothing left in the queue
    serve(std::move(client), queue, open, opts);
    restore_spare();  // a file this worker opened may have taken the number a shed freed (net.hpp)
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options opts = options_or_exit(argc, argv, {"04-threadpool", kDefaultThreads, ""});
  start_process();
  ConnectionQueue queue;
  OpenConnections open;  // the connections the workers are serving
  std::vector<std::thread> workers;  // started before "listening on", so the server is ready when it says so
  try {
    for (int i = 0; i < opts.threads; ++i)
      workers.emplace_back(worker, std::ref(queue), std::ref(open), std::cref(opts));
  } catch (const std::system_error&) {
    fail_startup("cannot start " + std::to_string(opts.threads) + " worker threads");
  }
  std::vector<Fd> listener = listen_sockets(opts);

  // [excerpt:accept-loop]
  for (;;) {
    Fd client = accept_or_stop(listener[0].get());
    if (!client.valid()) break;  // SIGINT or SIGTERM: stop accepting
    if (queue.try_push(client)) continue;
    const bool sent = send_whole(client.get(), refuse(503));  // full: refuse, never grow
    end_refused(std::move(client), sent);  // gracefully, without holding up this loop (closing.hpp)
  }
  // [/excerpt:accept-loop]

  // [excerpt:stop]
  listener.clear();      // new clients are refused from now on, instead of waiting in the listen queue
  queue.stop();          // idle workers wake up; each one closes what is still queued, then returns
  open.stop_and_wait();  // wakes every worker waiting in recv(); the requests already read get up to 2 s
  // No join: a worker may still be writing to a slow reader when the 2 s are up. End the process here instead.
  exit_now();
  // [/excerpt:stop]
}
