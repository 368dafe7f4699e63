"""Keys in endpoint URLs: which key goes to which endpoint, and URLs with their secrets hidden.

A ``name@URL`` spec (or ``--lora-server URL``) may carry its endpoint's key in the URL, as
``https://KEY@host/v1``, ``https://user:KEY@host/v1`` or ``https://host/v1?api_key=KEY``. swm
sends that key as the endpoint's bearer key and the URL without it; everything it stores or
prints (reports, exports, stderr, the parse cache's key, store tables, checkpoints) holds the
URL with ``***`` in the key's place (`redact_url`, `redact_spec`, `redact_text`).

Which key an endpoint gets (`endpoint_key`), first match wins:

1. the key in its URL;
2. ``SWM_API_KEY_<HOST>``: the URL's host in capitals, every other character ``_``
   (``https://api.together.xyz/v1`` reads ``SWM_API_KEY_API_TOGETHER_XYZ``);
3. a key this process was given in another URL of the same origin (a stored, redacted
   ``name@https://***@host/v1`` finds the key of the ``--lora-server`` given on the command line);
4. ``OPENAI_API_KEY``, only for OpenAI's own API (``api.openai.com``) or the origin of
   ``OPENAI_BASE_URL`` — never for another host;
5. none (the client then sends a placeholder, which local servers ignore).

A server may quote the key it was sent back in an error body ("Incorrect API key provided: sk-…"),
and that text reaches a failure record, stderr or a log. `redact_text` is the one function every
boundary where swm writes text calls (the error line, stderr and logging through `RedactingStream`,
every value the experience store writes, every string a checkpoint holds (`swm.checkpoints.serde`),
results pages): it hides the keys of the URLs in the text and every configured key value (`known_secrets`:
the keys this process was given in URLs, and each environment variable whose name says it holds a key,
``OPENAI_API_KEY``, ``SWM_API_KEY_<HOST>``, any ``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``;
values of `MIN_SECRET_CHARS` or more), whole or in pieces: a model may quote a key back cut by markup, spaces
or invisible characters (``sk-abc**def…``).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
OPENAI_API = "https://api.openai.com/v1"
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential", re.I)
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>`]+")
_SECRET_ENV = re.compile(r"API_KEY|_TOKEN$|SECRET|PASSWORD|PASSWD", re.I)
# a shorter value (a flag, a port, a local database's "postgres" password) is not masked wherever it appears:
# API keys and tokens run to 20 characters and more
MIN_SECRET_CHARS = 12
# what may sit inside a key quoted back in pieces without changing what a reader copies out of it: whitespace,
# Markdown's emphasis, code and strike marks, a backslash escape, an HTML tag, an invisible (zero-width, joiner,
# bidi, soft hyphen) character, and the same as JSON escapes (a store's JSON text: "\n", "\u200b")
_FILLER = (r"(?:\\[nrt]|\\u(?:00ad|180e|200[b-f]|202[a-e]|206[0-9]|feff)"  # JSON's escapes first: "\n" whole
           r"|[\s*_`~|\\]|[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
           r"|</?[A-Za-z][^<>\n]{0,40}>)")
_FILLER_RUN = re.compile(_FILLER + "+")
_known: dict[str, str] = {}  # origin -> a key this process was given in a URL
_known_lock = threading.Lock()


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def split_credentials(url: str) -> tuple[str, str | None]:
    """Return ``url`` without the key it carries (userinfo or a secret query parameter), and that key.

    A key given as ``***`` (a redacted URL read back from a store) counts as none.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    key: str | None = None
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, password = userinfo.partition(":")
        key = password if sep else user
        netloc = host
    query = parse_qsl(parts.query, keep_blank_values=True)
    secret = [v for k, v in query if _SECRET_PARAM.search(k)]
    if secret:
        key = key or secret[0]
        query = [(k, v) for k, v in query if not _SECRET_PARAM.search(k)]
    clean = urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))
    return clean, (key if key and key != MASK else None)


def remember(url: str) -> str:
    """Keep the key a URL carries for its origin (this process only); return the URL redacted."""
    clean, key = split_credentials(url)
    if key:
        with _known_lock:
            _known[_origin(clean)] = key
    return redact_url(url)


def endpoint_key(url: str) -> tuple[str, str | None]:
    """Return the URL to send requests to and the key for it (see the module docstring for the order)."""
    clean, key = split_credentials(url)
    if key:
        remember(url)
        return clean, key
    host = urlsplit(clean).hostname or ""
    named = os.environ.get("SWM_API_KEY_" + re.sub(r"[^A-Z0-9]", "_", host.upper()))
    if named:
        return clean, named
    with _known_lock:
        known = _known.get(_origin(clean))
    if known:
        return clean, known
    openai_origins = {_origin(OPENAI_API)}
    if os.environ.get("OPENAI_BASE_URL"):
        openai_origins.add(_origin(os.environ["OPENAI_BASE_URL"]))
    if _origin(clean) in openai_origins:
        return clean, os.environ.get("OPENAI_API_KEY") or None
    return clean, None


def redact_url(url: str) -> str:
    """Return ``url`` with any key in it (userinfo password or bare user, secret query values) as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if sep else f"{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_PARAM.search(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _SECRET_PARAM.search(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_password(url: str) -> str:
    """Return a connection URL with its password as ``***`` and its user kept (a database URL in messages and logs)."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)


def redact_spec(spec: str) -> str:
    """Return a model spec (``[reasoning:][provider:]name[@url]``) with the key in its URL hidden."""
    name, sep, url = spec.partition("@")
    return f"{name}@{redact_url(url)}" if sep else spec


def known_secrets() -> list[str]:
    """Every key value this process knows: given in a URL, or in an environment variable named as a key holds.

    Longest first, so a key that contains another is hidden whole.
    """
    with _known_lock:
        values = set(_known.values())
    values.update(v for k, v in os.environ.items() if _SECRET_ENV.search(k))
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS and v != MASK), key=len, reverse=True)


@functools.lru_cache(maxsize=64)
def _in_pieces(secret: str) -> re.Pattern[str]:
    """Match ``secret`` with filler (`_FILLER`) between any two of its characters: a key quoted back split by markup."""
    return re.compile(f"{_FILLER}*".join(re.escape(c) for c in secret))


def redact_text(text: str, secrets: Sequence[str] | None = None) -> str:
    """Hide every known key value (`known_secrets`) and the keys of the URLs inside free text (an error, a log line).

    A key is hidden whole also where it comes back in pieces (a model quoting ``sk-abc**def…``, split by spaces,
    markup or invisible characters, `_FILLER`): text with no such filler inside the key's characters is left as is.
    ``secrets``: the values to hide, `known_secrets()` when not given (a caller masking many texts reads them once).
    """
    bare: str | None = None  # the text without its filler, made once: most texts hold no key, whole or split
    for secret in known_secrets() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, MASK)
            bare = None
            continue
        bare = _FILLER_RUN.sub("", text) if bare is None else bare
        if _FILLER_RUN.sub("", secret) in bare:
            text, bare = _in_pieces(secret).sub(MASK, text), None

    def hide(match: re.Match[str]) -> str:
        url = match.group(0)
        body = url.rstrip(",.;:)]}!?")  # the sentence's punctuation, not the URL's
        return redact_url(body) + url[len(body):]

    return _URL_IN_TEXT.sub(hide, text) if "://" in text else text


@functools.lru_cache(maxsize=64)
def _tail_in_pieces(secret: str) -> re.Pattern[str]:
    """`_in_pieces` of the key from its first character in its first half that is no lowercase letter.

    A regex tries a key's pattern at each place its first character stands, and a lowercase letter (the ``s`` of
    ``sk-``) stands everywhere in text; a dash, digit or capital seldom does. Text that holds the key holds its tail.
    """
    start = next((i for i, c in enumerate(secret[: len(secret) // 2]) if not c.islower()), 0)
    return _in_pieces(secret[start:])


def may_hold_secret(text: str, secrets: Sequence[str] | None = None) -> bool:
    """Tell whether `redact_text` may hide something in ``text``: never no where it would hide a key, and cheaper.

    For one look at a text made of many (a checkpoint's encoded bytes, read as UTF-8) before masking each of its
    strings: each key is looked for with filler allowed between its characters (`_in_pieces`), not in the text
    without its filler, so whatever sits next to a string (an encoder's length byte that reads as ``\\``) cannot
    join the filler and hide a key inside it. A yes may be a key spread over two strings, which none of them holds.
    """
    if "://" in text and any(redact_url(url) != url for url in _URL_IN_TEXT.findall(text)):
        return True
    return any(_tail_in_pieces(secret).search(text) and _in_pieces(secret).search(text)
               for secret in (known_secrets() if secrets is None else secrets))


class RedactingStream:
    """A text stream that writes through `redact_text`: stderr as swm's CLI leaves it (`redact_stderr`)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a binary write (click probes with b""): the wrapped text stream refuses it
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.stream.write(redact_text(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer, closed: the wrapped stream's
        return getattr(self.stream, name)


def redact_stderr() -> None:
    """Make ``sys.stderr`` redact what is written to it (tracebacks, warnings and log lines included)."""
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)
