"""A stdlib-only HTTP and websocket-handshake probe, run as *another* Unix user.

The test passes this file's source with `python3 -c` (the other user may not be able to read
the checkout, nor the project's venv), so it imports nothing but the standard library. It
prints one JSON object: each attempt's name and the status line the server answered with.
"""

import base64
import json
import os
import socket
import sys


def ask(port: int, path: str, headers: dict[str, str]) -> int:
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
        "",
        "",
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall("\r\n".join(lines).encode())
        head = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(head.split()[1])


def websocket(origin: str | None) -> dict[str, str]:
    headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
    }
    if origin:
        headers["Origin"] = origin
    return headers


def main() -> None:
    port = int(sys.argv[1])
    own = f"http://127.0.0.1:{port}"
    attempts = {
        "page": ("/", {}),
        "page with a guessed token": ("/?token=" + "A" * 32, {}),
        "static file": ("/static/js/textual.js", {}),
        "websocket, the server's own Origin": ("/ws", websocket(own)),
        "websocket, a foreign Origin": ("/ws", websocket("http://evil.example")),
        "websocket, no Origin": ("/ws", websocket(None)),
    }
    print(
        json.dumps(
            {
                "uid": os.getuid(),
                **{name: ask(port, path, headers) for name, (path, headers) in attempts.items()},
            }
        )
    )


main()
