"""Loops of one call repeated: identical results, and identical but for fresh timestamps and ids."""

from __future__ import annotations

from tests.corpus.recording import Outcome, Take, loop, trace

SCRUB = {"scrub": "timestamps,uuids"}


def same(take: Take, outcomes: list[Outcome], what: str) -> None:
    """Checks that every outcome is byte-identical to the first."""
    first = outcomes[0]
    take.check(all(o == first for o in outcomes), f"{what}: the answers are not all identical")


@trace(
    "git-status-after-commit",
    loop(
        "identical",
        9,
        "Asked to commit and push, the agent commits (line 4), then checks git_status 24 times: "
        "the clean tree answer never changes and there is no push tool. Line 9 is the 5th identical call.",
    ),
)
async def git_status_after_commit(t: Take) -> None:
    """A commit, then the same clean status again and again."""
    t.write("inventory/pricing.py", t.root.joinpath("inventory/pricing.py").read_text().replace("> BULK", ">= BULK"))
    repo = {"repo_path": t.path()}
    await t.call("git", "git_status", repo)
    await t.call("git", "git_diff_unstaged", repo)
    await t.call("git", "git_add", {**repo, "files": ["inventory/pricing.py"]})
    committed = await t.call("git", "git_commit", {**repo, "message": "Apply the bulk discount from 10 units"})
    t.check(not committed.is_error, "the commit failed")
    same(t, [await t.call("git", "git_status", repo) for _ in range(24)], "git_status")


@trace(
    "reread-config",
    loop(
        "identical",
        8,
        "Asked to turn on the csv_export flag, the agent reads config.json 22 times in a row "
        "without ever writing it. Line 8 is the 5th identical read.",
    ),
)
async def reread_config(t: Take) -> None:
    """The same file read over and over."""
    await t.call("filesystem", "list_directory", {"path": t.path()})
    await t.call("filesystem", "read_text_file", {"path": t.path("README.md")})
    await t.call("filesystem", "read_text_file", {"path": t.path("docs/pricing.md")})
    reads = [await t.call("filesystem", "read_text_file", {"path": t.path("config.json")}) for _ in range(22)]
    same(t, reads, "read_text_file")


@trace(
    "weather-chicago-again",
    loop(
        "identical",
        7,
        "Planning a delivery route, the agent checks the weather of New York and Los Angeles, then asks "
        "for Chicago 18 times; the answer never changes. Line 7 is the 5th identical call.",
    ),
)
async def weather_chicago_again(t: Take) -> None:
    """server-everything's structured weather tool called with the same city again and again."""
    await t.call("everything", "get-structured-content", {"location": "New York"})
    await t.call("everything", "get-structured-content", {"location": "Los Angeles"})
    same(
        t, [await t.call("everything", "get-structured-content", {"location": "Chicago"}) for _ in range(18)], "weather"
    )


@trace(
    "stuck-release-job",
    loop(
        "identical",
        13,
        "A build is started and polled until it succeeds (lines 1 to 7); then a release job waits for a "
        "runner label no runner has, and the agent polls it 30 times, every 20 to 40 s (lines 9 to 38): the "
        "status never changes. Line 13 is the 5th identical poll.",
    ),
)
async def stuck_release_job(t: Take) -> None:
    """Polling a job that never leaves the queue, after one that finished."""
    build = await t.call("jobs", "start_job", {"pipeline": "build", "ref": "v1.8.0"})
    for _ in range(6):
        await t.call("jobs", "job_status", {"job_id": build.data["job_id"]}, think=t.rng.uniform(15, 25))
    t.check(t.lines[-1]["result"]["structuredContent"]["state"] == "succeeded", "the build did not succeed")
    started = await t.call("jobs", "start_job", {"pipeline": "release", "ref": "v1.8.0"})
    job = {"job_id": started.data["job_id"]}
    polls = [await t.call("jobs", "job_status", job, think=t.rng.uniform(20, 40)) for _ in range(30)]
    same(t, polls, "job_status")


@trace(
    "refused-connection-retries",
    loop(
        "identical",
        8,
        "After reading two documentation pages, the agent fetches an API URL whose host refuses connections, "
        "20 times (lines 4 to 23). Each call ends with the same JSON-RPC error (no result), counted as the "
        "call's outcome. Line 8 is the 5th identical call.",
    ),
)
async def refused_connection_retries(t: Take) -> None:
    """The same JSON-RPC error for the same call, over and over."""
    await t.call("ops", "service_status", {"service": "api"})
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/guide/retries"})
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/reference/errors"})
    url = {"url": "https://api.down.example/v1/items?warehouse=berlin"}
    failures = [await t.call("ops", "http_get", url) for _ in range(20)]
    t.check(all(o.error is not None for o in failures), "http_get did not end in a JSON-RPC error")
    same(t, failures, "http_get")


@trace(
    "git-show-missing-tag",
    loop(
        "identical",
        8,
        "After status, branches and log, the agent asks git_show for a tag that does not exist 15 times "
        "(lines 4 to 18) and gets the same isError result. Line 8 is the 5th identical call (the same-error "
        "rule would refuse later, at line 11).",
    ),
)
async def git_show_missing_tag(t: Take) -> None:
    """An isError answer repeated for the same arguments."""
    repo = {"repo_path": t.path()}
    await t.call("git", "git_status", repo)
    await t.call("git", "git_branch", {**repo, "branch_type": "local"})
    await t.call("git", "git_log", {**repo, "max_count": 5})
    shows = [await t.call("git", "git_show", {**repo, "revision": "release-1.8"}) for _ in range(15)]
    t.check(shows[0].is_error, "git_show found the tag")
    same(t, shows, "git_show")


@trace(
    "tiny-image-again",
    loop(
        "identical",
        6,
        "After listing resources, the agent fetches the same image 16 times (an image result: bytes "
        "identical each time). Line 6 is the 5th identical call.",
    ),
)
async def tiny_image_again(t: Take) -> None:
    """An image tool called with the same arguments again and again."""
    await t.call("everything", "get-resource-links", {"count": 3})
    same(t, [await t.call("everything", "get-tiny-image", {}) for _ in range(16)], "get-tiny-image")


@trace(
    "payments-status-fresh-fields",
    loop(
        "volatile",
        8,
        "During an incident the agent checks the api status, a latency metric and the incident, then polls "
        "the payments status 25 times, every 10 to 30 s (lines 4 to 28): always 'degraded' with the same "
        "detail, only fetched_at and request_id are new. With timestamps and UUIDs scrubbed, line 8 is the "
        "5th identical poll.",
        SCRUB,
    ),
)
async def payments_status_fresh_fields(t: Take) -> None:
    """A status that never changes but for its request fields."""
    await t.call("ops", "service_status", {"service": "api"})
    await t.call("ops", "get_metric", {"service": "payments", "metric": "p99_latency_ms"})
    await t.call("ops", "get_incident", {"incident_id": "INC-2291"})
    polls = [
        await t.call("ops", "service_status", {"service": "payments"}, think=t.rng.uniform(10, 30)) for _ in range(25)
    ]
    t.check(len({o.data["state"] for o in polls}) == 1, "the payments state changed")
    t.check(len({o.data["fetched_at"] for o in polls}) == len(polls), "fetched_at repeated")


@trace(
    "healthz-starting-forever",
    loop(
        "volatile",
        6,
        "After a deploy the agent fetches /healthz 20 times; the service stays 'starting' and only "
        "fetched_at and request_id change. With timestamps and UUIDs scrubbed, line 6 is the 5th identical call.",
        SCRUB,
    ),
)
async def healthz_starting_forever(t: Take) -> None:
    """A health check that never changes but for its request fields."""
    await t.call("ops", "service_status", {"service": "api"})
    url = {"url": "https://status.internal.example/healthz"}
    checks = [await t.call("ops", "http_get", url, think=t.rng.uniform(5, 15)) for _ in range(20)]
    t.check(len({o.data["body"]["status"] for o in checks}) == 1, "healthz changed")


@trace(
    "incident-status-ping-pong",
    loop(
        "volatile",
        11,
        "The agent alternates between the payments status and the incident 14 times each; both answers "
        "are unchanged but for fetched_at and request_id. With timestamps and UUIDs scrubbed this is a "
        "period-2 cycle from line 3, refused at its 9th call, line 11.",
        SCRUB,
    ),
)
async def incident_status_ping_pong(t: Take) -> None:
    """An A-B cycle hidden behind fresh request fields."""
    await t.call("ops", "service_status", {"service": "api"})
    await t.call("ops", "get_metric", {"service": "payments", "metric": "queue_depth"})
    for _ in range(14):
        await t.call("ops", "service_status", {"service": "payments"}, think=t.rng.uniform(8, 20))
        await t.call("ops", "get_incident", {"incident_id": "INC-2291"}, think=t.rng.uniform(3, 8))
