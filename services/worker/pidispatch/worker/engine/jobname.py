"""The one name a job id has on disk and in Docker: an injective encoding, so two ids never share a
record file, a captured log, a mirror entry or a container name (replacing each unsafe character with
``_`` made ``a:b`` and ``a_b`` one file).

Letters, digits, ``-`` and ``.`` (not first: a leading dot would hide the record as a temp file) stay;
every other UTF-8 byte, ``_`` included, becomes ``_XX`` (lower-case hex). Decoding is unambiguous
because ``_`` only ever starts an escape. A name that would pass ``MAX_NAME`` is cut and ends in
``_-`` plus the id's SHA-256 (``-`` never follows ``_`` otherwise), so it stays a valid file name.
"""

from __future__ import annotations

import hashlib
import string

SAFE = frozenset((string.ascii_letters + string.digits + "-.").encode())
EMPTY = "_"  # no non-empty id encodes to a lone underscore
MAX_NAME = 200  # leaves room for ".json"/".log", temp-file affixes and the container prefix
_HASH_CUT = MAX_NAME - 2 - 64


def job_file_name(job_id: str | None) -> str:
    """Pure: the file-name (and container-name) form of ``job_id``; distinct ids give distinct names."""
    if not job_id:
        return EMPTY
    raw = job_id.encode("utf-8", errors="surrogatepass")
    out = [
        chr(b) if b in SAFE and not (i == 0 and b == ord(".")) else f"_{b:02x}"
        for i, b in enumerate(raw)
    ]
    name = "".join(out)
    if len(name) <= MAX_NAME:
        return name
    return name[:_HASH_CUT] + "_-" + hashlib.sha256(raw).hexdigest()
