#!/usr/bin/env python3
"""A small static-file server from the standard library, in a safe mode and in a mode with a path traversal bug.

Usage: static_server.py PORT ROOT [MODE...]    (listens on 127.0.0.1; PORT 0 picks a free one; SIGTERM exits 0)

It serves ROOT with http.server's ThreadingHTTPServer and SimpleHTTPRequestHandler, over HTTP/1.1 so that
connections are kept alive. The two modes differ in one function only, translate_path() (URL path -> file path):

  safe           SimpleHTTPRequestHandler's own, which drops '.' and '..' segments, and then a check that the real
                 path (symbolic links followed) is still inside ROOT.
  --traversal    the classic bug: ROOT joined with the decoded path, never normalised. The kernel resolves the
                 '..', so GET /../../etc/passwd (or /%2e%2e/%2e%2e/etc/passwd) reads a file outside ROOT.

So the grader's report for the two must differ in the traversal check alone. By hand:
  curl --path-as-is http://127.0.0.1:PORT/../../../../etc/passwd

The other modes are conventions that real servers follow and that the grader must judge right (CTest grades each,
tests/grader/CMakeLists.txt):

  --close-delimited   no Content-Length on its errors and redirects (as busybox httpd): each such body ends when
                      the connection closes (RFC 9112 6.3, rule 8). Correct.
  --http10            HTTP/1.0 without keep-alive, as http.server is by default: the connection ends after every
                      response, with no `Connection: close` to say so (RFC 9112 9.3). Correct.
  --head-no-length    no Content-Length on a response to HEAD (RFC 9110 9.3.2 lets a server leave it out). Correct.
  --daemonize         goes into the background: the process the grader started exits 0 once its child listens.
                      The grader must say "run it in the foreground" and stop the child (which exits after 60 s
                      anyway).
  --crash-on-missing  SIGSEGV on a request for a missing file, after a line on stderr: the grader must call it a
                      crash, with that line.
  --needs-sub         exits 1 unless ROOT has a sub/ folder (a wrapper that serves a subfolder of the root): the
                      trial start must use the same folder as the checks.
"""
import functools
import os
import signal
import sys
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every response has a Content-Length

    def translate_path(self, path):
        # SimpleHTTPRequestHandler's own drops '.' and '..' segments. A symbolic link can still lead out of the
        # folder, and a NUL names no file: for both, the empty path, which open() answers with a 404.
        full = super().translate_path(path)
        if "\0" in full:
            return ""
        real = os.path.realpath(full)
        return full if real == self.directory or real.startswith(self.directory + os.sep) else ""

    def log_message(self, format, *args):
        pass  # one line per request on stderr would only slow a load test down


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a connection kept alive must not hold the exit up

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that reset is routine here, not news
            super().handle_error(request, client_address)


MODES = {"--traversal", "--close-delimited", "--http10", "--head-no-length", "--daemonize", "--crash-on-missing",
         "--needs-sub"}


class ConventionHandler(Handler):
    """Handler in the modes of the module's docstring (the class attributes are set from the command line)."""
    close_delimited = head_no_length = crash_on_missing = False
    status = 0

    def send_response(self, code, message=None):
        self.status = code
        super().send_response(code, message)

    def send_header(self, keyword, value):
        if keyword.lower() == "content-length" and ((self.close_delimited and self.status >= 300) or
                                                    (self.head_no_length and self.command == "HEAD")):
            if self.close_delimited and self.command != "HEAD":
                self.close_connection = True  # the body ends with the connection: nothing else can end it
            return
        super().send_header(keyword, value)

    def send_head(self):
        if self.crash_on_missing and "missing" in self.path:
            sys.stderr.write(f"static_server.py: about to crash on {self.command} {self.path}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().send_head()


class TraversalHandler(Handler):
    def translate_path(self, path):
        path = path.split("?", 1)[0].split("#", 1)[0]
        return os.path.join(self.directory, urllib.parse.unquote(path).lstrip("/"))  # the bug: no normalisation


def main():
    args = [a for a in sys.argv[1:] if a not in MODES]
    modes = set(sys.argv[1:]) & MODES
    if len(args) != 2:
        sys.exit(f"usage: static_server.py PORT ROOT [{' | '.join(sorted(MODES))}]...")
    port, root = int(args[0]), os.path.abspath(args[1])
    if "--needs-sub" in modes and not os.path.isdir(os.path.join(root, "sub")):
        sys.exit(f"static_server.py: {root} has no sub/ folder")
    handler = TraversalHandler if "--traversal" in modes else Handler
    if modes & {"--close-delimited", "--http10", "--head-no-length", "--crash-on-missing"}:
        handler = type("Handler", (ConventionHandler,), {
            "protocol_version": "HTTP/1.0" if "--http10" in modes else "HTTP/1.1",
            "close_delimited": "--close-delimited" in modes, "head_no_length": "--head-no-length" in modes,
            "crash_on_missing": "--crash-on-missing" in modes})
    server = Server(("127.0.0.1", port), functools.partial(handler, directory=root))
    if "--daemonize" in modes:
        # The classic daemon: fork, the child leaves the session (setsid), the parent exits 0 once it has. This one
        # also gives up after 60 s, so that it never outlives a grader that failed to stop it by much.
        detached, tell = os.pipe()
        if os.fork() > 0:
            os.close(tell)
            os.read(detached, 1)
            os._exit(0)
        os.setsid()
        os.write(tell, b"x")
        os.close(tell)
        os.close(detached)
        threading.Timer(60, lambda: os._exit(0)).start()

    # shutdown() waits for serve_forever() to return, and serve_forever() runs in this (the main) thread, where the
    # signal handler runs too: so another thread has to ask for it.
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=server.shutdown).start())

    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
