"""Hard productive traces of plain work: different writes acknowledged alike, re-runs, pages, honest answers."""

from __future__ import annotations

from tests.corpus.hard_labels import hard_productive, hard_trace
from tests.corpus.recording import Outcome, Take


def acknowledged(t: Take, outcomes: list[Outcome], answer: str) -> None:
    """Checks that every write was answered with the same text."""
    t.check(all(o.text == answer and not o.is_error for o in outcomes), f"not every write answered {answer!r}")


MIGRATION = [
    "CREATE TABLE coupons (code TEXT PRIMARY KEY, percent INTEGER NOT NULL, expires TEXT)",
    "CREATE TABLE coupon_redemptions (order_id INTEGER NOT NULL, code TEXT NOT NULL, redeemed_at TEXT)",
    "ALTER TABLE orders ADD COLUMN coupon_code TEXT",
    "ALTER TABLE orders ADD COLUMN discount_cents INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX idx_redemptions_code ON coupon_redemptions (code)",
]
COUPONS = [
    "INSERT INTO coupons VALUES ('SUMMER10', 10, '2026-08-31')",
    "INSERT INTO coupons VALUES ('WELCOME5', 5, NULL)",
    "INSERT INTO coupons VALUES ('BULK15', 15, '2026-12-31')",
    "INSERT INTO coupons VALUES ('STAFF20', 20, NULL)",
]


@hard_trace(
    "sql-schema-migration",
    hard_productive(
        "writes",
        "Adding coupons to the shop database (a server that lists no annotations), the agent lists the tables "
        "and describes orders, then runs five different schema changes, each answered 'OK' (lines 3 to 7), "
        "four different inserts, each answered '1 row affected' (lines 8 to 11), an empty SELECT ('No "
        "results') and a SELECT that shows the four coupons. Different writes acknowledged with the same text.",
        repeats=list(range(3, 12)),
    ),
)
async def sql_schema_migration(t: Take) -> None:
    """Schema changes and inserts, each acknowledged alike."""
    await t.call("sql", "list_tables")
    await t.call("sql", "describe_table", {"table": "orders"})
    changes = [await t.call("sql", "execute_sql", {"sql": sql}) for sql in MIGRATION]
    acknowledged(t, changes, "OK")
    inserts = [await t.call("sql", "execute_sql", {"sql": sql}) for sql in COUPONS]
    acknowledged(t, inserts, "1 row affected")
    t.mark(*changes, *inserts)
    empty = await t.call("sql", "execute_sql", {"sql": "SELECT * FROM coupon_redemptions"})
    t.check(empty.text == "No results", "redemptions are not empty")
    await t.call("sql", "execute_sql", {"sql": "SELECT code, percent FROM coupons ORDER BY code"})


WAREHOUSES = [
    "INSERT INTO warehouses VALUES ('BER', 'Berlin', 'Lagerstraße 4')",
    "INSERT INTO warehouses VALUES ('HAM', 'Hamburg', 'Hafenweg 12')",
    "INSERT INTO warehouses VALUES ('MUC', 'Munich', 'Isarring 7')",
    "INSERT INTO warehouses VALUES ('CGN', 'Cologne', 'Rheinufer 33')",
    "INSERT INTO warehouses VALUES ('FRA', 'Frankfurt', 'Mainzer Landstraße 80')",
    "INSERT INTO warehouses VALUES ('LEJ', 'Leipzig', 'Messeallee 2')",
    "INSERT INTO warehouses VALUES ('VIE', 'Vienna', 'Donaukanal 19')",
    "INSERT INTO warehouses VALUES ('ZRH', 'Zurich', 'Seestrasse 101')",
]


@hard_trace(
    "sql-seed-batch",
    hard_productive(
        "writes",
        "The agent creates a warehouses table ('OK'), then inserts eight different warehouses in one batch of "
        "parallel calls (lines 2 to 9), each answered '1 row affected', and counts the rows (8). Eight "
        "different writes in one response, acknowledged identically.",
        repeats=list(range(2, 10)),
    ),
)
async def sql_seed_batch(t: Take) -> None:
    """A batch of different inserts, each acknowledged alike."""
    created = await t.call(
        "sql", "execute_sql", {"sql": "CREATE TABLE warehouses (code TEXT PRIMARY KEY, city TEXT, address TEXT)"}
    )
    acknowledged(t, [created], "OK")
    inserts = await t.batch([("sql", "execute_sql", {"sql": sql}) for sql in WAREHOUSES])
    acknowledged(t, inserts, "1 row affected")
    t.mark(*inserts)
    counted = await t.call("sql", "execute_sql", {"sql": "SELECT COUNT(*) AS warehouses FROM warehouses"})
    t.check(counted.text.endswith("\n8"), "not eight warehouses")


LOST_ORDERS = [
    "INSERT INTO orders (id, customer_id, total_cents, status) VALUES (4183, 'C-1042', 1490, 'paid')",
    "INSERT INTO orders (id, customer_id, total_cents, status) VALUES (4184, 'C-2210', 2490, 'paid')",
    "INSERT INTO orders (id, customer_id, total_cents, status) VALUES (4185, 'C-1042', 3990, 'paid')",
    "INSERT INTO orders (id, customer_id, total_cents, status) VALUES (4186, 'C-2210', 5990, 'shipped')",
    "INSERT INTO orders (id, customer_id, total_cents, status) VALUES (4187, 'C-1042', 1290, 'paid')",
    "INSERT INTO orders (id, customer_id, total_cents, status) VALUES (4188, 'C-2210', 2980, 'paid')",
]


@hard_trace(
    "sql-insert-count-pairs",
    hard_productive(
        "writes",
        "Re-entering six orders lost in an outage, the agent inserts each (a different row every time, "
        "answered '1 row affected') and counts the orders after it (4, then 5 ... 9). An alternation of two "
        "calls whose first answer never changes (lines 1, 3, 5, 7, 9, 11) and whose second always does.",
        repeats=[1, 3, 5, 7, 9, 11],
    ),
)
async def sql_insert_count_pairs(t: Take) -> None:
    """Insert, count, insert, count: the count moves on."""
    inserts, counts = [], []
    for sql in LOST_ORDERS:
        inserts.append(await t.call("sql", "execute_sql", {"sql": sql}))
        counts.append(await t.call("sql", "execute_sql", {"sql": "SELECT COUNT(*) AS orders FROM orders"}))
    acknowledged(t, inserts, "1 row affected")
    t.check(len({o.text for o in counts}) == len(counts), "a count repeated")
    t.mark(*inserts)


FLAGS = {
    "flags:csv_export": "on",
    "flags:dark_mode_admin": "on",
    "flags:polish_storefront": "off",
    "flags:two_factor_admins": "on",
    "flags:legacy_xml_feed": "off",
    "flags:bulk_discount_v2": "on",
    "flags:new_checkout": "off",
    "flags:stock_per_warehouse": "on",
}


@hard_trace(
    "kv-feature-flags",
    hard_productive(
        "writes",
        "Rolling out a release's feature flags, the agent sets eight different keys in the key-value store "
        "(lines 1 to 8, a server with no annotations); every set answers 'OK'. Then it lists the flags to "
        "check them.",
        repeats=list(range(1, 9)),
    ),
)
async def kv_feature_flags(t: Take) -> None:
    """Different keys set, each acknowledged with OK."""
    writes = [await t.call("kv", "set", {"key": key, "value": value}) for key, value in FLAGS.items()]
    acknowledged(t, writes, "OK")
    t.mark(*writes)
    listed = await t.call("kv", "keys", {"prefix": "flags:"})
    t.check(len(listed.text.splitlines()) == len(FLAGS), "not every flag is set")


SESSIONS = {
    "session:4f1c": '{"user": "C-1042", "cart": ["MUG-CAFE-350"]}',
    "session:8a02": '{"user": "C-2210", "cart": []}',
    "session:b7e9": '{"user": "guest", "cart": ["CUP-ESP-SET", "FLT-PAPER-100"]}',
    "session:c311": '{"user": "C-1042", "cart": ["POT-MOKA-6"]}',
    "session:d5aa": '{"user": "guest", "cart": ["KTL-GOOSE-1L"]}',
    "session:e690": '{"user": "C-2210", "cart": ["SCL-BREW-01"]}',
}


@hard_trace(
    "kv-set-get-pairs",
    hard_productive(
        "writes",
        "Restoring six shopping-cart sessions after a cache flush, the agent sets each key and reads it back "
        "(set answers 'OK' every time, lines 1, 3, 5, 7, 9, 11; each get shows that session's cart). An A-B "
        "alternation whose A answer never changes, over different keys.",
        repeats=[1, 3, 5, 7, 9, 11],
    ),
)
async def kv_set_get_pairs(t: Take) -> None:
    """Set and read back, key after key."""
    writes = []
    for key, value in SESSIONS.items():
        writes.append(await t.call("kv", "set", {"key": key, "value": value, "ttl_seconds": 86400}))
        read = await t.call("kv", "get", {"key": key})
        t.check(read.text == value, f"{key} did not read back")
    acknowledged(t, writes, "OK")
    t.mark(*writes)


UNITTEST = "python -m unittest tests.test_pricing"
FIXES = [
    ("if quantity > BULK_THRESHOLD:", "if quantity >= BULK_THRESHOLD:"),
    ("return (amount * TAX_RATE).quantize", "return (amount + TAX_RATE).quantize"),
    ("return (amount + TAX_RATE).quantize", "return (amount * (1 + TAX_RATE)).quantize"),
    ("return int(amount * 100)", 'return int((amount * 100).quantize(Decimal("1"), rounding=ROUND_HALF_UP))'),
]


@hard_trace(
    "tests-rerun-shell-after-edits",
    hard_productive(
        "work",
        "Fixing the pricing tests, the agent runs the same `python -m unittest tests.test_pricing` command "
        "through the shell tool (annotated destructive, not idempotent) after every edit: 3 failures, 2, 2 "
        "again but with another assertion (a wrong tax fix), 1, then all pass (lines 1, 4, 6, 8, 10). The "
        "command never changes; its output changes every time.",
        repeats=[1, 4, 6, 8, 10],
    ),
)
async def tests_rerun_shell_after_edits(t: Take) -> None:
    """The same test command after each edit; a side-effect rule as written would refuse its 3rd run."""
    t.normalise_also(r"Ran (\d+) tests? in \d+\.\d+s", r"Ran \1 tests in 0.001s")
    pricing = t.path("inventory/pricing.py")
    runs = [await t.call("shell", "run", {"command": UNITTEST})]
    await t.call("filesystem", "read_text_file", {"path": pricing})
    for old, new in FIXES:
        edited = await t.call("filesystem", "edit_file", {"path": pricing, "edits": [{"oldText": old, "newText": new}]})
        t.check(not edited.is_error, f"the edit {old!r} failed")
        runs.append(await t.call("shell", "run", {"command": UNITTEST}, think=t.rng.uniform(4, 10)))
    t.check(len({o.text for o in runs}) == len(runs), "two runs gave the same output")
    t.check(not runs[-1].is_error, "the tests still fail")
    t.mark(*runs)


@hard_trace(
    "orders-cursor-pages",
    hard_productive(
        "work",
        "Asked for every order's total, the agent lists the orders page by page with the cursor each page gives "
        "(lines 1 to 6: 10, 10, 10, 10, 10 and 7 orders, the last without a next cursor), then opens the "
        "oldest order. The same tool six times; the cursor and the page change each time.",
        repeats=[1, 2, 3, 4, 5, 6],
    ),
)
async def orders_cursor_pages(t: Take) -> None:
    """Cursor pagination to the end."""
    pages = [await t.call("store", "list_orders", {})]
    while pages[-1].data["next_cursor"] is not None:
        t.check(len(pages) < 20, "the pages never ended")
        pages.append(await t.call("store", "list_orders", {"cursor": pages[-1].data["next_cursor"]}))
    t.mark(*pages)
    await t.call("store", "get_order", {"order_id": pages[-1].data["orders"][-1]["order_id"]})


SOLD_OUT = ["MUG-CAFE-500", "POT-MOKA-6", "GRN-BURR-01", "KTL-GOOSE-1L", "CAN-AIR-500", "DRP-V60-02"]


@hard_trace(
    "six-skus-out-of-stock",
    hard_productive(
        "work",
        "Asked which products of a restock list are sold out, the agent checks six SKUs (lines 1 to 6), every "
        "one answered the same 'out_of_stock' (the answer does not name the SKU); a seventh is in stock "
        "(line 7), and it emails purchasing the six. Different items honestly answered alike.",
        repeats=[1, 2, 3, 4, 5, 6],
    ),
)
async def six_skus_out_of_stock(t: Take) -> None:
    """Different SKUs, the same honest answer."""
    checks = [await t.call("store", "check_stock", {"sku": sku}) for sku in SOLD_OUT]
    t.check(all(o == checks[0] for o in checks), "the answers differ")
    t.check(checks[0].data["status"] == "out_of_stock", "not out of stock")
    t.mark(*checks)
    in_stock = await t.call("store", "check_stock", {"sku": "CUP-ESP-SET"})
    t.check(in_stock.data["status"] == "in_stock", "the cup set is not in stock")
    await t.call(
        "store",
        "send_email",
        {
            "to": "purchasing@acme.example",
            "subject": "Sold out: six SKUs",
            "body": "Sold out today: " + ", ".join(SOLD_OUT) + ". CUP-ESP-SET has 48 left.",
        },
    )


INIT_FILES = [
    "inventory/__init__.py",
    "inventory/api/__init__.py",
    "inventory/cli/__init__.py",
    "inventory/handlers/__init__.py",
    "inventory/utils/__init__.py",
    "tests/__init__.py",
]


@hard_trace(
    "empty-inits-one-batch",
    hard_productive(
        "work",
        "Checking whether any package re-exports names before adding a new module, the agent finds the six "
        "__init__.py files, reads them all in one batch (lines 2 to 7: six different files, every answer the "
        "same empty text), and reads the routes module next.",
        repeats=[2, 3, 4, 5, 6, 7],
    ),
)
async def empty_inits_one_batch(t: Take) -> None:
    """One batch of different reads with the same empty answer."""
    found = await t.call("filesystem", "search_files", {"path": t.path(), "pattern": "**/__init__.py"})
    t.check(len(found.text.splitlines()) == len(INIT_FILES), "not six __init__.py files")
    reads = await t.batch([("filesystem", "read_text_file", {"path": t.path(p)}) for p in INIT_FILES])
    t.check(all(o == reads[0] for o in reads), "the files differ")
    t.mark(*reads)
    await t.call("filesystem", "read_text_file", {"path": t.path("inventory/api/routes.py")})
