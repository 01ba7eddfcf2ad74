"""Hard productive traces that wait on purpose: polls with waits between, retries that back off, polling."""

from __future__ import annotations

from collections.abc import Iterator

from tests.corpus.hard_labels import hard_productive, hard_trace
from tests.corpus.recording import Outcome, Take

DONE = {"succeeded", "failed", "cancelled"}


def same_state(polls: list[Outcome], state: str, progress: int | None) -> list[Outcome]:
    """The polls that answered this state and progress."""
    return [o for o in polls if (o.data["state"], o.data["progress"]) == (state, progress)]


async def poll_with_tool(t: Take, job_id: str, waits: Iterator[int], *, tool: str = "wait") -> list[Outcome]:
    """Polls a job until it ends, calling the wait tool (or ``sleep`` through the shell) between polls."""
    job = {"job_id": job_id}
    polls = [await t.call("jobs", "job_status", job, think=t.rng.uniform(2, 5))]
    while polls[-1].data["state"] not in DONE:
        t.check(len(polls) < 20, "the job never ended")
        seconds = next(waits)
        if tool == "wait":
            waited = await t.call("wait", "wait", {"seconds": seconds}, think=t.rng.uniform(2, 4))
        else:
            waited = await t.call("shell", "run", {"command": f"sleep {seconds}"}, think=t.rng.uniform(2, 4))
        t.check(not waited.is_error, "the wait failed")
        polls.append(await t.call("jobs", "job_status", job, think=t.rng.uniform(1, 3), wait=seconds))
    return polls


def forever(seconds: int) -> Iterator[int]:
    """The same wait every time."""
    while True:
        yield seconds


@hard_trace(
    "migration-wait-tool-plateau",
    hard_productive(
        "wait_poll",
        "The agent starts the nightly migration and polls it, calling wait(30) between polls. The copy step "
        "answers 'running, 40%' seven times (lines 6 to 18); the poll and the wait alternate with identical "
        "answers from line 5 to 18, a period-2 cycle, but each poll comes after 30 s of deliberate waiting "
        "(recorded as wait on the poll lines). The job then moves on and succeeds (line 22); the agent reads "
        "the log.",
        repeats=[6, 8, 10, 12, 14, 16, 18],
    ),
)
async def migration_wait_tool_plateau(t: Take) -> None:
    """Polling through a plateau with a wait tool between polls."""
    started = await t.call("jobs", "start_job", {"pipeline": "nightly-migration", "ref": "main"})
    polls = await poll_with_tool(t, started.data["job_id"], forever(30))
    t.check(polls[-1].data["state"] == "succeeded", "the migration did not succeed")
    t.mark(*same_state(polls, "running", 40))
    await t.call("jobs", "job_logs", {"job_id": started.data["job_id"]}, think=t.rng.uniform(2, 5))


@hard_trace(
    "backup-shell-sleep-polls",
    hard_productive(
        "wait_poll",
        "The agent starts a database backup and polls it, running `sleep 30` through the shell between polls. "
        "The dump answers 'running, 40%' four times (lines 4 to 10), then the job succeeds (line 12). The "
        "sleep command is the same each time and the shell tool is annotated destructive and not idempotent, "
        "so a side-effect rule that ignores what the command is would refuse the 3rd sleep (line 7); every "
        "poll after a sleep carries wait 30.",
        repeats=[4, 6, 8, 10],
    ),
)
async def backup_shell_sleep_polls(t: Take) -> None:
    """Polling with a shell sleep between polls (the sleeps are real: about two and a half minutes)."""
    started = await t.call("jobs", "start_job", {"pipeline": "db-backup", "ref": "main"})
    polls = await poll_with_tool(t, started.data["job_id"], forever(30), tool="shell")
    t.check(polls[-1].data["state"] == "succeeded", "the backup did not succeed")
    t.mark(*same_state(polls, "running", 40))


@hard_trace(
    "migration-wait-growing",
    hard_productive(
        "wait_poll",
        "The agent polls the nightly migration with the wait tool between polls, waiting longer each time (10, "
        "15, 20, 30, 30, 45, 60, 60, 90, 120 s). The poll answers 'running, 40%' seven times (lines 6 to 18) "
        "while the waits differ; then the job moves on and succeeds (line 22). Identical polls, but never "
        "without a deliberate wait between them.",
        repeats=[6, 8, 10, 12, 14, 16, 18],
    ),
)
async def migration_wait_growing(t: Take) -> None:
    """Polling through a plateau with growing waits."""
    started = await t.call("jobs", "start_job", {"pipeline": "nightly-migration", "ref": "main"})
    polls = await poll_with_tool(t, started.data["job_id"], iter([10, 15, 20, 30, 30, 45, 60, 60, 90, 120]))
    t.check(polls[-1].data["state"] == "succeeded", "the migration did not succeed")
    t.mark(*same_state(polls, "running", 40))


@hard_trace(
    "migration-agent-waits",
    hard_productive(
        "clock_wait",
        "The agent starts the nightly migration and polls it once a minute, waiting itself (no tool): every poll "
        "line carries wait 60. The answer is 'running, 40%' seven times in a row (lines 4 to 10) before the "
        "job moves on and succeeds (line 12). Only wait tells these identical calls in a row from a loop: a "
        "live guard sees nothing but the clock, which is no evidence (a model thinking a minute per call looks "
        "the same), so this is a case for `pollable: true` on job_status.",
        repeats=[4, 5, 6, 7, 8, 9, 10],
    ),
)
async def migration_agent_waits(t: Take) -> None:
    """Polling with the agent's own poll interval recorded as wait."""
    started = await t.call("jobs", "start_job", {"pipeline": "nightly-migration", "ref": "main"})
    job = {"job_id": started.data["job_id"]}
    polls: list[Outcome] = []
    while not polls or polls[-1].data["state"] not in DONE:
        t.check(len(polls) < 20, "the job never ended")
        polls.append(await t.call("jobs", "job_status", job, think=t.rng.uniform(2, 5), wait=60))
    t.check(polls[-1].data["state"] == "succeeded", "the migration did not succeed")
    t.mark(*same_state(polls, "running", 40))


@hard_trace(
    "two-jobs-wait-rotation",
    hard_productive(
        "wait_poll",
        "The agent starts a backup and the nightly migration, then polls both in turn with wait(30) after each "
        "round. From line 9 to 17 the rounds (backup, migration, wait) answer identically three times, a "
        "period-3 cycle; the backup then succeeds (line 18) and the agent keeps polling the migration, which "
        "answers 'running, 40%' seven times (lines 10 to 25) before it moves on and succeeds (line 29).",
        repeats=[10, 13, 16, 19, 21, 23, 25],
    ),
)
async def two_jobs_wait_rotation(t: Take) -> None:
    """Two jobs polled in turn with a wait between rounds."""
    backup = await t.call("jobs", "start_job", {"pipeline": "db-backup", "ref": "main"})
    migration = await t.call("jobs", "start_job", {"pipeline": "nightly-migration", "ref": "main"})
    pending = [backup.data["job_id"], migration.data["job_id"]]
    polls: dict[str, list[Outcome]] = {job_id: [] for job_id in pending}
    waited = 0
    while pending:
        t.check(len(polls[pending[-1]]) < 20, "a job never ended")
        for number, job_id in enumerate(list(pending)):
            outcome = await t.call(
                "jobs",
                "job_status",
                {"job_id": job_id},
                think=t.rng.uniform(1, 3),
                wait=waited if number == 0 else 0,
            )
            polls[job_id].append(outcome)
            if outcome.data["state"] in DONE:
                pending.remove(job_id)
        waited = 0
        if pending:
            await t.call("wait", "wait", {"seconds": 30}, think=t.rng.uniform(2, 4))
            waited = 30
    t.mark(*same_state(polls[migration.data["job_id"]], "running", 40))


WATCHED = ["MUG-CAFE-350", "MUG-CAFE-500", "POT-MOKA-6", "KTL-GOOSE-1L"]


@hard_trace(
    "restock-watch-wait-rounds",
    hard_productive(
        "wait_poll",
        "During a flash sale the agent was asked to watch four sold-out products and tell purchasing when one "
        "is restocked. It checks the four in turn and calls wait(60) after each round: four rounds (lines 1 to "
        "20) answer identically, a period-5 cycle; in the fifth round the first mug is back in stock (line "
        "21), and after checking the other three the agent emails purchasing (line 25).",
        repeats=[1, 6, 11, 16, 21],
    ),
)
async def restock_watch_wait_rounds(t: Take) -> None:
    """Rounds of stock checks with a wait between them, until one changes."""
    firsts: list[Outcome] = []
    waited = 0
    for _ in range(8):
        checks = []
        for number, sku in enumerate(WATCHED):
            think = t.rng.uniform(1, 3)
            checks.append(await t.call("store", "check_stock", {"sku": sku}, think=think, wait=waited * (number == 0)))
        firsts.append(checks[0])
        if any(check.data["status"] == "in_stock" for check in checks):
            break
        await t.call("wait", "wait", {"seconds": 60}, think=t.rng.uniform(2, 4))
        waited = 60
    t.check(firsts[-1].data["status"] == "in_stock", "nothing was restocked")
    t.mark(*firsts)
    await t.call(
        "store",
        "send_email",
        {
            "to": "purchasing@acme.example",
            "subject": "MUG-CAFE-350 is back in stock",
            "body": "The 350 ml café au lait mug shows 120 units available again; the other three are still sold out.",
        },
    )


@hard_trace(
    "porto-search-429-backoff",
    hard_productive(
        "backoff",
        "Looking for a Porto hotel for trip TRP-0912, the agent's room search is rate limited (429) four times; "
        "it retries the identical search after waiting 1, 2, 4 and 8 s (wait on lines 3 to 6), and the 5th "
        "attempt (line 6) answers. It then opens a hotel and notes its choice on the trip. Identical calls "
        "with the identical error, but backing off, and the 5th succeeds.",
        repeats=[2, 3, 4, 5, 6],
    ),
)
async def porto_search_429_backoff(t: Take) -> None:
    """A rate-limited search retried with exponential backoff."""
    await t.call("booking", "get_trip", {"trip_id": "TRP-0912"})
    search = {"city": "Porto", "check_in": "2026-12-16", "nights": 2}
    attempts = [await t.call("booking", "search_rooms", search)]
    for seconds in (1, 2, 4, 8):
        attempts.append(await t.call("booking", "search_rooms", search, think=1.0, wait=seconds))
    t.check([o.is_error for o in attempts] == [True, True, True, True, False], "unexpected retry outcomes")
    t.mark(*attempts)
    await t.call("booking", "get_hotel", {"hotel_id": "H-OPO-07"})
    note = "Porto: Ribeira Suites (H-OPO-07), 119 EUR a night, within policy. Booking next."
    await t.call("booking", "add_note", {"trip_id": "TRP-0912", "text": note})


@hard_trace(
    "mirror-timeout-backoff",
    hard_productive(
        "backoff",
        "The agent reads the retry guide (exponential backoff, at most 5 attempts), then fetches a package index "
        "from a mirror that times out four times (the same JSON-RPC error each time); it retries after 1, 2, 4 "
        "and 8 s (wait on lines 3 to 6) and the 5th attempt (line 6) gets the page. Then it reads the error "
        "reference.",
        repeats=[2, 3, 4, 5, 6],
    ),
)
async def mirror_timeout_backoff(t: Take) -> None:
    """A timing-out fetch retried with exponential backoff."""
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/guide/retries"})
    url = {"url": "https://mirror.example.net/simple/inventory-client/"}
    attempts = [await t.call("ops", "http_get", url)]
    for seconds in (1, 2, 4, 8):
        attempts.append(await t.call("ops", "http_get", url, think=1.0, wait=seconds))
    t.check([o.error is not None for o in attempts] == [True, True, True, True, False], "unexpected retry outcomes")
    t.mark(*attempts)
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/reference/errors"})


@hard_trace(
    "capture-503-wait-tool-backoff",
    hard_productive(
        "backoff",
        "Capturing the payment of order 4182, the agent gets '503 Service Unavailable' four times; between "
        "attempts it calls the wait tool for 1, 2, 4 and 8 s (lines 3, 5, 7, 9), and the 5th identical "
        "capture (line 10) succeeds. It then checks the order. Each attempt after a wait carries that wait.",
        repeats=[2, 4, 6, 8, 10],
    ),
)
async def capture_503_wait_tool_backoff(t: Take) -> None:
    """A failing call retried with a wait tool between attempts."""
    await t.call("store", "get_order", {"order_id": "4182"})
    payment = {"payment_id": "pay_7Hq2"}
    attempts = [await t.call("store", "capture_payment", payment)]
    for seconds in (1, 2, 4, 8):
        await t.call("wait", "wait", {"seconds": seconds}, think=t.rng.uniform(1.5, 3))
        attempts.append(await t.call("store", "capture_payment", payment, think=t.rng.uniform(1, 2), wait=seconds))
    t.check([o.is_error for o in attempts] == [True, True, True, True, False], "unexpected retry outcomes")
    t.mark(*attempts)
    await t.call("store", "get_order", {"order_id": "4182"})


@hard_trace(
    "export-progress-polls",
    hard_productive(
        "polling",
        "The agent starts an orders export and polls its status every 8 to 15 s (lines 2 to 7): queued, then "
        "12,400, 26,900, 39,050 and 47,800 of 48,210 rows, then ready with a download link. The same call "
        "six times, a different answer every time.",
        repeats=[2, 3, 4, 5, 6, 7],
    ),
)
async def export_progress_polls(t: Take) -> None:
    """Polling whose answer changes at every read."""
    started = await t.call("store", "start_export", {"report": "orders-csv"})
    export = {"export_id": started.data["export_id"]}
    polls = [await t.call("store", "export_status", export, think=t.rng.uniform(8, 15))]
    while polls[-1].data["state"] != "ready":
        t.check(len(polls) < 20, "the export never finished")
        polls.append(await t.call("store", "export_status", export, think=t.rng.uniform(8, 15)))
    t.check(len({o.text for o in polls}) == len(polls), "a poll repeated its answer")
    t.mark(*polls)


@hard_trace(
    "export-pollable-plateau",
    hard_productive(
        "polling",
        "The agent starts a stock snapshot export and polls it every 10 to 20 s: queued (line 2), then "
        "'running' with no progress six times in a row (lines 3 to 8), then ready (line 9). The operator has "
        "declared export_status pollable, as a status tool is meant to be polled until it changes.",
        repeats=[3, 4, 5, 6, 7, 8],
        config={"tools": {"export_status": {"pollable": True}}},
    ),
)
async def export_pollable_plateau(t: Take) -> None:
    """A pollable tool polled with the same answer until it changes."""
    started = await t.call("store", "start_export", {"report": "stock-snapshot"})
    export = {"export_id": started.data["export_id"]}
    polls = [await t.call("store", "export_status", export, think=t.rng.uniform(10, 20))]
    while polls[-1].data["state"] != "ready":
        t.check(len(polls) < 20, "the export never finished")
        polls.append(await t.call("store", "export_status", export, think=t.rng.uniform(10, 20)))
    t.mark(*[o for o in polls if o.data["state"] == "running"])


IMPORT_LOG = [
    "09:00:04 import started: suppliers.csv (4,812 rows)",
    "09:00:19 validated 1,200 rows",
    "09:00:34 validated 2,400 rows",
    "09:00:49 validated 3,600 rows",
    "09:01:04 validated 4,812 rows",
    "09:01:19 wrote 4,812 rows to stock_levels",
    "09:01:21 import finished: 4,812 rows, 0 rejected",
]


@hard_trace(
    "import-log-tail",
    hard_productive(
        "polling",
        "While a supplier import runs (another process appending to var/import.log), the agent reads the log's "
        "tail every 10 to 20 s with the same arguments (lines 1 to 7); each read shows a new last line, the "
        "last says the import finished, and the agent goes on to read the storage module.",
        repeats=[1, 2, 3, 4, 5, 6, 7],
    ),
)
async def import_log_tail(t: Take) -> None:
    """The same read of a file that grows between reads."""
    log = {"path": t.path("var/import.log"), "tail": 2}
    reads = []
    for shown in range(1, len(IMPORT_LOG) + 1):
        t.write("var/import.log", "".join(f"{line}\n" for line in IMPORT_LOG[:shown]))
        reads.append(await t.call("filesystem", "read_text_file", log, think=t.rng.uniform(10, 20)))
    t.check(len({o.text for o in reads}) == len(reads), "two reads of the log were the same")
    t.mark(*reads)
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/storage.py")})
