#!/usr/bin/env python3
"""A small S3 server that misbehaves on purpose, for the tests of ckpt's S3
client and backend against answers a real server would not send (the real
server tests use Swift, tests/support/s3_server.h). It keeps objects in
memory and speaks just enough S3 (PUT, GET with Range, HEAD, DELETE,
multipart, ListObjectsV2) for ckpt's backend, then bends one thing:

  desync     206 answers carry a header named "HTTP/x"
  shortbody  ranged GETs answer one byte fewer than asked (Content-Length agrees)
  wrongrange ranged GETs answer the right length of another range
  badkey     listings name a key outside the prefix asked for
  looping    listings are truncated forever, alternating two tokens
  longkey    listings name a 2,000-byte key
  lostcommit conditional PUTs are stored, then answered 500 once
  lostunread the same, and then COMMIT objects cannot be read (503)

Usage: hostile_s3.py MODE  (prints "port=<port>")
"""
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

MODE = sys.argv[1]
objects = {}
uploads = {}
lock = threading.Lock()
state = {"listings": 0, "lost": 0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def reply(self, status, data=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def parse(self):
        u = urlsplit(self.path)
        parts = unquote(u.path).lstrip("/").split("/", 1)
        return parts[0], parts[1] if len(parts) > 1 else "", parse_qs(u.query, keep_blank_values=True)

    def unreadable(self, key):
        return MODE == "lostunread" and key.endswith("COMMIT") and state["lost"] > 0

    def do_GET(self):
        _, key, q = self.parse()
        if not key:
            return self.listing(q)
        if self.unreadable(key):
            return self.reply(503, b"<Error><Code>ServiceUnavailable</Code></Error>")
        if key not in objects:
            return self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
        data = objects[key]
        r = self.headers.get("Range")
        if not r:
            return self.reply(200, data)
        m = re.match(r"bytes=(\d+)-(\d+)", r)
        s, e = int(m.group(1)), int(m.group(2))
        headers = [("Content-Range", "bytes %d-%d/%d" % (s, e, len(data)))]
        body = data[s:e + 1]
        if MODE == "desync":
            headers.append(("HTTP/x", "1"))
        elif MODE == "shortbody":
            body = body[:-1]
        elif MODE == "wrongrange" and s > 0:
            # Another range than asked, and saying so. (A server that lies
            # about which bytes it sends is caught by each chunk's CRC32C.)
            body = data[s - 1:e]
            headers = [("Content-Range", "bytes %d-%d/%d" % (s - 1, e - 1, len(data)))]
        return self.reply(206, body, headers)

    def listing(self, q):
        if "uploads" in q:
            return self.reply(200, b"<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                              b"</ListMultipartUploadsResult>")
        prefix = q.get("prefix", [""])[0]
        keys = sorted(k for k in objects if k.startswith(prefix))
        truncated, token = "false", ""
        if MODE == "badkey" and prefix and "max-keys" not in q:
            keys.append("elsewhere")
        elif MODE == "longkey" and prefix and "max-keys" not in q:
            keys.append(prefix + "k" * 2000)
        elif MODE == "looping" and prefix and "max-keys" not in q:
            with lock:
                state["listings"] += 1
                token = "a" if state["listings"] % 2 else "b"
            truncated, keys = "true", []
        xml = "<ListBucketResult><IsTruncated>%s</IsTruncated>" % truncated
        if token:
            xml += "<NextContinuationToken>%s</NextContinuationToken>" % token
        xml += "".join("<Contents><Key>%s</Key><Size>%d</Size></Contents>" %
                       (k, len(objects.get(k, b""))) for k in keys)
        return self.reply(200, (xml + "</ListBucketResult>").encode())

    def do_HEAD(self):
        _, key, _ = self.parse()
        if self.unreadable(key):
            return self.reply(503)
        if key not in objects:
            return self.reply(404)
        self.send_response(200)
        self.send_header("Content-Length", str(len(objects[key])))
        self.end_headers()

    def do_PUT(self):
        bucket, key, q = self.parse()
        data = self.body()
        if not key:
            return self.reply(200)  # CreateBucket
        if "partNumber" in q:
            with lock:
                uploads[q["uploadId"][0]][int(q["partNumber"][0])] = data
            return self.reply(200, b"", [("ETag", '"e%s"' % q["partNumber"][0])])
        conditional = self.headers.get("If-None-Match") == "*"
        with lock:
            if conditional and key in objects:
                return self.reply(412, b"<Error><Code>PreconditionFailed</Code></Error>")
            objects[key] = data
            lose = (MODE in ("lostcommit", "lostunread") and conditional and
                    key.endswith("COMMIT") and state["lost"] == 0)
            if lose:
                state["lost"] += 1
        if lose:
            return self.reply(500, b"<Error><Code>InternalError</Code></Error>")
        return self.reply(200)

    def do_POST(self):
        _, key, q = self.parse()
        self.body()
        with lock:
            if "uploads" in q:
                uid = "u%d" % len(uploads)
                uploads[uid] = {}
                return self.reply(200, ("<R><UploadId>%s</UploadId></R>" % uid).encode())
            parts = uploads.pop(q["uploadId"][0], None)
            if parts is None:
                return self.reply(404, b"<Error><Code>NoSuchUpload</Code></Error>")
            objects[key] = b"".join(parts[i] for i in sorted(parts))
        return self.reply(200, b"<CompleteMultipartUploadResult/>")

    def do_DELETE(self):
        _, key, q = self.parse()
        with lock:
            if "uploadId" in q:
                uploads.pop(q["uploadId"][0], None)
            else:
                objects.pop(key, None)
        return self.reply(204)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print("port=%d" % server.server_address[1], flush=True)
server.serve_forever()
