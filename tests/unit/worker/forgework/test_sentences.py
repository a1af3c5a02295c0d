from __future__ import annotations

import re

import pytest

from pidispatch.worker import local
from pidispatch.worker.engine import secrets
from pidispatch.worker.engine.exitline import RUNNER_POLICY_REASONS
from pidispatch.worker.engine.preflight import CAPABILITY_GATES
from pidispatch.worker.engine.runner import OPERATOR_CANCEL
from pidispatch.worker.forgework import sentences
from pidispatch.worker.forgework.sentences import FAILED, REFUSAL_GENERIC, STOP_GENERIC, refusal, stopped
from pidispatch.worker.limits import budget

# Every pre-spend refusal the worker can record today, taken from the modules that produce them, plus
# the rows this issue adds (branch protection, the forge clone) and the config classifier's.
EMITTED_REFUSALS = sorted({
    "job-image-missing", "job-image-forge-unsupported", "job-image-any-uid-unsupported",
    *(gate.reason for gate in CAPABILITY_GATES),
    local.NOT_A_REPO, local.NO_COMMIT, local.UNREADABLE_REPO, local.USER_UNMAPPABLE,
    secrets.NAME_RESERVED, secrets.PROFILE_UNKNOWN, secrets.UNRESOLVED,
    budget.DAILY_TOKEN_CAP, budget.OVER_BUDGET, budget.SOFT_HOLD,
    "unprotected-branch", "sha-gone", "config-refused",
})
# Pre-spend refusal reasons of the whole system, some not built yet: each must have its sentence.
PLANNED_REFUSALS = (
    "once-already-spent", "trigger-skew", "wait-skew", "backend-unblessed", "backend-floor-unobserved",
    "podman-conf-widens-job", "job-image-missing", "job-image-forge-unsupported",
    "job-image-replicas-unsupported", "job-image-commands-unsupported",
    "job-image-exclude-tools-unsupported", "job-image-model-policy-unsupported",
    "job-image-cost-cap-unsupported", "job-user-unmappable", "job-image-any-uid-unsupported",
    "model-unknown", "model-not-allowed", "provider-unconfigured", "egress-proxy-missing",
    "egress-proxy-stopped", "sessions-dir-unset", "skills-dir-missing", "secret-name-reserved",
    "secret-profile-unknown", "secret-profile-ambiguous", "secret-unresolved", "unprotected-branch",
    "sha-gone", "local-folder-not-a-repo", "local-folder-no-commit", "local-folder-unreadable-repo",
    "daily-token-cap", "scope-cap", "project-cap", "over-budget", "soft-hold", "dollar-cap",
    "allocation-cap", "job-size-exceeds-host", "job-size-exceeds-share", "job-size-exceeds-fleet",
    "config-refused", "settings-overlay-invalid", "wait-refused", "wait-expired", "wait-unanswerable",
    "wait-profile-unknown", "wait-superseded", "wait-unreadable", "wait-after-beyond-max",
)
STOP_REASONS = sorted(
    {"worker-abort", OPERATOR_CANCEL, "runner-policy", "oom-killed", *RUNNER_POLICY_REASONS}
)

# What a posted sentence must never hold: paths or URLs, template braces, numbers (ids, shas, sizes).
FORBIDDEN = re.compile(r"[/{}\\\d\n\r]")


def clean(text: str) -> None:
    assert not FORBIDDEN.search(text), text
    assert text.isprintable()


@pytest.mark.parametrize("reason", sorted(set(EMITTED_REFUSALS) | set(PLANNED_REFUSALS)))
@pytest.mark.parametrize("is_local", [False, True])
def test_every_refusal_has_its_own_fixed_sentence_ending_not_run(reason: str, is_local: bool) -> None:
    text = refusal(reason, local=is_local)
    assert reason in sentences.REFUSALS
    assert text.startswith("Refused: ") and text.endswith(". Not run.")
    assert REFUSAL_GENERIC not in text
    clean(text)


@pytest.mark.parametrize("reason", STOP_REASONS)
def test_every_paid_stop_has_its_own_sentence_ending_not_retried(reason: str) -> None:
    text = stopped(reason)
    assert reason in sentences.STOPS
    assert text.startswith("Stopped: ") and text.endswith(". Not retried.")
    assert STOP_GENERIC not in text
    clean(text)


def test_refusal_sentences_are_distinct() -> None:
    texts = [refusal(r, local=False) for r in sentences.REFUSALS]
    assert len(set(texts)) == len(texts)
    stops = [stopped(r) for r in sentences.STOPS]
    assert len(set(stops)) == len(stops)


def test_a_local_job_reads_this_folder_where_a_forge_job_reads_this_repository() -> None:
    assert "this repository" in refusal("scope-cap", local=False)
    assert "this folder" in refusal("scope-cap", local=True)
    assert "this repository" in refusal("unprotected-branch", local=False)
    assert "this repository" not in refusal("scope-cap", local=True)


@pytest.mark.parametrize("reason", [
    "", "no-such-reason", "/etc/shadow", "{scope}", "ghp_0123456789abcdef", "secret-unresolved ",
    "Job-Image-Missing", "__class__",
])
def test_an_unknown_reason_gets_the_generic_sentence_and_is_never_echoed(reason: str) -> None:
    assert refusal(reason, local=False) == f"Refused: {REFUSAL_GENERIC}. Not run."
    assert stopped(reason) == f"Stopped: {STOP_GENERIC}. Not retried."


def test_the_config_refusal_points_at_doctor() -> None:
    assert "pi-dispatch doctor" in refusal("config-refused", local=False)


def test_the_failure_sentence_is_fixed_and_points_at_the_run_record() -> None:
    assert FAILED.startswith("Failed: an error stopped this job and it will not be retried further")
    assert "run record" in FAILED
    clean(FAILED)
