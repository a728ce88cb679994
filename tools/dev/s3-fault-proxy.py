#!/usr/bin/env python3
"""An HTTP proxy on loopback that passes S3 requests to a real server and
breaks some of them on purpose, for the tests of ckpt's S3 client:

  --slowdown-every N   every Nth request is answered 503 SlowDown (never sent on)
  --reset-every N      every Nth request with a body is cut mid-body: the
                       connection is reset after half of it is read
  --stall-every N      every Nth request gets no answer for --stall-seconds

Prints "port=<port>" once listening; counts what it did in the file named by
--stats (JSON, rewritten after each request) so a test can check that the
faults happened. Runs until killed.
"""
import argparse
import http.client
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-connection", "expect"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slowdown-every", type=int, default=0)
    parser.add_argument("--reset-every", type=int, default=0)
    parser.add_argument("--stall-every", type=int, default=0)
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    parser.add_argument("--stats", default="")
    args = parser.parse_args()
    upstream = urlsplit(args.upstream)
    lock = threading.Lock()
    stats = {"requests": 0, "slowdowns": 0, "resets": 0, "stalls": 0, "forwarded": 0}

    def count(what):
        with lock:
            stats[what] += 1
            if args.stats:
                with open(args.stats + ".tmp", "w") as f:
                    json.dump(stats, f)
                import os
                os.replace(args.stats + ".tmp", args.stats)

    def every(n, i):
        return n > 0 and i % n == 0

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def handle_any(self):
            with lock:
                stats["requests"] += 1
                i = stats["requests"]
            length = int(self.headers.get("Content-Length") or 0)
            if every(args.slowdown_every, i):
                self.rfile.read(length)
                body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                        b'<Message>Please reduce your request rate.</Message></Error>')
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                count("slowdowns")
                return
            if length > 0 and every(args.reset_every, i):
                self.rfile.read(length // 2)
                # RST, not FIN: a connection reset by peer mid-part.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                count("resets")
                self.connection.close()
                return
            if every(args.stall_every, i):
                count("stalls")
                time.sleep(args.stall_seconds)
                self.close_connection = True
                return
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=120)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            self.send_response(response.status, response.reason)
            for k, v in response.getheaders():
                # HEAD's Content-Length is the object's: pass it on as is.
                if k.lower() in HOP_HEADERS or (k.lower() == "content-length" and
                                                self.command != "HEAD"):
                    continue
                self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            conn.close()
            count("forwarded")

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"port={server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
