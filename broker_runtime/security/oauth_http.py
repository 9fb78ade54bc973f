"""What the OAUTHBEARER code may fetch, and how: the process-level allow-list of OAuth URLs and an HTTP opener
that never follows a redirect. Used by the client's token endpoint (:mod:`.oauthbearer_login`) and the broker's
JWKS (:mod:`.jwks`).

Allow-list (Kafka 4's JVM system property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``, CVE-2025-27817):
the environment variable :data:`ALLOWED_URLS_ENV` holds a comma-separated list of URLs; a configured
``sasl.oauthbearer.token.endpoint.url`` or ``sasl.oauthbearer.jwks.endpoint.url`` (``https``, ``http`` and
``file:`` alike, as in Kafka) must equal one of them, compared as Kafka compares (entries trimmed, exact string
match, no patterns). Empty or unset (the default, as in Kafka): every URL is refused. It is an environment variable
and not a config because whoever writes a client's configs (a Spark job's options) must not be able to widen it:
only whoever starts the process can. Kafka's second property, ``org.apache.kafka.sasl.oauthbearer.allowed.files``,
guards the files of the JWT-bearer grant (``sasl.oauthbearer.assertion.file``, ``...private.key.file``), which
pylog refuses; it has no counterpart here. The variable is read at each check (as Kafka reads the property).

Redirects: an endpoint answering 3xx fails the fetch with :class:`RedirectRefused` naming the ``Location``. urllib
would follow it, carrying a POST's ``Authorization: Basic <client id:secret>`` to the new host (even from https to
http) and taking a key set from wherever it points.

Threading: stateless; safe from any thread.
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import TYPE_CHECKING, Any, NoReturn

from broker_runtime.errors import ConfigError

if TYPE_CHECKING:  # urllib.request (and http.client, email) are imported by the first request
    import urllib.request

__all__ = ["ALLOWED_URLS_ENV", "RedirectRefused", "check_allowed_url", "open_url"]

#: Kafka's ``org.apache.kafka.sasl.oauthbearer.allowed.urls``, as an environment variable.
ALLOWED_URLS_ENV = "PYLOG_SASL_OAUTHBEARER_ALLOWED_URLS"


def check_allowed_url(key: str, url: str) -> None:
    """ConfigError unless ``url`` is listed in :data:`ALLOWED_URLS_ENV`; ``key`` names the setting that holds it."""
    allowed = {u.strip() for u in os.environ.get(ALLOWED_URLS_ENV, "").split(",")}
    if url not in allowed:
        raise ConfigError(
            f"{key}={url!r}: the URL is not in the allow-list of OAuth URLs: add it to the environment variable "
            f"{ALLOWED_URLS_ENV} (comma-separated, exact URLs; pylog's counterpart of Kafka's JVM property "
            "org.apache.kafka.sasl.oauthbearer.allowed.urls) of the process that uses it"
        )


class RedirectRefused(Exception):
    """An OAuth endpoint answered a redirect; its message names the URL, the status and the ``Location``."""


@functools.cache
def _refuse_redirects() -> type[urllib.request.HTTPRedirectHandler]:
    import urllib.request

    class RefuseRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(
            self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
        ) -> NoReturn:
            fp.close()
            raise RedirectRefused(
                f"{req.full_url} answered HTTP {code} redirecting to {newurl!r}: redirects of OAuth endpoints are "
                "not followed (they would carry the client credentials or take keys from elsewhere); configure the "
                "final URL"
            )

    return RefuseRedirects


def open_url(request: urllib.request.Request, *, timeout: float, context: ssl.SSLContext | None) -> Any:
    """``urllib.request.urlopen`` that refuses redirects (:class:`RedirectRefused`)."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _refuse_redirects()())
    return opener.open(request, timeout=timeout)
