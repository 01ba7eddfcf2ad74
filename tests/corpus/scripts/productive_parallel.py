"""Productive work with batches, several sessions, pagination and side effects done once each."""

from __future__ import annotations

from tests.corpus.recording import Take, productive, trace

DIGEST = {
    "to": "shop-team@acme.example",
    "subject": "Triage of open bugs",
    "body": "Refund emails go out twice (#16) is the most urgent open bug; details in the issue.",
}


@trace(
    "issue-pages",
    productive(
        "The agent lists all issues page by page (3 pages), then opens two of them. Pagination: the same "
        "tool with a page number that moves on."
    ),
)
async def issue_pages(t: Take) -> None:
    """Page-number pagination."""
    for page in (1, 2, 3):
        listed = await t.call("tracker", "list_issues", {"state": "all", "page": page})
        if not listed.data["has_next"]:
            break
    t.check(page == 3, "not three pages")
    await t.call("tracker", "get_issue", {"number": 3})
    await t.call("tracker", "get_issue", {"number": 12})


@trace(
    "issue-search-fourth-try",
    productive(
        "Three phrasings find nothing (the same empty answer three times), the fourth finds issue #16, "
        "which the agent opens and comments on."
    ),
)
async def issue_search_fourth_try(t: Take) -> None:
    """A search that succeeds after a few misses."""
    for query in ("duplicate refund", "refund sent twice", "double refund email", "refund twice"):
        found = await t.call("tracker", "search_issues", {"query": query})
    t.check(found.data["total_count"] == 1, "the fourth search did not find #16")
    await t.call("tracker", "get_issue", {"number": 16})
    await t.call(
        "tracker", "add_comment", {"number": 16, "body": "Reproduced: a timeout in the refund worker resends."}
    )


@trace(
    "parallel-distinct-reads",
    productive(
        "One model response reads 12 different files at once (issued concurrently, one batch). Parallel "
        "reads of different files."
    ),
)
async def parallel_distinct_reads(t: Take) -> None:
    """A batch of distinct reads."""
    await t.call("filesystem", "list_directory", {"path": t.path("inventory")})
    paths = [
        "inventory/pricing.py", "inventory/models.py", "inventory/storage.py", "inventory/report.py",
        "inventory/api/routes.py", "inventory/api/schemas.py", "inventory/api/auth.py", "inventory/cli/main.py",
        "inventory/utils/money.py", "tests/test_pricing.py", "docs/pricing.md", "config.json",
    ]  # fmt: skip
    await t.batch([("filesystem", "read_text_file", {"path": t.path(p)}) for p in paths])
    await t.call("filesystem", "read_text_file", {"path": t.path("README.md")})


@trace(
    "git-batches-before-after",
    productive(
        "The agent asks for status, log, diff and branches in one batch, makes and commits a change, then "
        "asks for the same four in one batch again: the same calls, most answers changed."
    ),
)
async def git_batches_before_after(t: Take) -> None:
    """A batch of distinct calls, repeated after the work it informed."""
    repo = {"repo_path": t.path()}
    overview = [
        ("git", "git_status", repo),
        ("git", "git_log", {**repo, "max_count": 3}),
        ("git", "git_diff_unstaged", repo),
        ("git", "git_branch", {**repo, "branch_type": "local"}),
    ]
    await t.batch(overview)
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/report.py")})
    edit = {
        "oldText": "return sum(values) / len(values)",
        "newText": "return sum(values) / len(values) if values else 0.0",
    }
    await t.call("filesystem", "edit_file", {"path": t.path("inventory/report.py"), "edits": [edit]})
    await t.call("git", "git_add", {**repo, "files": ["inventory/report.py"]})
    await t.call("git", "git_commit", {**repo, "message": "Weekly report: average of an empty week is 0"})
    await t.batch(overview)


@trace(
    "two-agents-triage",
    productive(
        "Two independent sessions (s1, s2) do the same triage at the same time, interleaved: list bugs, open "
        "#16, search, comment, and each sends the same digest email once. Merged into one stream the "
        "calls pair up and the email goes out twice; within each session nothing repeats."
    ),
)
async def two_agents_triage(t: Take) -> None:
    """Two sessions, the same work, their own state each."""
    steps = [
        ("list_issues", {"label": "bug"}),
        ("get_issue", {"number": 16}),
        ("search_issues", {"query": "refund"}),
        ("add_comment", {"number": 16, "body": "{who}: confirmed, refund worker resends on timeout."}),
        ("send_email", DIGEST),
    ]
    for tool, arguments in steps:
        for session, who in (("s1", "Agent A"), ("s2", "Agent B")):
            filled = {
                k: v.format(who=who) if isinstance(v, str) and tool == "add_comment" else v
                for k, v in arguments.items()
            }
            await t.call("tracker", tool, filled, session=session, think=1.0 if session == "s2" else None)


@trace(
    "two-agents-build",
    productive(
        "Two independent sessions (s1, s2), each with its own CI runner, start the same build and poll it "
        "in lockstep until it succeeds. Merged, every call appears twice in a row with the same answer; "
        "within each session every poll shows progress."
    ),
)
async def two_agents_build(t: Take) -> None:
    """Two sessions polling identical jobs side by side."""
    job_ids = {}
    for session in ("s1", "s2"):
        started = await t.call("jobs", "start_job", {"pipeline": "build", "ref": "main"}, session=session, think=0.5)
        job_ids[session] = started.data["job_id"]
    done = False
    while not done:
        for session in ("s1", "s2"):
            think = t.rng.uniform(15, 25) if session == "s1" else 0.5
            status = await t.call("jobs", "job_status", {"job_id": job_ids[session]}, session=session, think=think)
            done = status.data["state"] == "succeeded"


@trace(
    "deploy-announced-twice",
    productive(
        "Two deploys in one session, a release and then a hotfix: each is announced in #deploys with the "
        "same text, started, and polled until done. post_message is destructive and not idempotent, so its "
        "2nd identical call (line 10) is warned; it is meant. Each rollout also repeats one status three times "
        "(warned at lines 7 and 16). Nothing is due to be refused."
    ),
)
async def deploy_announced_twice(t: Take) -> None:
    """The same announcement for two different deploys."""
    announcement = {"channel": "#deploys", "text": "Deploying shop to staging, back in 5 minutes."}
    for ref in ("v1.8.1", "v1.8.2"):
        await t.call("tracker", "post_message", announcement, think=30)
        started = await t.call("jobs", "start_job", {"pipeline": "deploy-staging", "ref": ref})
        for _ in range(10):
            status = await t.call("jobs", "job_status", {"job_id": started.data["job_id"]}, think=t.rng.uniform(10, 20))
            if status.data["state"] == "succeeded":
                break
        await t.call("tracker", "post_message", {"channel": "#deploys", "text": f"Staging runs {ref}."})


@trace(
    "file-checklist-issues",
    productive(
        "From an audit checklist the agent files eight different issues one after another (create_issue "
        "with different titles), then lists the open ones."
    ),
)
async def file_checklist_issues(t: Take) -> None:
    """A non-idempotent tool called many times with different arguments."""
    titles = [
        "Rotate the scanner API keys", "Enforce TLS 1.2 on the admin panel", "Log failed admin logins",
        "Expire password reset links after 1 hour", "Remove default credentials from the staging seed",
        "Add rate limiting to /login", "Pin third-party scripts with SRI", "Encrypt backups at rest",
    ]  # fmt: skip
    for title in titles:
        await t.call(
            "tracker", "create_issue", {"title": title, "body": "From the Q4 security audit.", "labels": ["security"]}
        )
    await t.call("tracker", "list_issues", {"label": "security"})


@trace(
    "weather-and-sums",
    productive(
        "The agent fetches the weather of three cities in one batch, then adds the temperatures with the "
        "sum tool step by step. Distinct calls throughout."
    ),
)
async def weather_and_sums(t: Take) -> None:
    """A batch of distinct calls, then a chain of calculations."""
    cities = ("New York", "Chicago", "Los Angeles")
    weather = await t.batch([("everything", "get-structured-content", {"location": city}) for city in cities])
    temperatures = [o.data["temperature"] for o in weather]
    total = await t.call("everything", "get-sum", {"a": temperatures[0], "b": temperatures[1]})
    await t.call("everything", "get-sum", {"a": temperatures[0] + temperatures[1], "b": temperatures[2]})
    t.check(not total.is_error, "the sum failed")


@trace(
    "batch-one-duplicate",
    productive(
        "One model response reads 10 files at once and names one of them twice. A duplicate in a batch, "
        "below any threshold."
    ),
)
async def batch_one_duplicate(t: Take) -> None:
    """A batch with a single accidental duplicate."""
    paths = [
        "README.md", "config.json", "inventory/pricing.py", "inventory/models.py", "docs/pricing.md",
        "inventory/pricing.py", "tests/test_pricing.py", "inventory/report.py", "docs/deploy.md", "web/cart.js",
    ]  # fmt: skip
    await t.batch([("filesystem", "read_text_file", {"path": t.path(p)}) for p in paths])
    await t.call(
        "filesystem",
        "write_file",
        {"path": t.path("docs/pricing.md"), "content": "# Pricing\n\nSee inventory/pricing.py.\n"},
    )


@trace(
    "page-and-inspect",
    productive(
        "The agent alternates listing a page of open issues and opening one issue from it, for three pages: "
        "an A-B pattern of tools whose arguments move on each time."
    ),
)
async def page_and_inspect(t: Take) -> None:
    """Alternating list and detail calls."""
    for page in (1, 2):
        listed = await t.call("tracker", "list_issues", {"state": "open", "page": page})
        first = listed.data["issues"][0]["number"]
        await t.call("tracker", "get_issue", {"number": first})
    await t.call("tracker", "list_issues", {"state": "closed"})
    await t.call("tracker", "get_issue", {"number": 14})


@trace(
    "close-issues-idempotent",
    productive(
        "Closing issues fixed by a release: close_issue on three issues, a listing, then close_issue on one "
        "of them again to be sure. close_issue is destructive but idempotent: repeating it changes nothing."
    ),
)
async def close_issues_idempotent(t: Take) -> None:
    """An idempotent destructive tool repeated."""
    for number in (1, 12, 22):
        await t.call("tracker", "close_issue", {"number": number})
    await t.call("tracker", "list_issues", {"state": "closed"})
    again = await t.call("tracker", "close_issue", {"number": 12})
    t.check(again.data["state"] == "closed", "the issue is not closed")
    await t.call("tracker", "add_comment", {"number": 12, "body": "Fixed in 1.8.1."})
