"""The status page's ``/triggers/test``: ``pi-dispatch triggers test`` for a file an operator uploads.

A form posts the candidate file (at most the loader's own size cap); the answer is the verb's table. The
file goes through the loader (a refused one shows the loader's line; the router's credential checks at start
are the CLI's, as the page need not hold forge credentials), and the run is offline: no forge is asked on
an upload's behalf, so decisions that need one are marked.
Nothing is written anywhere; the upload is never stored or logged, and every value on the page is escaped.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from redis.exceptions import AuthenticationError, RedisError

from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis, bounded
from pidispatch.console import statushtml
from pidispatch.console.statushtml import esc, page, table
from pidispatch.console.trial import Facts, Trial, candidate_rules
from pidispatch.triggers import comparison
from pidispatch.triggers.comparison import Comparison
from pidispatch.triggers.loader import load_triggers
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.triggerfile import TRIGGERS_MAX_BYTES

PATH = "/triggers/test"
UPLOAD_NAME = "upload"  # how the loader's lines name the uploaded file (the browser's file name is not used)
RUN_TIMEOUT_S = 30.0
TITLE, ACTIVE = "triggers test", "triggers"
HEADERS = ("DELIVERY", "FORGE", "EVENT", "TARGET", "STORED", "UNDER THE UPLOADED FILE")
FORM = (
    f'<form method="post" action="{PATH}" enctype="multipart/form-data">'
    '<p><label>candidate triggers.json <input type="file" name="file" accept=".json,application/json" '
    'required></label></p><p><label>only the newest <input type="number" name="last" min="1"> deliveries '
    "(empty: every one Redis keeps)</label></p><p><button type=\"submit\">compare</button></p></form>"
    '<p class="note">The file goes through the router\'s loader, then every kept delivery is decided again '
    "under it and under the file in force, without asking any forge (a decision that needs one is marked), "
    "and set against what the router recorded. Nothing is written. <code>pi-dispatch triggers test</code> "
    "also applies the router's credential checks and asks the forges.</p>"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Respond = Callable[[str, int], web.Response]


class Refused(Exception):
    """The request itself is refused (too large, a bad field); ``status`` and a line for the page."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(line)
        self.status, self.line = status, line


@dataclass(frozen=True, slots=True)
class TrialSource:
    """What the form's runs read: the deployment's keys and file in force, the identities set explicitly."""

    keys: Keys
    triggers_file: str
    cron_floor_s: int
    self_ids: SelfIds


def form_html(problem: str | None = None, banner: str | None = None) -> str:
    shown = f'<p class="bad">{esc(problem)}</p>' if problem else ""
    return page(TITLE, ACTIVE, shown + FORM, banner, refresh=False)


def result_html(result: Comparison) -> str:
    rows = comparison.table_rows(result.changed)
    body = (f"<p>{esc(comparison.summary(result))}</p>"
            f"{table(HEADERS, rows, 'no stored delivery would change')}"
            f'<p><a href="{PATH}">try another file</a></p>')
    return page(TITLE, ACTIVE, body, refresh=False)


NOT_A_FORM = "post the form: multipart/form-data with a file field"
TOO_LARGE = (f"PI_TRIGGERS_FILE {UPLOAD_NAME}: is larger than {TRIGGERS_MAX_BYTES} bytes; accepted: a "
             "triggers.json of at most that size")
BAD_LAST = "last: accepted: a whole number of 1 or more, or empty"


async def _text(part: BodyPartReader, limit: int, refusal: Refused) -> bytes:
    """The part's bytes, refused as soon as they pass ``limit`` (the rest is never read)."""
    data = bytearray()
    while chunk := await part.read_chunk():
        data += chunk
        if len(data) > limit:
            raise refusal
    return bytes(data)


async def read_form(request: web.Request) -> tuple[bytes, int | None]:
    """The uploaded file and the optional ``last``, read within the size cap."""
    try:
        return await _fields(await request.multipart())
    except (AssertionError, ValueError, KeyError, RuntimeError, HttpProcessingError):
        raise Refused(400, NOT_A_FORM) from None  # a body that is not the form's, whatever the parser says


async def _fields(reader: MultipartReader) -> tuple[bytes, int | None]:
    raw: bytes | None = None
    last: int | None = None
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise Refused(400, NOT_A_FORM)
        if part.name == "file":
            raw = await _text(part, TRIGGERS_MAX_BYTES, Refused(413, TOO_LARGE))
        elif part.name == "last":
            value = (await _text(part, 16, Refused(400, BAD_LAST))).decode("ascii", "replace").strip()
            if value and (not value.isdigit() or int(value) < 1):
                raise Refused(400, BAD_LAST)
            last = int(value) if value else None
    if raw is None:
        raise Refused(400, "no file uploaded: choose a triggers.json")
    return raw, last


def routes(source: TrialSource, redis: Redis, html: Respond) -> list[tuple[str, str, Handler]]:
    """The form (GET) and its answer (POST), for ``statuspage.build_app`` to mount behind its auth;
    ``html`` makes its responses (the page's headers)."""

    async def form(request: web.Request) -> web.StreamResponse:
        return html(form_html(), 200)

    async def run(request: web.Request) -> web.StreamResponse:
        try:
            raw, last = await read_form(request)
            candidate = candidate_rules(raw, UPLOAD_NAME, source.cron_floor_s)
        except Refused as exc:
            return html(form_html(exc.line), exc.status)
        except ConfigError as exc:  # the loader's own line
            return html(form_html(str(exc)), 400)
        load = functools.partial(load_triggers, source.triggers_file, cron_floor_s=source.cron_floor_s)
        try:
            in_force = await asyncio.to_thread(load)
        except ConfigError as exc:
            return html(form_html(f"the file in force is refused: {exc}"), 503)
        trial = Trial(candidate, in_force, source.self_ids, Facts(None))
        try:
            result = await bounded(trial.run(redis, source.keys, last), RUN_TIMEOUT_S)
        except AuthenticationError:
            return html(form_html(banner=statushtml.REDIS_REFUSED), 503)
        except TimeoutError:
            return html(form_html(f"no answer within {RUN_TIMEOUT_S:.0f} s: set a smaller number of "
                                   "deliveries"), 503)
        except (RedisError, OSError):
            return html(form_html(banner=statushtml.REDIS_DOWN), 503)
        return html(result_html(result), 200)

    return [("GET", PATH, form), ("POST", PATH, run)]

