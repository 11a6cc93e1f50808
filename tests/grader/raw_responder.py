#!/usr/bin/env python3
"""The responder ab counts as a success: it answers every connection with 1,024 raw bytes and no HTTP at all.

Usage: raw_responder.py PORT    (listens on 127.0.0.1; SIGTERM exits 0)

For every connection (a thread each) it reads once, sends "x" * 1024 (no status line, no headers) and closes.
ab -n 100 http://127.0.0.1:PORT/ exits 0 and prints "Complete requests: 100 / Failed requests: 0 / Total
transferred: 102400 bytes / HTML transferred: 0 bytes", whereas any HTTP client sees no status line (curl: "Received
HTTP/0.9 when not allowed", exit 1). A grader must not take "the load tool counted no failures" for "it answered".
"""
import signal
import socket
import sys
import threading


def answer(conn):
    with conn:
        conn.recv(65536)  # the request, or whatever came first: never parsed
        conn.sendall(b"x" * 1024)


def main():
    port = int(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    listener = socket.create_server(("127.0.0.1", port))
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}/", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
