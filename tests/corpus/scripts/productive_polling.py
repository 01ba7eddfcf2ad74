"""Productive work that repeats a call on purpose: polling, clocks, retries, watching metrics."""

from __future__ import annotations

from tests.corpus.recording import Outcome, Take, productive, trace

CLOCK_PAUSE = 1.05
"""Real seconds between clock reads, so that a clock with one-second resolution answers anew."""


async def poll_job(t: Take, job_id: str, thinks: list[float] | None = None) -> list[Outcome]:
    """Polls a job until it ends, as an agent does: think times given, or 15 to 25 s."""
    polls: list[Outcome] = []
    while True:
        think = thinks[len(polls)] if thinks and len(polls) < len(thinks) else t.rng.uniform(15, 25)
        polls.append(await t.call("jobs", "job_status", {"job_id": job_id}, think=think))
        if polls[-1].data["state"] in {"succeeded", "failed", "cancelled"}:
            return polls
        t.check(len(polls) < 30, "the job never ended")


@trace(
    "build-poll-until-done",
    productive(
        "The agent starts a build and polls it every 15 to 25 s until it succeeds; every poll shows new "
        "progress, then it reads the first page of the log. Same tool, same arguments, changing results."
    ),
)
async def build_poll_until_done(t: Take) -> None:
    """Polling that progresses at every read."""
    started = await t.call("jobs", "start_job", {"pipeline": "build", "ref": "main"})
    polls = await poll_job(t, started.data["job_id"])
    t.check(len({o.text for o in polls}) == len(polls), "a poll repeated its answer")
    await t.call("jobs", "job_logs", {"job_id": started.data["job_id"]})


@trace(
    "deploy-rollout-plateau",
    productive(
        "A staging deploy: queued twice, then 'running/rollout' three times with no percentage, then "
        "succeeded, polled with backoff (10, 10, 20, 20, 30 s). Looks like a loop for three polls (the "
        "identical rule warns at line 6); the job finishes on the next one."
    ),
)
async def deploy_rollout_plateau(t: Take) -> None:
    """Polling through a plateau of identical answers."""
    started = await t.call("jobs", "start_job", {"pipeline": "deploy-staging", "ref": "v1.8.1"})
    await poll_job(t, started.data["job_id"], [10, 10, 20, 20, 30, 30])
    await t.call("jobs", "job_logs", {"job_id": started.data["job_id"]})


@trace(
    "migration-long-plateau",
    productive(
        "A nightly migration's copy step reports 'running, 40%' seven times in a row (lines 4 to 10, "
        "polled every 60 to 90 s) before it moves on and succeeds. A poller the identical rule as written "
        "refuses at line 8; a false positive of the kind users report for polling tools. Only the clock "
        "shows that the agent waits, which is no evidence (a model thinking a minute per call looks the "
        "same): the guard refuses it unless job_status is configured pollable.",
        "clock_wait",
    ),
)
async def migration_long_plateau(t: Take) -> None:
    """Polling through a long plateau: the hard case for result-aware repetition rules."""
    started = await t.call("jobs", "start_job", {"pipeline": "nightly-migration", "ref": "main"})
    polls = await poll_job(t, started.data["job_id"], [t.rng.uniform(60, 90) for _ in range(11)])
    t.check(polls[-1].data["state"] == "succeeded", "the migration did not succeed")


@trace(
    "clock-reads",
    productive(
        "Waiting for a maintenance window, the agent reads the UTC clock every 30 s, 12 times. Same tool, "
        "same arguments, a different answer each time (recorded from mcp-server-time with real waits; the "
        "readings are shown on the trace's own clock). The answers are nothing but a timestamp: with "
        "timestamp scrubbing on they would all look identical."
    ),
)
async def clock_reads(t: Take) -> None:
    """A clock read repeatedly."""
    reads = [
        await t.call("time", "get_current_time", {"timezone": "UTC"}, think=30, pause=CLOCK_PAUSE) for _ in range(12)
    ]
    t.check(len({o.text for o in reads}) == len(reads), "two clock reads were equal")


@trace(
    "clock-three-zones",
    productive(
        "Scheduling a call across offices, the agent reads the time in UTC, Tokyo and New York in turn, "
        "4 rounds a minute apart. The arguments cycle with period 3; the answers never repeat."
    ),
)
async def clock_three_zones(t: Take) -> None:
    """Rotating clock reads: a cycle of arguments, not of results."""
    for _ in range(4):
        for zone in ("UTC", "Asia/Tokyo", "America/New_York"):
            think = 2.0 if zone != "UTC" else 55.0
            await t.call("time", "get_current_time", {"timezone": zone}, think=think, pause=CLOCK_PAUSE)


@trace(
    "e2e-failure-log-pages",
    productive(
        "An end-to-end job fails; the agent reads its log page by page (cursor pagination, 6 pages) to find "
        "the failing tests. Same tool, cursor changing, every page different."
    ),
)
async def e2e_failure_log_pages(t: Take) -> None:
    """Polling, then pagination."""
    started = await t.call("jobs", "start_job", {"pipeline": "e2e", "ref": "main"})
    job_id = started.data["job_id"]
    polls = await poll_job(t, job_id)
    t.check(polls[-1].data["state"] == "failed", "the e2e job did not fail")
    cursor: str | None = None
    for _ in range(10):
        page = await t.call("jobs", "job_logs", {"job_id": job_id, **({"cursor": cursor} if cursor else {})})
        cursor = page.data["next_cursor"]
        if cursor is None:
            break


@trace(
    "docs-timeout-retried-once",
    productive(
        "A documentation fetch times out (JSON-RPC error); the agent retries it once, gets the page, and "
        "moves on to the next page. A transient error retried once."
    ),
)
async def docs_timeout_retried_once(t: Take) -> None:
    """A transient JSON-RPC error, one retry."""
    url = {"url": "https://docs.example.com/guide/retries"}
    first = await t.call("ops", "http_get", url)
    t.check(first.error is not None, "the first fetch did not time out")
    second = await t.call("ops", "http_get", url, think=3)
    t.check(not second.is_error, "the retry failed")
    await t.call("ops", "http_get", {"url": "https://docs.example.com/guide/pagination"})
    await t.call("ops", "http_get", {"url": "https://docs.example.com/reference/errors"})


@trace(
    "billing-503-retried",
    productive(
        "The status API answers 503 (isError) for billing once; the agent retries, gets 'operational', then "
        "checks the other services it was asked about."
    ),
)
async def billing_503_retried(t: Take) -> None:
    """A transient isError answer, one retry."""
    first = await t.call("ops", "service_status", {"service": "billing"})
    t.check(first.is_error, "billing did not fail first")
    await t.call("ops", "service_status", {"service": "billing"}, think=5)
    await t.call("ops", "service_status", {"service": "api"})
    await t.call("ops", "service_status", {"service": "payments"})
    await t.call("ops", "get_incident", {"incident_id": "INC-2291"})


@trace(
    "build-artifacts-appear",
    productive(
        "While a build runs, the agent alternates the job status and a listing of dist/, where the build "
        "writes a new artifact between polls. An A-B alternation of the same two calls whose answers change every time."
    ),
)
async def build_artifacts_appear(t: Take) -> None:
    """Listing a directory while files appear in it."""
    t.write("dist/.gitkeep", "")
    started = await t.call("jobs", "start_job", {"pipeline": "build", "ref": "main"})
    job = {"job_id": started.data["job_id"]}
    artifacts = iter(
        ["inventory-1.8.1.tar.gz", "inventory-1.8.1-py3-none-any.whl", "SHA256SUMS", "sbom.json", "report.html"]
    )
    for _ in range(10):
        status = await t.call("jobs", "job_status", job, think=t.rng.uniform(15, 25))
        await t.call("filesystem", "list_directory", {"path": t.path("dist")})
        if status.data["state"] == "succeeded":
            break
        t.write(f"dist/{next(artifacts)}", "artifact\n")


@trace(
    "registry-backoff-retries",
    productive(
        "A package index times out three times (the same JSON-RPC error for the same URL); the agent "
        "backs off 2, 4 and 8 s and the 4th attempt succeeds. Retries with backoff that succeed; the identical "
        "rule warns at the 3rd failure (line 3), nothing is due to be refused."
    ),
)
async def registry_backoff_retries(t: Take) -> None:
    """Identical failures with backoff, then success."""
    url = {"url": "https://registry.example.com/simple/inventory-client/"}
    outcomes = [await t.call("ops", "http_get", url, think=think) for think in (0, 2, 4, 8)]
    t.check([o.error is not None for o in outcomes] == [True, True, True, False], "unexpected retry outcomes")
    await t.call("ops", "http_get", {"url": "https://docs.example.com/reference/errors"}, think=5)


@trace(
    "search-recovery-wait",
    productive(
        "After restarting the search cluster the agent polls its status every 30 s: 'degraded' four times "
        "(fresh fetched_at and request_id each time), then 'operational', and it checks latency once. Polling "
        "that ends when the state changes (with scrubbing on, the identical rule would warn at lines 3 and 4)."
    ),
)
async def search_recovery_wait(t: Take) -> None:
    """A status polled until it recovers."""
    for _ in range(8):
        status = await t.call("ops", "service_status", {"service": "search"}, think=30)
        if status.data["state"] == "operational":
            break
    await t.call("ops", "get_metric", {"service": "search", "metric": "p99_latency_ms"})


@trace(
    "queue-drain-watch",
    productive(
        "After a fix, the agent watches the payments queue drain, reading the same metric every 30 s "
        "9 times until it reaches 0. Every reading differs."
    ),
)
async def queue_drain_watch(t: Take) -> None:
    """A metric watched until it settles."""
    for _ in range(12):
        sample = await t.call("ops", "get_metric", {"service": "payments", "metric": "queue_depth"}, think=30)
        if sample.data["value"] == 0:
            break


@trace(
    "three-service-watch",
    productive(
        "On call during an incident, the agent checks payments, search and api in turn every minute until "
        "search recovers (5 rounds). The arguments cycle with period 3; every answer carries a new "
        "fetched_at and request_id, and search changes state. With timestamps and UUIDs scrubbed, payments "
        "and api answer the same every round and the rotation looks like a period-3 cycle."
    ),
)
async def three_service_watch(t: Take) -> None:
    """A rotating status check that stops when its condition is met."""
    for _ in range(8):
        states = {}
        for service in ("payments", "search", "api"):
            think = 50.0 if service == "payments" else 3.0
            states[service] = (await t.call("ops", "service_status", {"service": service}, think=think)).data["state"]
        if states["search"] == "operational":
            break
