"""Loops that repeat side effects, and loops mixing several families."""

from __future__ import annotations

from tests.corpus.recording import Take, loop, trace

REFUND_EMAIL = {
    "to": "support-lead@acme.example",
    "subject": "Refund emails go out twice (#16)",
    "body": "Hi Sam, customers receive two refund emails because the refund worker retries after a timeout. "
    "Issue #16 has the details. Could the payments team take it this week?",
}
HEALTH_ISSUE = {
    "title": "Health check times out under load",
    "body": "/healthz takes over 5 s when the API serves more than 200 requests per second; the load balancer "
    "then marks healthy instances as down.",
    "labels": ["bug", "performance"],
}
BULK_EDIT = {"oldText": "if quantity > BULK_THRESHOLD:", "newText": "if quantity >= BULK_THRESHOLD:"}


@trace(
    "email-resent",
    loop(
        "side_effect",
        5,
        "Asked to email the support lead about issue #16, the agent sends the same email 15 times "
        "(lines 3 to 17); each answer is 'queued' with a new message id. send_email is destructive and not "
        "idempotent: the 2nd identical send (line 4) is warned, the 3rd (line 5) due to be refused.",
    ),
)
async def email_resent(t: Take) -> None:
    """The same email sent again and again."""
    await t.call("tracker", "get_issue", {"number": 16})
    await t.call("tracker", "search_issues", {"query": "refund"})
    sent = [await t.call("tracker", "send_email", REFUND_EMAIL) for _ in range(15)]
    t.check(len({o.data["message_id"] for o in sent}) == len(sent), "message ids repeat")


@trace(
    "issue-filed-repeatedly",
    loop(
        "side_effect",
        4,
        "The agent files the same issue 15 times in a row (lines 2 to 16), getting a new issue number each "
        "time. The 3rd identical create_issue, line 4, is due to be refused.",
    ),
)
async def issue_filed_repeatedly(t: Take) -> None:
    """create_issue with identical arguments, one new issue per call."""
    await t.call("tracker", "search_issues", {"query": "csv export unicode"})
    issue = {
        "title": "CSV export breaks on non-ASCII product names",
        "body": "Exporting the weekly report with 'Crème brûlée' in a name raises UnicodeEncodeError.",
        "labels": ["bug"],
    }
    created = [await t.call("tracker", "create_issue", issue) for _ in range(15)]
    t.check(len({o.data["number"] for o in created}) == len(created), "issue numbers repeat")


@trace(
    "issue-filed-search-lags",
    loop(
        "side_effect",
        6,
        "The agent files an issue, searches for it to check, does not find it (the search index lags) and "
        "files it again, 15 times (lines 1 to 30, creates on even lines). The 3rd identical create_issue, "
        "line 6, is due to be refused although other calls come between the repeats.",
    ),
)
async def issue_filed_search_lags(t: Take) -> None:
    """create_issue repeated with a search between each."""
    for _ in range(15):
        found = await t.call("tracker", "search_issues", {"query": "health check timeout"})
        t.check(found.data["total_count"] == 0, "the search found the new issue")
        await t.call("tracker", "create_issue", HEALTH_ISSUE)


@trace(
    "edit-reapplied",
    loop(
        "side_effect",
        4,
        "The agent applies an edit (line 2, succeeds), then applies the same edit 14 more times; each fails "
        "with 'Could not find exact match'. edit_file is destructive and not idempotent: the 3rd identical "
        "call, line 4, is due to be refused (the identical-result rule alone would refuse line 7).",
    ),
)
async def edit_reapplied(t: Take) -> None:
    """The same edit_file call again and again."""
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    edit = {"path": t.path("inventory/pricing.py"), "edits": [BULK_EDIT]}
    first = await t.call("filesystem", "edit_file", edit)
    t.check(not first.is_error, "the first edit failed")
    again = [await t.call("filesystem", "edit_file", edit) for _ in range(14)]
    t.check(all(o.is_error for o in again), "a repeated edit succeeded")


@trace(
    "move-retried",
    loop(
        "side_effect",
        4,
        "The agent renames docs/deploy.md (line 2, succeeds), then repeats the same move 14 times, each "
        "failing. move_file is destructive and not idempotent: the 3rd identical call, line 4, is due to be refused.",
    ),
)
async def move_retried(t: Take) -> None:
    """The same move_file call again and again."""
    await t.call("filesystem", "list_directory", {"path": t.path("docs")})
    move = {"source": t.path("docs/deploy.md"), "destination": t.path("docs/deployment.md")}
    first = await t.call("filesystem", "move_file", move)
    t.check(not first.is_error, "the first move failed")
    for _ in range(14):
        await t.call("filesystem", "move_file", move)


@trace(
    "search-then-reread",
    loop(
        "identical",
        8,
        "Mixed: two fruitless file searches (no warning yet), a third that finds the web code, then the "
        "same file read 16 times (lines 4 to 19). Line 8 is the 5th identical read.",
    ),
)
async def search_then_reread(t: Take) -> None:
    """A short search, then an identical-read loop."""
    for pattern in ("**/*.ts", "**/*.tsx", "**/*.js"):
        await t.call("filesystem", "search_files", {"path": t.path(), "pattern": pattern})
    for _ in range(16):
        await t.call("filesystem", "read_text_file", {"path": t.path("web/cart.js")})


@trace(
    "cycle-then-burst",
    loop(
        "burst",
        11,
        "Mixed: git_status and git_diff_unstaged alternate 3 times (lines 1 to 6, the cycle rule warns at "
        "lines 5 and 6), then one response asks for git_show HEAD 20 times at once (batch 1, lines 7 to 26). "
        "The 5th identical call of the batch, line 11, is due to be refused.",
    ),
)
async def cycle_then_burst(t: Take) -> None:
    """An A-B cycle cut short by a burst."""
    t.write(
        "inventory/models.py", t.root.joinpath("inventory/models.py").read_text() + "    warehouse: str = 'berlin'\n"
    )
    repo = {"repo_path": t.path()}
    for _ in range(3):
        await t.call("git", "git_status", repo)
        await t.call("git", "git_diff_unstaged", repo)
    await t.batch([("git", "git_show", {**repo, "revision": "HEAD"})] * 20)


@trace(
    "commit-errors-then-same-message",
    loop(
        "same_error",
        9,
        "Mixed: git_commit fails with 'No changes staged' for 4 different messages (lines 2 to 5), then for "
        "one more message repeated 14 times (lines 6 to 19). The same-error streak reaches 8 at line 9, "
        "before the identical streak that starts at line 6 reaches 5 (line 10).",
    ),
)
async def commit_errors_then_same_message(t: Take) -> None:
    """Reworded, then repeated: the same error throughout."""
    t.write(
        "inventory/report.py",
        t.root.joinpath("inventory/report.py").read_text().replace("len(values)", "max(len(values), 1)"),
    )
    repo = {"repo_path": t.path()}
    await t.call("git", "git_status", repo)
    messages = ["Fix report crash", "Fix #22", "Guard the weekly average", "report: no division by zero"]
    messages += ["Fix the weekly report on empty weeks"] * 14
    for message in messages:
        await t.call("git", "git_commit", {**repo, "message": message})


@trace(
    "npm-same-command-again",
    loop(
        "side_effect",
        8,
        "Mixed: npm fails with EACCES; the agent rotates through tweaks and keeps coming back to "
        "'npm test' (lines 2, 5, 8, 10, 12, 14 to 17). run is a shell tool, destructive and not idempotent: "
        "the 3rd identical 'npm test', line 8, is due to be refused, before the same-error streak reaches 8 (line 9).",
    ),
)
async def npm_same_command_again(t: Take) -> None:
    """Tweaks and exact repeats of a failing shell command."""
    await t.call("shell", "run", {"command": "cat package.json"})
    commands = [
        "npm test", "npm test --force", "npm  test", "npm test", "npm test --force", "npm test -- --watch=false",
        "npm test", "npm run test", "npm test", "npm ci", "npm test", "npm test --force", "npm test", "npm test",
        "npm test", "npm test",
    ]  # fmt: skip
    for command in commands:
        await t.call("shell", "run", {"command": command})


@trace(
    "status-then-escalation-emails",
    loop(
        "side_effect",
        11,
        "Mixed: the agent polls the payments status 6 times (fresh fields each time), then alternates an "
        "escalation email (the same one) with another status read, 15 times (lines 7 to 36). The 3rd "
        "identical send_email, line 11, is due to be refused.",
    ),
)
async def status_then_escalation_emails(t: Take) -> None:
    """A volatile poll, then the same escalation email again and again."""
    status = {"service": "payments"}
    for _ in range(6):
        await t.call("ops", "service_status", status, think=t.rng.uniform(10, 20))
    email = {
        "to": "payments-oncall@acme.example",
        "subject": "Payments degraded for 2 minutes (INC-2291)",
        "body": "Card authorisation in eu-west-1 is still degraded. Please take a look.",
    }
    for _ in range(15):
        await t.call("tracker", "send_email", email)
        await t.call("ops", "service_status", status, think=t.rng.uniform(10, 20))
