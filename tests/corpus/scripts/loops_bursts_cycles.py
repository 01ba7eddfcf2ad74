"""Loops of identical calls in one parallel batch, and cycles of two to four calls."""

from __future__ import annotations

from tests.corpus.recording import Take, loop, trace
from tests.corpus.workspace import PRICING

TAX_LINE = "(amount * TAX_RATE)"


@trace(
    "burst-20-same-read",
    loop(
        "burst",
        7,
        "One model response asks for the same file 20 times at once (issued concurrently, batch 1, "
        "lines 3 to 22). The 5th identical call of the batch, line 7, is due to be refused.",
    ),
)
async def burst_20_same_read(t: Take) -> None:
    """Twenty concurrent identical reads."""
    await t.call("filesystem", "list_directory", {"path": t.path("inventory")})
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    read = ("filesystem", "read_text_file", {"path": t.path("tests/test_pricing.py")})
    outcomes = await t.batch([read] * 20)
    t.check(all(o == outcomes[0] for o in outcomes), "the reads differ")


@trace(
    "burst-60-git-status",
    loop(
        "burst",
        8,
        "After a look at the log, the diff and the branches, a degenerate model response of 60 identical "
        "git_status calls, issued concurrently (batch 1, lines 4 to 63). The 5th identical call of the batch, "
        "line 8, is due to be refused.",
    ),
)
async def burst_60_git_status(t: Take) -> None:
    """Sixty concurrent identical calls."""
    repo = {"repo_path": t.path()}
    await t.call("git", "git_log", {**repo, "max_count": 3})
    await t.call("git", "git_diff_unstaged", repo)
    await t.call("git", "git_branch", {**repo, "branch_type": "local"})
    await t.batch([("git", "git_status", repo)] * 60)


@trace(
    "burst-duplicates-among-reads",
    loop(
        "burst",
        10,
        "A batch of 14 reads (lines 2 to 15) in which inventory/pricing.py is asked for 8 times, at lines "
        "4, 5, 7, 8, 10, 11, 12 and 14. Its 5th copy, line 10, is due to be refused.",
    ),
)
async def burst_duplicates_among_reads(t: Take) -> None:
    """A batch of distinct reads with one file repeated eight times."""
    await t.call("filesystem", "list_directory", {"path": t.path()})
    order = [
        "README.md", "config.json", "P", "P", "inventory/models.py", "P", "P", "inventory/storage.py",
        "P", "P", "P", "tests/test_pricing.py", "P", "docs/pricing.md",
    ]  # fmt: skip
    paths = ["inventory/pricing.py" if name == "P" else name for name in order]
    await t.batch([("filesystem", "read_text_file", {"path": t.path(path)}) for path in paths])


@trace(
    "burst-sum-twice",
    loop(
        "burst",
        6,
        "Two consecutive model responses each ask for the same sum 12 times at once (batch 1: lines 2 to "
        "13, batch 2: lines 14 to 25). The 5th identical call of batch 1, line 6, is due to be refused.",
    ),
)
async def burst_sum_twice(t: Take) -> None:
    """Two bursts of the same call."""
    await t.call("everything", "get-sum", {"a": 19.99, "b": 5.01})
    call = ("everything", "get-sum", {"a": 1234, "b": 4321})
    await t.batch([call] * 12)
    await t.batch([call] * 12)


@trace(
    "config-read-write-cycle",
    loop(
        "cycle",
        11,
        "Asked to enable csv_export, the agent reads config.json and writes it back unchanged, 15 times "
        "(lines 3 to 32): a period-2 cycle of identical calls and results from line 3, refused at its "
        "9th call, line 11. write_file is destructive but idempotent, so the side-effect rule does not apply.",
    ),
)
async def config_read_write_cycle(t: Take) -> None:
    """A-B: read, write back the same content, read again."""
    await t.call("filesystem", "list_directory", {"path": t.path()})
    await t.call("filesystem", "read_text_file", {"path": t.path("docs/pricing.md")})
    config = t.path("config.json")
    for _ in range(15):
        read = await t.call("filesystem", "read_text_file", {"path": config})
        await t.call("filesystem", "write_file", {"path": config, "content": read.text})


@trace(
    "git-status-diff-cycle",
    loop(
        "cycle",
        10,
        "With one modified file, the agent alternates git_status and git_diff_unstaged 14 times each "
        "(lines 2 to 29) and never stages anything: a period-2 cycle from line 2, refused at its 9th call, line 10.",
    ),
)
async def git_status_diff_cycle(t: Take) -> None:
    """A-B with git, nothing changing."""
    t.write("inventory/report.py", t.root.joinpath("inventory/report.py").read_text() + "\n# TODO: empty weeks\n")
    repo = {"repo_path": t.path()}
    await t.call("git", "git_log", {**repo, "max_count": 3})
    for _ in range(14):
        await t.call("git", "git_status", repo)
        await t.call("git", "git_diff_unstaged", repo)


@trace(
    "read-test-read-cycle",
    loop(
        "cycle",
        14,
        "Debugging failing tests, the agent reads the test file, runs the tests, reads the source, and "
        "starts over without editing anything, 10 times (lines 2 to 31): a period-3 cycle from line 2, "
        "refused at its 13th call, line 14. run_tests fails the same way each time, at every 3rd call.",
    ),
)
async def read_test_read_cycle(t: Take) -> None:
    """A-B-C: the same three calls and answers, again and again."""
    await t.call("filesystem", "list_directory", {"path": t.path("tests")})
    for _ in range(10):
        await t.call("filesystem", "read_text_file", {"path": t.path("tests/test_pricing.py")})
        await t.call("shell", "run_tests", {})
        await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})


@trace(
    "git-four-step-cycle",
    loop(
        "cycle",
        18,
        "The agent cycles through git_status, git_diff_unstaged, git_log and git_show HEAD 10 times "
        "(lines 2 to 41) with nothing changing: a period-4 cycle from line 2, refused at its 17th call, line 18.",
    ),
)
async def git_four_step_cycle(t: Take) -> None:
    """A-B-C-D with git."""
    t.write("docs/deploy.md", t.root.joinpath("docs/deploy.md").read_text() + "\nRollback: redeploy the last tag.\n")
    repo = {"repo_path": t.path()}
    await t.call("git", "git_branch", {**repo, "branch_type": "local"})
    for _ in range(10):
        await t.call("git", "git_status", repo)
        await t.call("git", "git_diff_unstaged", repo)
        await t.call("git", "git_log", {**repo, "max_count": 5})
        await t.call("git", "git_show", {**repo, "revision": "HEAD"})


@trace(
    "tax-fix-flip-flop",
    loop(
        "cycle",
        20,
        "Fixing the tax test, the agent alternates between two wrong versions of pricing.py, running the "
        "tests after each, 8 times (lines 4 to 35): write A, tests fail one way, write B, tests fail "
        "another way. A period-4 cycle from line 4, refused at its 17th call, line 20.",
    ),
)
async def tax_fix_flip_flop(t: Take) -> None:
    """A-B-C-D: two wrong fixes in turn, each with its own failure."""
    first = await t.call("shell", "run_tests", {})
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    await t.call("filesystem", "read_text_file", {"path": t.path("tests/test_pricing.py")})
    versions = [
        PRICING.replace(TAX_LINE, "(amount * (1 + TAX_RATE / 100))"),
        PRICING.replace(TAX_LINE, "(amount + TAX_RATE)"),
    ]
    runs = []
    for _ in range(8):
        for version in versions:
            await t.call("filesystem", "write_file", {"path": t.path("inventory/pricing.py"), "content": version})
            runs.append(await t.call("shell", "run_tests", {}))
    t.check(
        runs[0] != runs[1] and runs[0] != first and all(o.is_error for o in runs),
        "the two fixes do not fail differently",
    )


@trace(
    "rotating-issue-search",
    loop(
        "cycle",
        14,
        "The agent looks for an existing issue with three phrasings in turn, 9 rounds (lines 2 to 28), "
        "and every search finds nothing: a period-3 cycle from line 2, refused at its 13th call, line 14 "
        "(the same-result rule warns earlier, at line 5).",
    ),
)
async def rotating_issue_search(t: Take) -> None:
    """Rotating search queries, all with the same empty answer."""
    await t.call("tracker", "list_issues", {"label": "bug"})
    queries = ["refund duplicated", "double refund mail", "refund notification sent again"]
    for _ in range(9):
        for query in queries:
            found = await t.call("tracker", "search_issues", {"query": query})
            t.check(found.data["total_count"] == 0, f"{query!r} found something")
