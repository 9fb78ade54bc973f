"""HTTP helpers of the console tests: GET a page, read the console's CSRF token from a page's form, POST a form
as a browser would (with the console's own Origin unless told otherwise)."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def get(url: str, method: str = "GET", host: str | None = None) -> tuple[int, str, Any]:
    request = urllib.request.Request(url, method=method, headers={} if host is None else {"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode(), answer.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


def csrf_token(page: str) -> str:
    found = _TOKEN.search(page)
    assert found, "the page has no form with a csrf_token"
    return found.group(1)


def post(
    url: str, fields: dict[str, object], *, origin: str | None = "own", host: str | None = None
) -> tuple[int, str]:
    """POST ``fields`` form-encoded; ``origin`` "own" sends the console's own origin, None no Origin header;
    ``host`` a Host header other than the URL's."""
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if host is not None:
        headers["Host"] = host
    if origin == "own":
        parts = urllib.parse.urlsplit(url)
        headers["Origin"] = f"{parts.scheme}://{parts.netloc}"
    elif origin is not None:
        headers["Origin"] = origin
    data = urllib.parse.urlencode({k: str(v) for k, v in fields.items()}).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
