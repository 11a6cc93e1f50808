#!/usr/bin/env python3
"""A server that accepts every connection, reads what comes, and never answers: the submission that hangs.

Usage: silent_server.py PORT [ROOT] [--close]    (listens on 127.0.0.1; SIGTERM exits 0; exits by itself after 10
                                                  minutes, in case nothing stops it)

With --close it closes each connection after its first read instead, without a byte: the server that drops
every request. The grader must say either in one sentence first, and grade it in seconds, not minutes
(tests/grader/CMakeLists.txt, grader_silent and grader_closes).
"""
import signal
import socket
import sys
import threading


def hold(conn, close):
    with conn:
        try:
            while conn.recv(65536) and not close:
                pass
        except OSError:
            pass


def main():
    port = int(sys.argv[1])
    close = "--close" in sys.argv[2:]
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    signal.signal(signal.SIGALRM, lambda signum, frame: sys.exit(0))
    signal.alarm(600)
    listener = socket.create_server(("127.0.0.1", port))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=hold, args=(conn, close), daemon=True).start()


if __name__ == "__main__":
    main()
