#!/usr/bin/env python3
"""A TLS client (Python's ssl module, as redis-py's ssl=True uses) that pipelines N GETs of a large
value and reads the replies through a small receive buffer, so that the gateway's TLS writes must
wait for the socket (SSL_write -> WANT_WRITE -> EPOLLOUT) many times. Checks every reply byte.

Usage: resp_tls_slow_reader.py PORT CA CERT KEY KEY_NAME EXPECTED_VALUE_FILE N
"""
import socket
import ssl
import sys


def main():
    port, ca, cert, key, name, value_file, n = sys.argv[1:8]
    n = int(n)
    with open(value_file, "rb") as f:
        value = f.read()
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.load_cert_chain(cert, key)
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    raw.settimeout(120)
    raw.connect(("127.0.0.1", int(port)))
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    cmd = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(name), name.encode())
    s.sendall(cmd * n)
    want = (b"$%d\r\n" % len(value) + value + b"\r\n") * n
    got = bytearray()
    while len(got) < len(want):
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    s.close()
    if bytes(got) != want:
        print("FAIL: %d of %d reply bytes, equal prefix: %s" %
              (len(got), len(want), want.startswith(bytes(got))))
        return 1
    print("slow TLS reader: %d x %d bytes OK" % (n, len(value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
