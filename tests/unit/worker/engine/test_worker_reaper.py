"""The boot reaper's decision (pure): it removes only containers nothing will record or remove, never
an exited one whose outcome is not recorded yet."""

from __future__ import annotations

import pytest

from pidispatch.worker.engine.reaper import should_remove


@pytest.mark.parametrize(
    ("owned", "container", "state", "recorded", "remove"),
    [
        # This host's pending job: its next pass re-attaches, records, then removes.
        (True, "exited", {"state": "completed", "attempt": "1"}, 1, False),
        (True, "running", {"state": "running", "attempt": "1"}, None, False),
        # Never started: nothing ran.
        (False, "created", {"state": "launching", "attempt": "1"}, None, True),
        # Recorded: terminal, or this attempt recorded while its retry waits in pd:delayed.
        (False, "exited", {"state": "failed", "attempt": "2"}, 2, True),
        (False, "exited", {"state": "running", "attempt": "1"}, 1, True),
        # Held by another host (taken over) and not recorded: its exit code is all there is.
        (False, "exited", {"state": "running", "attempt": "1", "host": "peer"}, None, False),
        (False, "exited", {"state": "running", "attempt": "2"}, 1, False),  # only an older attempt recorded
        # No job owns it any more.
        (False, "exited", {}, None, True),
        # Only where the job was queued (written by ENQUEUE, a move or a promotion): as good as no state.
        (False, "exited", {"state": "queued", "stream": "pd:jobs", "entry": "1-0", "eventEntry": ""}, None,
         True),
        (False, "running", {"stream": "pd:jobs:host:b", "entry": "2-0"}, None, True),
        # A queued retry still carries its last attempt: kept as before, it is not "nothing ran".
        (False, "exited", {"state": "queued", "stream": "pd:jobs", "entry": "3-0", "attempt": "1"}, None,
         False),
        (False, "exited", {"state": "delayed", "stream": "pd:delayed", "dueAt": "9"}, None, False),
    ],
)
def test_reaper_removes_only_what_is_recorded_or_owned_by_nothing(
    owned: bool, container: str, state: dict[str, str], recorded: int | None, remove: bool
) -> None:
    verdict = should_remove(
        owned=owned, container_state=container, job_state=state, recorded_attempt=recorded
    )
    assert verdict is remove
