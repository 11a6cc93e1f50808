#!/usr/bin/env python3
"""A small static-file server from the standard library, in a safe mode and in a mode with a path traversal bug.

Usage: static_server.py PORT ROOT [--traversal]    (listens on 127.0.0.1; PORT 0 picks a free one; SIGTERM exits 0)

It serves ROOT with http.server's ThreadingHTTPServer and SimpleHTTPRequestHandler, over HTTP/1.1 so that
connections are kept alive. The two modes differ in one function only, translate_path() (URL path -> file path):

  safe           SimpleHTTPRequestHandler's own, which drops '.' and '..' segments, and then a check that the real
                 path (symbolic links followed) is still inside ROOT.
  --traversal    the classic bug: ROOT joined with the decoded path, never normalised. The kernel resolves the
                 '..', so GET /../../etc/passwd (or /%2e%2e/%2e%2e/etc/passwd) reads a file outside ROOT.

So the grader's report for the two must differ in the traversal check alone. By hand:
  curl --path-as-is http://127.0.0.1:PORT/../../../../etc/passwd
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


class TraversalHandler(Handler):
    def translate_path(self, path):
        path = path.split("?", 1)[0].split("#", 1)[0]
        return os.path.join(self.directory, urllib.parse.unquote(path).lstrip("/"))  # the bug: no normalisation


def main():
    args = [a for a in sys.argv[1:] if a != "--traversal"]
    if len(args) != 2:
        sys.exit("usage: static_server.py PORT ROOT [--traversal]")
    port, root = int(args[0]), os.path.abspath(args[1])
    handler = TraversalHandler if "--traversal" in sys.argv else Handler
    server = Server(("127.0.0.1", port), functools.partial(handler, directory=root))

    # shutdown() waits for serve_forever() to return, and serve_forever() runs in this (the main) thread, where the
    # signal handler runs too: so another thread has to ask for it.
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=server.shutdown).start())

    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
