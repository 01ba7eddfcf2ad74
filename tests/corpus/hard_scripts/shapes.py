"""Hard loops by shape: long cycles, repeats with other calls between, failures in batches, reworded searches."""

from __future__ import annotations

from typing import Any

from tests.corpus.hard_labels import hard_loop, hard_trace
from tests.corpus.recording import Outcome, Take

Call = tuple[str, str, dict[str, Any]]


async def cycle(t: Take, calls: list[Call], rounds: int) -> None:
    """Makes the calls in turn for some rounds; checks every round answers as the first, marks each round's start."""
    answers: list[list[Outcome]] = []
    for _ in range(rounds):
        answers.append([await t.call(server, tool, arguments) for server, tool, arguments in calls])
    t.check(all(round_ == answers[0] for round_ in answers), "a round of the cycle answered differently")
    t.mark(*(round_[0] for round_ in answers))


def starts(period: int, rounds: int, first: int = 1) -> list[int]:
    """The lines where the rounds of a cycle begin."""
    return [first + period * number for number in range(rounds)]


@hard_trace(
    "cycle-5-pricing-fix",
    hard_loop(
        "cycle",
        starts(5, 6),
        "Asked to fix the failing pricing tests, the agent goes round the same five calls 6 times (lines 1 to "
        "30): read the test file, read pricing.py, run the tests (the same 3 failures), show the unstaged diff "
        "(empty), git status (clean). It never edits anything; every round answers exactly as the first.",
    ),
)
async def cycle_5_pricing_fix(t: Take) -> None:
    """A period-5 cycle over files, tests and git."""
    repo = {"repo_path": t.path()}
    calls: list[Call] = [
        ("filesystem", "read_text_file", {"path": t.path("tests/test_pricing.py")}),
        ("filesystem", "read_text_file", {"path": t.path("inventory/pricing.py")}),
        ("shell", "run_tests", {}),
        ("git", "git_diff_unstaged", repo),
        ("git", "git_status", repo),
    ]
    await cycle(t, calls, 6)


@hard_trace(
    "cycle-6-delivery-triage",
    hard_loop(
        "cycle",
        starts(6, 6),
        "Triaging a complaint about order 4181, the agent goes round the same six calls 6 times (lines 1 to 36): "
        "the order, its parcel tracking, the customer (the same audit reason), a tracker search for 'delivery "
        "estimates', issue #12, and the list of shipped orders. Nothing changes and the agent never answers.",
    ),
)
async def cycle_6_delivery_triage(t: Take) -> None:
    """A period-6 cycle over the back office and the tracker."""
    calls: list[Call] = [
        ("store", "get_order", {"order_id": "4181"}),
        ("store", "track_shipment", {"tracking_number": "JJD004181"}),
        ("store", "get_customer", {"customer_id": "C-1042", "reason": "Complaint about the delivery of order 4181."}),
        ("tracker", "search_issues", {"query": "delivery estimates"}),
        ("tracker", "get_issue", {"number": 12}),
        ("store", "list_orders", {"status": "shipped"}),
    ]
    await cycle(t, calls, 6)


@hard_trace(
    "cycle-7-trip-planning",
    hard_loop(
        "cycle",
        starts(7, 6),
        "Asked to book a Lisbon hotel for trip TRP-0912, the agent goes round the same seven calls 6 times "
        "(lines 1 to 42): the trip, the travel policy, a 2-night room search in Lisbon, two Lisbon hotels' "
        "details, a 3-night search and a Porto hotel's details. It never books; every round answers exactly as "
        "the first.",
    ),
)
async def cycle_7_trip_planning(t: Take) -> None:
    """A period-7 cycle over the booking service."""
    search = {"city": "Lisbon", "check_in": "2026-12-14", "nights": 2}
    calls: list[Call] = [
        ("booking", "get_trip", {"trip_id": "TRP-0912"}),
        ("booking", "get_policy", {}),
        ("booking", "search_rooms", search),
        ("booking", "get_hotel", {"hotel_id": "H-LIS-22"}),
        ("booking", "get_hotel", {"hotel_id": "H-LIS-31"}),
        ("booking", "search_rooms", {**search, "nights": 3}),
        ("booking", "get_hotel", {"hotel_id": "H-OPO-07"}),
    ]
    await cycle(t, calls, 6)


@hard_trace(
    "cycle-8-release-checklist",
    hard_loop(
        "cycle",
        starts(8, 6),
        "Preparing release 1.8.1, the agent goes round the same eight calls 6 times (lines 1 to 48): git status, "
        "log, branches, the CHANGELOG, pyproject.toml, the open bugs, the unstaged diff and the list of files "
        "at the top. It never bumps the version or writes the changelog; every round answers as the first.",
    ),
)
async def cycle_8_release_checklist(t: Take) -> None:
    """A period-8 cycle over git, files and the tracker."""
    repo = {"repo_path": t.path()}
    calls: list[Call] = [
        ("git", "git_status", repo),
        ("git", "git_log", {**repo, "max_count": 5}),
        ("git", "git_branch", {**repo, "branch_type": "local"}),
        ("filesystem", "read_text_file", {"path": t.path("CHANGELOG.md")}),
        ("filesystem", "read_text_file", {"path": t.path("pyproject.toml")}),
        ("tracker", "list_issues", {"state": "open", "label": "bug"}),
        ("git", "git_diff_unstaged", repo),
        ("filesystem", "list_directory", {"path": t.path()}),
    ]
    await cycle(t, calls, 6)


WRONG_EDIT = {"oldText": "if quantity > BULK_THRESHOLD :", "newText": "if quantity >= BULK_THRESHOLD:"}
OTHER_READS = ["tests/test_pricing.py", "docs/pricing.md", "config.json", "inventory/models.py", "CHANGELOG.md"]


@hard_trace(
    "edit-retried-between-reads",
    hard_loop(
        "interleaved",
        [2, 4, 6, 8, 10, 12],
        "Fixing the bulk discount, the agent reads pricing.py and tries an edit whose oldText has a stray space "
        "before the colon; it fails ('Could not find exact match'). Between 6 identical tries (lines 2, 4, 6, 8, "
        "10, 12) it reads a different file each time (the test, the docs, config.json, models.py, the "
        "CHANGELOG), never pricing.py again, so no two stretches are alike. edit_file is annotated destructive "
        "and not idempotent, so the side-effect rule applies: warned at the 2nd try (line 4), due at the 3rd "
        "(line 6); by the repeat rule alone the 3rd and 5th tries.",
        rule="side_effect",
    ),
)
async def edit_retried_between_reads(t: Take) -> None:
    """The same failing edit, with reads of other files between the tries."""
    pricing = t.path("inventory/pricing.py")
    await t.call("filesystem", "read_text_file", {"path": pricing})
    tries = [await t.call("filesystem", "edit_file", {"path": pricing, "edits": [WRONG_EDIT]})]
    for other in OTHER_READS:
        await t.call("filesystem", "read_text_file", {"path": t.path(other)})
        tries.append(await t.call("filesystem", "edit_file", {"path": pricing, "edits": [WRONG_EDIT]}))
    t.check(tries[0].is_error, "the edit did not fail")
    t.check(all(o == tries[0] for o in tries), "the edit failed differently")
    t.mark(*tries)


BOOKING = {
    "trip_id": "TRP-0912",
    "hotel_id": "H-LIS-31",
    "check_in": "2026-12-14",
    "nights": 2,
    "payment_method": "card_4242",
}
NOTES = [
    "Booking Baixa Business Inn for 14-16 Dec failed: card declined. Retrying.",
    "Card payment was declined by the bank; trying the reservation once more.",
    "Second decline from the card issuer. Will attempt again shortly.",
    "Hotel reservation still not confirmed (payment declined). Another attempt follows.",
    "Retrying the Lisbon hotel booking; the card keeps being declined.",
]


@hard_trace(
    "booking-declined-between-notes",
    hard_loop(
        "interleaved",
        [3, 5, 7, 9, 11, 13],
        "Booking a Lisbon hotel for trip TRP-0912, the agent reads the trip and searches rooms, then tries the "
        "identical booking 6 times (lines 3, 5, 7, 9, 11, 13); the card is declined (402) each time. Between "
        "tries it adds a note to the trip, worded differently every time, so no call sequence repeats exactly. "
        "book_room is not destructive (additive), so only the repeat rule applies: warned at the 3rd try "
        "(line 7), due at the 5th (line 11).",
    ),
)
async def booking_declined_between_notes(t: Take) -> None:
    """The same failing booking between differently worded notes."""
    await t.call("booking", "get_trip", {"trip_id": "TRP-0912"})
    await t.call("booking", "search_rooms", {"city": "Lisbon", "check_in": "2026-12-14", "nights": 2})
    tries = [await t.call("booking", "book_room", BOOKING)]
    for note in NOTES:
        await t.call("booking", "add_note", {"trip_id": "TRP-0912", "text": note})
        tries.append(await t.call("booking", "book_room", BOOKING))
    t.check(tries[0].is_error, "the booking did not fail")
    t.check(all(o == tries[0] for o in tries), "the booking failed differently")
    t.mark(*tries)


GREPS = [
    "grep -rn BULK_THRESHOLD inventory",
    "grep -rn quantize inventory",
    "grep -rn TAX_RATE inventory tests",
    "grep -rn 'def cents' inventory",
    "grep -rln Decimal inventory",
]


@hard_trace(
    "test-run-between-greps",
    hard_loop(
        "interleaved",
        [2, 4, 6, 8, 10, 12],
        "Asked to make the pricing tests pass, the agent reads the test file, then runs the tests 6 times (lines "
        "2, 4, 6, 8, 10, 12) with the same 3 failures, grepping the code for a different pattern between runs "
        "(BULK_THRESHOLD, quantize, TAX_RATE, 'def cents', Decimal) and never editing. Each grep is new; the "
        "test run and its answer are the same every time.",
    ),
)
async def test_run_between_greps(t: Take) -> None:
    """The same failing test run, with different greps between the runs."""
    await t.call("filesystem", "read_text_file", {"path": t.path("tests/test_pricing.py")})
    runs = [await t.call("shell", "run_tests", {})]
    for command in GREPS:
        grep = await t.call("shell", "run", {"command": command})
        t.check(not grep.is_error, f"{command} found nothing")
        runs.append(await t.call("shell", "run_tests", {}))
    t.check(runs[0].is_error, "the tests passed")
    t.check(all(o == runs[0] for o in runs), "the test runs differ")
    t.mark(*runs)


PRIVATE = "acme/payments-private"
PRIVATE_QUERIES = [
    ["refund webhook", "refund retry", "duplicate refund"],
    ["refund worker timeout", "webhook signature", "idempotency key refund"],
    ["stripe refund twice", "refund email", "refund job"],
]


@hard_trace(
    "private-repo-search-batches",
    hard_loop(
        "batch_errors",
        list(range(2, 11)),
        "Looking for the cause of duplicate refunds, the agent finds issue #16 in acme/shop (line 1), then "
        "searches the private payments repository in 3 batches of 3 parallel searches (lines 2-4, 5-7, 8-10), "
        "every query different and every answer the same 401 Bad credentials. Nine failures of one tool in a "
        "row with varied arguments: the same-error rule warns at the 3rd (line 4) and is due at the 8th (line 9).",
        rule="same_error",
    ),
)
async def private_repo_search_batches(t: Take) -> None:
    """The same error for varied arguments, spread over batches."""
    await t.call("tracker", "search_issues", {"query": "refund"})
    failures: list[Outcome] = []
    for queries in PRIVATE_QUERIES:
        failures += await t.batch([("tracker", "search_issues", {"query": q, "repo": PRIVATE}) for q in queries])
    t.check(failures[0].is_error, "the private repository answered")
    t.check(all(o == failures[0] for o in failures), "the errors differ")
    t.mark(*failures)


OTHER_FILES = ["inventory/pricing.py", "inventory/models.py", "docs/pricing.md", "inventory/storage.py"]


@hard_trace(
    "missing-file-twice-per-batch",
    hard_loop(
        "batch_errors",
        [2, 3, 5, 6, 8, 9, 11, 12],
        "Looking for the discount rules, the agent lists inventory/, then sends 4 batches, each reading "
        "inventory/discounts.py twice (a file that does not exist: the same ENOENT error) and one other, "
        "different file. The failing read occurs at lines 2, 3, 5, 6, 8, 9, 11, 12: warned at its 3rd "
        "occurrence (line 5), due at its 5th (line 8). No batch holds it more than twice and other reads "
        "separate the pairs.",
    ),
)
async def missing_file_twice_per_batch(t: Take) -> None:
    """The same failing call twice in each of several batches."""
    await t.call("filesystem", "list_directory", {"path": t.path("inventory")})
    missing = ("filesystem", "read_text_file", {"path": t.path("inventory/discounts.py")})
    failures: list[Outcome] = []
    for other in OTHER_FILES:
        outcomes = await t.batch([missing, missing, ("filesystem", "read_text_file", {"path": t.path(other)})])
        failures += outcomes[:2]
    t.check(failures[0].is_error, "discounts.py exists")
    t.check(all(o == failures[0] for o in failures), "the errors differ")
    t.mark(*failures)


PARAPHRASES = [
    "descaler for espresso machine",
    "espresso machine descaling solution",
    "limescale remover coffee machine",
    "citric acid descaler",
    "coffee machine cleaning tablets",
    "descaling liquid",
    "anti calc coffee",
    "decalcifier for espresso",
    "scale remover for kettle",
    "machine descaling powder",
]


@hard_trace(
    "product-search-paraphrased",
    hard_loop(
        "same_result",
        list(range(2, 12)),
        "Asked whether the shop sells a descaler, the agent checks the grinder's stock, then searches the "
        "catalogue 10 times (lines 2 to 11), rewording the query each time ('descaler for espresso machine', "
        "'limescale remover coffee machine', 'citric acid descaler', ...); the shop sells none and every answer "
        "is the same empty list. Same result for varied arguments: a warning at the 4th search (line 5), no "
        "refusal.",
    ),
)
async def product_search_paraphrased(t: Take) -> None:
    """Reworded searches, all empty."""
    await t.call("store", "check_stock", {"sku": "GRN-BURR-01"})
    found = [await t.call("store", "search_products", {"query": query}) for query in PARAPHRASES]
    t.check(found[0].data["total"] == 0, "the shop sells a descaler")
    t.check(all(o == found[0] for o in found), "the answers differ")
    t.mark(*found)
