"""Loops that vary the arguments: the same error every time, or the same empty answer every time."""

from __future__ import annotations

from tests.corpus.recording import Outcome, Take, loop, trace

NPM_VARIANTS = [
    "npm test", "npm  test", "npm test --force", "npm run test", "npm test -- --reporter=dot", "npm t",
    "npm test --silent", "npm test --cache /tmp/npm-cache", "npm --prefer-offline test", "npm test --no-audit",
    "npm test --loglevel=error", "npm run-script test", "npm test --ignore-scripts", "npm test --unsafe-perm",
    "npx vitest run", "npx vitest", "npm exec vitest run", "npm test --legacy-peer-deps", "npm test -- --run",
    "npm run test --if-present",
]  # fmt: skip
PYTHON_VARIANTS = [
    "python3 app.py", "python3 -u app.py", "python3 -B app.py", "env PYTHONPATH=. python3 app.py",
    "python3 -s app.py", "python3 -E app.py", "python3 -O app.py", "python3 -W ignore app.py", "python3 -I app.py",
    "python3 -X utf8 app.py", "python3 -OO app.py", "nice python3 app.py", "env -u PYTHONHOME python3 app.py",
    "python3 -X faulthandler app.py", "python3 -q app.py",
]  # fmt: skip


def same_failure(take: Take, outcomes: list[Outcome], what: str) -> None:
    """Checks that every outcome failed with the same text."""
    take.check(all(o.is_error for o in outcomes), f"{what}: a call succeeded")
    take.check(len({o.text for o in outcomes}) == 1, f"{what}: the error texts differ")


def same_answer(take: Take, outcomes: list[Outcome], what: str) -> None:
    """Checks that every outcome succeeded with the same result."""
    take.check(not any(o.is_error for o in outcomes), f"{what}: a call failed")
    take.check(all(o.result == outcomes[0].result for o in outcomes), f"{what}: the results differ")


@trace(
    "npm-eacces-variants",
    loop(
        "same_error",
        10,
        "npm fails on a cache directory it may not write (EACCES). The agent tweaks the command 20 times "
        "(lines 3 to 22: 'npm test', 'npm  test', 'npm test --force', ...), all failing with the same text. "
        "Line 10 is the 8th consecutive identical error of run.",
    ),
)
async def npm_eacces_variants(t: Take) -> None:
    """The same failure with tweaked arguments (the npm part of the shell server is simulated)."""
    await t.call("shell", "run", {"command": "ls"})
    await t.call("shell", "run", {"command": "cat package.json"})
    same_failure(t, [await t.call("shell", "run", {"command": command}) for command in NPM_VARIANTS], "npm")


@trace(
    "private-repo-401-rewording",
    loop(
        "same_error",
        9,
        "Searching a private repository without credentials answers 401; the agent rewords its query "
        "15 times (lines 2 to 16) instead of reporting the missing access. Line 9 is the 8th identical error.",
    ),
)
async def private_repo_401_rewording(t: Take) -> None:
    """Reworded arguments, the same authorisation error."""
    await t.call("tracker", "search_issues", {"query": "card authorisation"})
    queries = [
        "card authorisation errors", "card authorization errors", "authorisation 5xx", "card declined eu-west-1",
        "payment auth failure", "card auth timeout", "authorisation error rate", "5xx card",
        "card authorisation incident", "authorisation regression", "declined cards", "auth errors payments",
        "card payments failing", "authorisation", "card",
    ]  # fmt: skip
    repo = "acme/payments-private"
    outcomes = [await t.call("tracker", "search_issues", {"query": query, "repo": repo}) for query in queries]
    same_failure(t, outcomes, "search_issues")


@trace(
    "commit-without-staging",
    loop(
        "same_error",
        10,
        "The agent edited a file but never stages it; git_commit fails with 'No changes staged' and it "
        "retries with 14 different messages (lines 3 to 16). Line 10 is the 8th identical error.",
    ),
)
async def commit_without_staging(t: Take) -> None:
    """Rephrased commit messages, the same error."""
    t.write("inventory/report.py", '"""The weekly stock report."""\n\n\ndef average(values: list[int]) -> float:\n'
            "    return sum(values) / len(values) if values else 0.0\n")  # fmt: skip
    repo = {"repo_path": t.path()}
    await t.call("git", "git_status", repo)
    await t.call("git", "git_diff_unstaged", repo)
    messages = [
        "Fix ZeroDivisionError in weekly report", "Handle empty weeks in the weekly report",
        "report: average of no values is 0", "Fix weekly report crash on empty weeks (#22)", "Fix #22",
        "fix: empty week average", "Weekly report: guard against empty input", "Fix report crash",
        "Avoid division by zero in average()", "report.py: return 0.0 for empty lists", "Fix bug #22",
        "Fix the weekly report", "Empty weeks no longer crash the report", "Fix average",
    ]  # fmt: skip
    same_failure(t, [await t.call("git", "git_commit", {**repo, "message": m}) for m in messages], "git_commit")


@trace(
    "refused-connection-other-paths",
    loop(
        "same_error",
        9,
        "The API host refuses connections; the agent tries 16 other paths on it (lines 2 to 17). Every call "
        "ends with the same JSON-RPC error (no result), counted as the call's error. Line 9 is the 8th.",
    ),
)
async def refused_connection_other_paths(t: Take) -> None:
    """The same JSON-RPC error for different arguments."""
    await t.call("ops", "service_status", {"service": "api"})
    paths = [
        "/v1/items", "/v1/items?page=1", "/v1/health", "/healthz", "/v1/items/ABC-1", "/v2/items", "/items",
        "/v1/status", "/", "/v1/items?limit=10", "/v1/warehouses", "/v1/items?warehouse=berlin", "/api/v1/items",
        "/v1/ping", "/status", "/v1/items/ABC-2",
    ]  # fmt: skip
    outcomes = [await t.call("ops", "http_get", {"url": f"https://api.down.example{path}"}) for path in paths]
    t.check(all(o.error is not None for o in outcomes), "http_get did not end in JSON-RPC errors")
    same_failure(t, outcomes, "http_get")


@trace(
    "missing-module-invocations",
    loop(
        "same_error",
        9,
        "The worker fails with ModuleNotFoundError: No module named 'redis'. Instead of installing it the "
        "agent runs it 15 different ways (lines 2 to 16: -u, -B, env PYTHONPATH=., -I, ...), really run, "
        "each with the same traceback. Line 9 is the 8th identical error.",
    ),
)
async def missing_module_invocations(t: Take) -> None:
    """Real commands, tweaked flags, the same traceback."""
    await t.call("shell", "run", {"command": "ls"})
    same_failure(t, [await t.call("shell", "run", {"command": c}) for c in PYTHON_VARIANTS], "python3")


@trace(
    "blocked-page-url-tweaks",
    loop(
        "same_error",
        9,
        "A site blocks the agent's fetches (403); the agent re-fetches the page with tweaked URLs 15 times "
        "(lines 2 to 16: scheme, trailing slash, query strings, fragments). Line 9 is the 8th identical error.",
    ),
)
async def blocked_page_url_tweaks(t: Take) -> None:
    """Tweaked URLs, the same 403."""
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/guide/pagination"})
    urls = [
        "https://blocked.example.org/pricing", "http://blocked.example.org/pricing",
        "https://blocked.example.org/pricing/", "https://blocked.example.org/pricing?ref=docs",
        "https://blocked.example.org/pricing#plans", "https://blocked.example.org/pricing?lang=en",
        "https://blocked.example.org/en/pricing", "https://blocked.example.org/pricing.html",
        "https://blocked.example.org/PRICING", "https://blocked.example.org/pricing?utm_source=agent",
        "https://blocked.example.org/plans", "https://blocked.example.org/pricing?print=1",
        "https://blocked.example.org/./pricing", "https://blocked.example.org/pricing?amp=1",
        "https://blocked.example.org/pricing?",
    ]  # fmt: skip
    same_failure(t, [await t.call("ops", "http_get", {"url": url}) for url in urls], "http_get")


@trace(
    "glob-search-no-matches",
    loop(
        "same_result",
        5,
        "Looking for the checkout code in a project that has none, the agent tries 20 file patterns "
        "(lines 2 to 21), each answered 'No matches found'. Line 5 is the 4th consecutive call of the tool "
        "with new arguments and the same result: the warning is due (this family is never refused by default).",
    ),
)
async def glob_search_no_matches(t: Take) -> None:
    """Different patterns, the same empty answer."""
    await t.call("filesystem", "list_directory", {"path": t.path()})
    patterns = [
        "**/*.ts", "**/*.tsx", "**/*.vue", "**/*.svelte", "**/checkout*", "**/*.graphql", "**/Dockerfile",
        "**/*.sql", "**/migrations/**", "**/*.proto", "**/*.rb", "**/*.go", "**/*.yaml", "**/*.yml",
        "**/Makefile", "**/*.ini", "**/.env*", "**/*.jsx", "**/*.scss", "**/*checkout*.js",
    ]  # fmt: skip
    outcomes = [await t.call("filesystem", "search_files", {"path": t.path(), "pattern": p}) for p in patterns]
    same_answer(t, outcomes, "search_files")


@trace(
    "issue-search-rephrasing",
    loop(
        "same_result",
        5,
        "The agent searches the tracker 30 times with ever new phrasings (lines 2 to 31) for a bug nobody "
        "filed; every answer is the same empty list. Line 5 is the 4th consecutive new-arguments same-result call.",
    ),
)
async def issue_search_rephrasing(t: Take) -> None:
    """Thirty distinct queries, one empty answer."""
    await t.call("tracker", "list_issues", {})
    queries = [
        "checkout timeout", "payment gateway timeout", "checkout hangs", "checkout slow", "order submit timeout",
        "gateway 504", "checkout 504", "payment hangs", "stuck at payment", "spinner checkout",
        "checkout never completes", "order not created", "timeout after pay", "pay button", "checkout freeze",
        "504 gateway", "payment provider timeout", "psp timeout", "checkout latency", "slow payment",
        "checkout error", "payment error 504", "order timeout", "checkout page timeout", "gateway timeout order",
        "checkout stuck", "payment stuck", "submit order hangs", "checkout request timeout", "timeout checkout",
    ]  # fmt: skip
    outcomes = [await t.call("tracker", "search_issues", {"query": query}) for query in queries]
    same_answer(t, outcomes, "search_issues")


@trace(
    "labels-all-empty",
    loop(
        "same_result",
        5,
        "Hunting for urgent issues, the agent lists issues by 15 different labels (lines 2 to 16), none of "
        "which exists: every page is empty. Line 5 is the 4th consecutive new-arguments same-result call.",
    ),
)
async def labels_all_empty(t: Take) -> None:
    """Different filters, the same empty page."""
    await t.call("tracker", "list_issues", {"label": "bug"})
    labels = [
        "regression", "p0", "critical", "incident", "outage", "sev1", "customer-reported", "urgent", "hotfix",
        "blocker", "data-loss", "prod", "escalated", "payments", "sev2",
    ]  # fmt: skip
    same_answer(t, [await t.call("tracker", "list_issues", {"label": label}) for label in labels], "list_issues")
