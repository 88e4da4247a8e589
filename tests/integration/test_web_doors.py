"""web_doors' checks on their own: which Host and Origin values pass, and the log filter.

The server-level tests (tests/integration/test_web_mode.py) drive these through a real
`sparkdeck web`;
here each edge is named: ports, IPv6 brackets, `null` origins, a missing port, the token in
an exception's text.
"""

from __future__ import annotations

import io
import logging

from sparkdeck.ui.web import Redacting
from sparkdeck.ui.web_doors import Doors, cookie_name

TOKEN = "s3cret-token-value-0123456789"


def doors(
    host: str = "127.0.0.1", url: str = "http://127.0.0.1:8000", extra: tuple[str, ...] = ()
) -> Doors:
    return Doors.for_server(TOKEN, host, 8000, url, extra)


def test_host_must_be_an_address_of_this_server_on_its_port() -> None:
    d = doors()
    for good in ("127.0.0.1:8000", "localhost:8000", "LOCALHOST:8000", "[::1]:8000"):
        assert d.host_ok(good), good
    for bad in (
        "evil.example:8000",
        "127.0.0.1:8001",
        "127.0.0.1",
        "",
        None,
        "127.0.0.1:notaport",
        "[::1:8000",
        "spark.lan:8000",
    ):
        assert not d.host_ok(bad), bad


def test_a_public_url_adds_its_host_and_port_and_a_wildcard_its_names() -> None:
    d = doors("0.0.0.0", "https://spark.lan", extra=("spark", "192.0.2.7"))
    assert d.host_ok("spark.lan")  # no port: the scheme's own (https, behind a proxy)
    assert d.host_ok("spark.lan:443") and d.host_ok("192.0.2.7:8000") and d.host_ok("spark:8000")
    assert not d.host_ok("0.0.0.0:8000")  # the wildcard is no address to be reached at
    assert d.origin_ok("https://spark.lan", required=True)
    assert not d.origin_ok("http://spark.lan", required=True)  # port 80 is not served


def test_origin_is_optional_for_pages_and_required_for_the_websocket() -> None:
    d = doors()
    assert d.origin_ok(None, required=False) and not d.origin_ok(None, required=True)
    assert d.origin_ok("http://127.0.0.1:8000", required=True)
    assert d.origin_ok("http://localhost:8000", required=True)
    for bad in (
        "null",
        "http://evil.example",
        "http://127.0.0.1:8001",
        "file://",
        "http://127.0.0.1",
        "javascript:alert(1)",
    ):
        assert not d.origin_ok(bad, required=False), bad


def test_token_matches_only_itself_and_cookies_differ_by_port() -> None:
    d = doors()
    assert d.matches(TOKEN)
    assert not d.matches(TOKEN[:-1]) and not d.matches(TOKEN + "x") and not d.matches(None)
    assert not d.matches("")
    assert d.cookie == cookie_name(8000) != cookie_name(8001)


def test_the_log_filter_removes_the_token_from_messages_and_tracebacks() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(Redacting(TOKEN))
    log = logging.getLogger("sparkdeck.test.redacting")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("GET /%s/ws %s", TOKEN, {"token": TOKEN})
        try:
            raise ValueError(f"bad path /{TOKEN}/ws")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = out.getvalue()
    assert TOKEN not in text
    assert text.count("<token>") == 3 and "ValueError: bad path /<token>/ws" in text
