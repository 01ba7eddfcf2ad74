"""Productive coding work: reading many files, test-edit-test cycles, edits, scaffolding, git."""

from __future__ import annotations

from tests.corpus.recording import Take, productive, trace
from tests.corpus.workspace import HANDLERS

FIXES = [
    {"oldText": "if quantity > BULK_THRESHOLD:", "newText": "if quantity >= BULK_THRESHOLD:"},
    {"oldText": "(amount * TAX_RATE).quantize", "newText": "(amount * (1 + TAX_RATE)).quantize"},
    {
        "oldText": "return int(amount * 100)",
        "newText": "return int((amount * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))",
    },
]
UNITTEST = "python3 -m unittest discover -s tests -t ."
FORTY = [
    "README.md", "CHANGELOG.md", "pyproject.toml", "config.json", "package.json", "app.py",
    "inventory/pricing.py", "inventory/models.py", "inventory/storage.py", "inventory/report.py",
    "inventory/api/routes.py", "inventory/api/schemas.py", "inventory/api/auth.py", "inventory/cli/main.py",
    "inventory/utils/money.py", *[f"inventory/handlers/{event}.py" for event in HANDLERS],
    "tests/test_pricing.py", "docs/pricing.md", "docs/deploy.md", "web/index.js", "web/cart.js",
]  # fmt: skip


@trace(
    "read-40-files",
    productive(
        "Onboarding onto the project, the agent lists it and reads 40 different files one after another. "
        "Forty calls of one tool, all with different arguments and different results."
    ),
)
async def read_40_files(t: Take) -> None:
    """A long run of one tool over many files."""
    t.check(len(set(FORTY)) == 40, "not 40 distinct files")
    await t.call("filesystem", "list_directory", {"path": t.path()})
    reads = [
        await t.call("filesystem", "read_text_file", {"path": t.path(p)}, think=t.rng.uniform(1, 3)) for p in FORTY
    ]
    t.check(len({o.text for o in reads}) == 40, "two files read the same")


@trace(
    "read-empty-init-files",
    productive(
        "Checking what the packages re-export, the agent reads the six __init__.py files: all empty, so the "
        "same result for different arguments six times in a row (the same-result rule warns at line 5). "
        "Reading them is legitimate and it moves on."
    ),
)
async def read_empty_init_files(t: Take) -> None:
    """Different files with the same (empty) content."""
    await t.call("filesystem", "list_directory", {"path": t.path("inventory")})
    inits = ["inventory", "inventory/api", "inventory/cli", "inventory/utils", "inventory/handlers", "tests"]
    reads = [await t.call("filesystem", "read_text_file", {"path": t.path(f"{p}/__init__.py")}) for p in inits]
    t.check(all(o.text == "" for o in reads), "an __init__.py is not empty")
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/models.py")})


@trace(
    "test-edit-test",
    productive(
        "Fixing three failing tests: run the tests, read the code, fix one bug, run the tests again, "
        "until all pass (4 runs: 3, 2, 1, then 0 failures). The same test call repeats with a different "
        "answer each time."
    ),
)
async def test_edit_test(t: Take) -> None:
    """A test-edit-test cycle that makes progress."""
    runs = [await t.call("shell", "run_tests", {})]
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    for fix in FIXES:
        edited = await t.call("filesystem", "edit_file", {"path": t.path("inventory/pricing.py"), "edits": [fix]})
        t.check(not edited.is_error, "an edit failed")
        runs.append(await t.call("shell", "run_tests", {}))
    t.check([o.is_error for o in runs] == [True, True, True, False], "the fixes did not fix the tests one by one")


@trace(
    "test-edit-test-shell",
    productive(
        "The same test-edit-test cycle through a general shell tool: 'python3 -m unittest ...' is run 4 "
        "times with identical arguments, a fix between each, the failures going 3, 2, 1, 0. The shell tool "
        "is annotated destructive and not idempotent, so the side-effect rule as written warns at the 2nd run "
        "(line 4) and refuses the 3rd (line 6): a false positive to avoid. Test durations are normalised."
    ),
)
async def test_edit_test_shell(t: Take) -> None:
    """A test-edit-test cycle through run{command}."""
    t.normalise_also(r"Ran (\d+) tests? in \d+\.\d+s", r"Ran \1 tests in 0.001s")
    runs = [await t.call("shell", "run", {"command": UNITTEST})]
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    for fix in FIXES:
        await t.call("filesystem", "edit_file", {"path": t.path("inventory/pricing.py"), "edits": [fix]})
        runs.append(await t.call("shell", "run", {"command": UNITTEST}))
    t.check([o.is_error for o in runs] == [True, True, True, False], "the fixes did not fix the tests one by one")


@trace(
    "file-search-third-try",
    productive(
        "Looking for the pricing code, the agent's first two file patterns find nothing, the third finds "
        "three files, which it reads. A search that finds something on the 3rd try."
    ),
)
async def file_search_third_try(t: Take) -> None:
    """Two empty searches, then a hit."""
    for pattern in ("**/*discount*", "**/*price*", "**/*pricing*"):
        found = await t.call("filesystem", "search_files", {"path": t.path(), "pattern": pattern})
    t.check("pricing.py" in found.text, "the third search found nothing")
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    await t.call("filesystem", "read_text_file", {"path": t.path("docs/pricing.md")})


@trace(
    "read-edit-read",
    productive(
        "The agent reads pricing.py before and after each of three edits: the same read four times, "
        "with a different answer each time because the file changed in between."
    ),
)
async def read_edit_read(t: Take) -> None:
    """Reading the same file before and after editing it."""
    path = t.path("inventory/pricing.py")
    reads = [await t.call("filesystem", "read_text_file", {"path": path})]
    for fix in FIXES:
        await t.call("filesystem", "edit_file", {"path": path, "edits": [fix]})
        reads.append(await t.call("filesystem", "read_text_file", {"path": path}))
    t.check(len({o.text for o in reads}) == 4, "a read did not see the edit")


@trace(
    "mkdir-before-each-write",
    productive(
        "Scaffolding a CSV export, the agent calls create_directory before every file it writes (the same "
        "directory three times, an idempotent call), writes the tests, runs them, and saves csv.py again "
        "with the same content after a review. Idempotent repeats between different writes."
    ),
)
async def mkdir_before_each_write(t: Take) -> None:
    """Idempotent calls repeated around distinct writes."""
    csv = '"""CSV export of the stock report."""\n\nimport csv\nimport io\n\n\ndef to_csv(rows: list[dict]) -> str:\n'
    csv += "    out = io.StringIO()\n    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else [])\n"
    csv += "    writer.writeheader()\n    writer.writerows(rows)\n    return out.getvalue()\n"
    test = "import unittest\n\nfrom inventory.exports.csv import to_csv\n\n\nclass CsvTest(unittest.TestCase):\n"
    test += (
        '    def test_header_and_row(self):\n        self.assertEqual(to_csv([{"sku": "A1"}]), "sku\\r\\nA1\\r\\n")\n'
    )
    files = [("inventory/exports/__init__.py", ""), ("inventory/exports/csv.py", csv)]
    files += [("inventory/exports/formats.py", 'FORMATS = ("csv",)\n')]
    for relative, content in files:
        await t.call("filesystem", "create_directory", {"path": t.path("inventory/exports")})
        await t.call("filesystem", "write_file", {"path": t.path(relative), "content": content})
    await t.call("filesystem", "write_file", {"path": t.path("tests/test_exports.py"), "content": test})
    passed = await t.call("shell", "run_tests", {"pattern": "test_exports.py"})
    t.check(not passed.is_error, "the export test failed")
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/exports/csv.py")})
    await t.call("filesystem", "write_file", {"path": t.path("inventory/exports/csv.py"), "content": csv})


@trace(
    "rename-import-across-handlers",
    productive(
        "Renaming the storage module, the agent moves it, then applies the same import change to each of "
        "the 20 handler files, one edit_file per file (different paths, different diffs), then checks that "
        "no old import is left. Batch edits across files."
    ),
)
async def rename_import_across_handlers(t: Take) -> None:
    """The same change applied to many files."""
    await t.call(
        "filesystem",
        "move_file",
        {"source": t.path("inventory/storage.py"), "destination": t.path("inventory/store.py")},
    )
    edit = {"oldText": "from inventory.storage import", "newText": "from inventory.store import"}
    for event in HANDLERS:
        path = t.path(f"inventory/handlers/{event}.py")
        done = await t.call("filesystem", "edit_file", {"path": path, "edits": [edit]}, think=t.rng.uniform(1, 3))
        t.check(not done.is_error, f"the edit of {event} failed")
    await t.call("filesystem", "search_files", {"path": t.path("inventory"), "pattern": "**/storage*"})


@trace(
    "git-feature-branch",
    productive(
        "A routine git workflow: status, branch, checkout, read, edit, status, diff, add, status, commit, "
        "status, log. git_status appears four times with a different answer each time."
    ),
)
async def git_feature_branch(t: Take) -> None:
    """A normal git session."""
    repo = {"repo_path": t.path()}
    await t.call("git", "git_status", repo)
    await t.call("git", "git_create_branch", {**repo, "branch_name": "fix/bulk-discount"})
    await t.call("git", "git_checkout", {**repo, "branch_name": "fix/bulk-discount"})
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")})
    await t.call("filesystem", "edit_file", {"path": t.path("inventory/pricing.py"), "edits": [FIXES[0]]})
    await t.call("git", "git_status", repo)
    await t.call("git", "git_diff_unstaged", repo)
    await t.call("git", "git_add", {**repo, "files": ["inventory/pricing.py"]})
    await t.call("git", "git_status", repo)
    committed = await t.call("git", "git_commit", {**repo, "message": "Apply the bulk discount from 10 units"})
    t.check(not committed.is_error, "the commit failed")
    await t.call("git", "git_status", repo)
    await t.call("git", "git_log", {**repo, "max_count": 3})


@trace(
    "import-error-three-runs",
    productive(
        "A new test fails to import order_total. The agent's first two attempts put the function in the "
        "wrong place, so the test run fails with the same ImportError three times (edits between each); the "
        "third attempt fixes it and the run passes. The same-error rule may warn at the 3rd run; nothing is "
        "due to be refused."
    ),
)
async def import_error_three_runs(t: Take) -> None:
    """The same error three times while the agent works toward the fix."""
    t.write(
        "tests/test_order.py",
        "import unittest\nfrom decimal import Decimal\n\nfrom inventory.pricing import order_total\n\n\n"
        "class OrderTest(unittest.TestCase):\n    def test_empty_order(self):\n"
        '        self.assertEqual(order_total([]), Decimal("0.00"))\n',
    )
    orders = (
        '"""Order totals."""\n\nfrom decimal import Decimal\n\nfrom inventory.pricing import line_total, with_tax\n\n\n'
    )
    orders += "def order_total(lines):\n    return with_tax(sum((line_total(p, q) for p, q in lines), Decimal(0)))\n"
    only = {"pattern": "test_order.py"}
    runs = [await t.call("shell", "run_tests", only)]
    await t.call("filesystem", "write_file", {"path": t.path("inventory/orders.py"), "content": orders})
    runs.append(await t.call("shell", "run_tests", only))
    await t.call(
        "filesystem",
        "write_file",
        {"path": t.path("inventory/__init__.py"), "content": "from inventory.orders import order_total\n"},
    )
    runs.append(await t.call("shell", "run_tests", only))
    await t.call("filesystem", "read_text_file", {"path": t.path("tests/test_order.py")})
    await t.call("filesystem", "write_file", {"path": t.path("inventory/__init__.py"), "content": ""})
    orders_in_pricing = (
        "\n\ndef order_total(lines):\n    return with_tax(sum((line_total(p, q) for p, q in lines), Decimal(0)))\n"
    )
    pricing = t.root.joinpath("inventory/pricing.py").read_text()
    await t.call(
        "filesystem", "write_file", {"path": t.path("inventory/pricing.py"), "content": pricing + orders_in_pricing}
    )
    runs.append(await t.call("shell", "run_tests", only))
    t.check(len({o.text for o in runs[:3]}) == 1 and runs[0].is_error, "the first three runs differ")
    t.check(not runs[3].is_error, "the fix did not work")


@trace(
    "git-add-file-by-file",
    productive(
        "The agent stages six changed files one git_add at a time; each answers 'Files staged successfully', "
        "the same result for different arguments (the same-result rule warns at line 5), then commits."
    ),
)
async def git_add_file_by_file(t: Take) -> None:
    """One identical answer for distinct, useful calls."""
    changed = [f"inventory/handlers/{event}.py" for event in HANDLERS[:6]]
    for relative in changed:
        t.write(relative, t.root.joinpath(relative).read_text().replace("save(", "save_now("))
    repo = {"repo_path": t.path()}
    await t.call("git", "git_status", repo)
    for relative in changed:
        await t.call("git", "git_add", {**repo, "files": [relative]})
    await t.call("git", "git_status", repo)
    committed = await t.call("git", "git_commit", {**repo, "message": "Handlers save immediately"})
    t.check(not committed.is_error, "the commit failed")


@trace(
    "commit-after-staging",
    productive(
        "git_commit fails because nothing is staged; the agent stages the file and runs the identical "
        "git_commit again, which succeeds. The same call twice, the second after fixing the cause."
    ),
)
async def commit_after_staging(t: Take) -> None:
    """A failed call repeated identically once the cause is fixed."""
    t.write(
        "docs/deploy.md", t.root.joinpath("docs/deploy.md").read_text() + "\nRollback: redeploy the previous tag.\n"
    )
    repo = {"repo_path": t.path()}
    commit = {**repo, "message": "Document rollbacks"}
    await t.call("git", "git_diff_unstaged", repo)
    first = await t.call("git", "git_commit", commit)
    await t.call("git", "git_add", {**repo, "files": ["docs/deploy.md"]})
    second = await t.call("git", "git_commit", commit)
    t.check(first.is_error and not second.is_error, "the commits did not fail then succeed")
    await t.call("git", "git_log", {**repo, "max_count": 2})


@trace(
    "scaffold-and-verify",
    productive(
        "The agent writes five new documentation pages, reading each back after writing it: write_file and "
        "read_text_file alternate (an A-B pattern of tools) with different files each time."
    ),
)
async def scaffold_and_verify(t: Take) -> None:
    """Write, read back, next file."""
    pages = {
        "docs/api.md": "# API\n\nGET /items lists items; GET /items/{sku} returns one.\n",
        "docs/auth.md": "# Authentication\n\nScanners send an API key in the X-Api-Key header.\n",
        "docs/reports.md": "# Reports\n\nThe weekly stock report runs on Mondays at 06:00 UTC.\n",
        "docs/handlers.md": "# Event handlers\n\nOne module per event under inventory/handlers.\n",
        "docs/exports.md": "# Exports\n\nCSV export is behind the csv_export feature flag.\n",
    }
    for relative, content in pages.items():
        await t.call("filesystem", "write_file", {"path": t.path(relative), "content": content})
        back = await t.call("filesystem", "read_text_file", {"path": t.path(relative)})
        t.check(back.text == content, f"{relative} did not read back")
