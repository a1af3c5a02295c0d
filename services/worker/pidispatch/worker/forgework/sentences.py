"""The fixed sentences the worker posts on the issue or pull request, or logs as a
``comment`` event for a local job.

Every sentence is a constant chosen by a reason token: it never holds a path, a secret, a reference, an
id, a name from configuration or any text from the forge, so an unknown or hostile reason can only ever
select the generic sentence. Pre-spend refusals end "Not run."; paid policy stops end "Not retried.".
"""

from __future__ import annotations

_REPOSITORY, _FOLDER = "this repository", "this folder"

# Pre-spend refusals, one per reason token. ``{scope}`` is the repository, or the folder of a
# local job; it is the only placeholder and is filled from the two constants above.
REFUSALS: dict[str, str] = {
    "once-already-spent": "this one-shot trigger has already been spent by another job",
    "trigger-skew": "the trigger that queued this job has changed since, and the job no longer matches it",
    "wait-skew": "the trigger now waits for a condition this job was queued without",
    "backend-unblessed": "the job names a container backend this worker is not allowed to use",
    "backend-floor-unobserved": "the worker could not confirm that its container backend isolates jobs "
                                "as required",
    "podman-conf-widens-job": "the container runtime's configuration would loosen this job's isolation",
    "job-image-missing": "the job image is not present on the worker, and images are never pulled for a job",
    "job-image-forge-unsupported": "the job image does not declare support for jobs from this forge",
    "job-image-replicas-unsupported": "the job image does not support replica jobs",
    "job-image-commands-unsupported": "the job image does not support command jobs",
    "job-image-exclude-tools-unsupported": "the job image cannot exclude tools as the trigger asks",
    "job-image-model-policy-unsupported": "the job image cannot enforce the allowed model list",
    "job-image-cost-cap-unsupported": "the job image cannot enforce a per-job cost cap",
    "job-image-any-uid-unsupported": "the job image cannot run as the user this job must run as",
    "job-user-unmappable": "no safe user account could be chosen to run this job's container",
    "model-unknown": "the job names a model the agent does not know",
    "model-not-allowed": "the job's model is not on the allowed model list",
    "provider-unconfigured": "the worker has no credentials for the job's model provider",
    "egress-proxy-missing": "the egress proxy this job must go through is missing",
    "egress-proxy-stopped": "the egress proxy this job must go through is not running",
    "sessions-dir-unset": "the job asks to resume a session, but the worker keeps no sessions",
    "skills-dir-missing": "the skills folder the trigger names is missing on the worker",
    "secret-name-reserved": "the job binds a secret to a name the harness reserves for itself",
    "secret-profile-unknown": "the job names a secret profile the worker does not know",
    "secret-profile-ambiguous": "the job's secret profile is declared twice on the worker",
    "secret-unresolved": "a secret this job needs could not be resolved",
    "unprotected-branch": "the default branch of {scope} is not protected, so the agent could change it "
                          "without review; protect the default branch to run jobs here",
    "sha-gone": "the commit this job was to start from is no longer available (the branch moved or was "
                "rewritten)",
    "local-folder-not-a-repo": "the folder is not the top folder of a git repository",
    "local-folder-no-commit": "the folder's git repository has no commit yet",
    "local-folder-unreadable-repo": "git could not read the folder's repository",
    "daily-token-cap": "today's token budget is spent",
    "scope-cap": "the job budget for {scope} is spent for now",
    "project-cap": "the job budget for this project is spent for now",
    "over-budget": "the harness's job budget is spent for now",
    "soft-hold": "the job budget is nearly spent and what is left is held back",
    "dollar-cap": "the spending budget is spent for now",
    "allocation-cap": "the spending allocation for {scope} is spent for now",
    "job-size-exceeds-host": "this job needs more than the worker host can give one job",
    "job-size-exceeds-share": "this job needs more than its share of the worker host",
    "job-size-exceeds-fleet": "this job needs more than any worker host can give",
    "config-refused": "the deployment is misconfigured; the operator can see what is wrong with "
                      "`pi-dispatch doctor`",
    "settings-overlay-invalid": "the worker's settings overlay is invalid",
    "wait-refused": "a condition this job waits for answered no",
    "wait-expired": "a condition this job waited for did not come true in time",
    "wait-unanswerable": "a condition this job waits for cannot be checked",
    "wait-profile-unknown": "the job waits on a check the worker does not know",
    "wait-superseded": "another job for the same item is already waiting, or has just run, in this one's "
                       "place",
    "wait-unreadable": "a condition this job waits for could not be read",
    "wait-after-beyond-max": "the job asks to wait longer than the worker allows",
}
REFUSAL_GENERIC = "a check before the run stopped this job"

# Paid policy terminals: the container ran, so the job is not tried again.
STOPS: dict[str, str] = {
    "worker-abort": "the worker stopped this job before it finished (it ran out of time, or the worker "
                    "shut down)",
    "operator-cancel": "an operator cancelled this job",
    "runner-policy": "the agent stopped at one of its limits (turns, tokens or a policy inside the "
                     "container)",
    "provider-auth-refused": "the model provider refused the harness's credentials",
    "cost-cap": "the job reached its cost cap",
    "model-not-allowed": "the agent was asked to use a model that is not allowed",
    "cost-cap-unenforceable": "the job's cost cap could not be enforced, so the agent did not go on",
    "model-policy-unenforceable": "the allowed model list could not be enforced, so the agent did not go on",
    "oom-killed": "the job ran out of memory",
}
STOP_GENERIC = "a policy stopped this job"

FAILED = ("Failed: an error stopped this job and it will not be retried further. The operator can find "
          "the cause in the worker's run record for this job (`pi-dispatch runs`).")


def refusal(reason: str, *, local: bool) -> str:
    """The comment for a pre-spend refusal; an unknown reason gets the generic sentence."""
    text = REFUSALS.get(reason, REFUSAL_GENERIC).format(scope=_FOLDER if local else _REPOSITORY)
    return f"Refused: {text}. Not run."


def stopped(reason: str) -> str:
    """The comment for a paid policy stop; an unknown reason gets the generic sentence."""
    return f"Stopped: {STOPS.get(reason, STOP_GENERIC)}. Not retried."
