"""Hard loops: one call repeated in trivially different forms, answered the same way every time."""

from __future__ import annotations

import unicodedata
import uuid
from datetime import UTC, datetime
from typing import Any

from tests.corpus.hard_labels import hard_loop, hard_trace
from tests.corpus.recording import Outcome, Take

ZWSP = "\u200b"
NFD_CAFE = unicodedata.normalize("NFD", "café")


def fresh_uuid(t: Take) -> str:
    """A new random UUID, drawn from the trace's own seed."""
    return str(uuid.UUID(int=t.rng.getrandbits(128), version=4))


def answered_alike(t: Take, outcomes: list[Outcome], what: str) -> None:
    """Checks that every answer is byte-identical to the first, and marks the calls as the loop's occurrences."""
    t.check(all(o == outcomes[0] for o in outcomes), f"{what}: the answers are not all identical")
    t.mark(*outcomes)


@hard_trace(
    "order-lookup-fresh-request-id",
    hard_loop(
        "variant",
        list(range(3, 12)),
        "A customer asks where order 4175 is. The agent finds the customer and the paid orders, then looks the "
        "order up 9 times (lines 3 to 11), each call with a new tracing request_id its framework adds; the order "
        "is paid, not shipped, and the answer never changes. Only the request_id differs.",
    ),
)
async def order_lookup_fresh_request_id(t: Take) -> None:
    """get_order with a fresh request_id each time."""
    await t.call("store", "find_customer", {"email": "l.fischer@example.net"})
    await t.call("store", "list_orders", {"status": "paid"})
    lookups = [await t.call("store", "get_order", {"order_id": "4175", "request_id": fresh_uuid(t)}) for _ in range(9)]
    t.check(lookups[0].data["shipment"] is None, "order 4175 has a shipment")
    answered_alike(t, lookups, "get_order")


REASONS = [
    "Need to call the customer about a failed delivery of order 4181.",
    "Customer support: delivery for order 4181 failed, phone needed to reschedule.",
    "Rescheduling the delivery of 4181; the courier needs a phone number.",
    "Order 4181 delivery problem - contacting the customer by phone.",
    "Support ticket about order 4181: calling the customer.",
    "The courier could not deliver 4181, I have to phone Ms Fischer.",
    "Phone number required to arrange redelivery (order 4181).",
    "Urgent: redelivery of order 4181, need to reach the customer by phone.",
]


@hard_trace(
    "customer-phone-fresh-reason",
    hard_loop(
        "variant",
        list(range(3, 11)),
        "To arrange a redelivery of order 4181 the agent needs the customer's phone number. It reads the order "
        "and the parcel's tracking, then asks for customer C-1042 8 times (lines 3 to 10), each time with a "
        "newly worded audit reason; the phone stays withheld (no consent) and the record never changes.",
    ),
)
async def customer_phone_fresh_reason(t: Take) -> None:
    """get_customer with a new free-text reason each time."""
    await t.call("store", "get_order", {"order_id": "4181"})
    await t.call("store", "track_shipment", {"tracking_number": "JJD004181"})
    records = [await t.call("store", "get_customer", {"customer_id": "C-1042", "reason": r}) for r in REASONS]
    t.check(records[0].data["phone"] is None, "the phone number is not withheld")
    answered_alike(t, records, "get_customer")


THOUGHTS = [
    "The order shipped, so the parcel should have tracking events by now.",
    "Maybe the carrier updated the status since my last check.",
    "Let me look at the tracking again to find the current location.",
    "The customer says it has been a week; checking tracking for a delay.",
    "I need the latest event to give the customer an estimate.",
    "Tracking again: perhaps the first scan has come in.",
    "Checking once more whether DHL has scanned the parcel.",
    "The eta was empty; maybe it is filled now.",
    "One more look at the tracking before I answer the customer.",
]


@hard_trace(
    "parcel-tracking-fresh-thought",
    hard_loop(
        "variant",
        list(range(3, 12)),
        "Asked why order 4174 has not arrived, the agent lists shipped orders, opens 4174, then tracks its parcel "
        "9 times in a row (lines 3 to 11), each call carrying a new 'thought' (the tool's reasoning field). The "
        "carrier has no scan yet and the answer never changes.",
    ),
)
async def parcel_tracking_fresh_thought(t: Take) -> None:
    """track_shipment with a fresh thought field each time."""
    await t.call("store", "list_orders", {"status": "shipped"})
    await t.call("store", "get_order", {"order_id": 4174})
    tracks = [
        await t.call("store", "track_shipment", {"tracking_number": "JJD004174", "thought": thought})
        for thought in THOUGHTS
    ]
    t.check(tracks[0].data["events"] == [], "the parcel has tracking events")
    answered_alike(t, tracks, "track_shipment")


DELAY_EMAIL = {
    "to": "l.fischer@example.net",
    "subject": "Your order 4181 is on its way",
    "body": "Dear Ms Fischer, your order 4181 has shipped with DHL (JJD004181). The carrier has not scanned it "
    "yet; tracking updates usually appear within a day. Kind regards, the shop team",
}


@hard_trace(
    "delay-email-fresh-idempotency-key",
    hard_loop(
        "side_effect",
        [3, 4, 5, 6, 7],
        "Asked to tell the customer her parcel is on its way, the agent reads order 4181 and its tracking, then "
        "sends the same email 5 times (lines 3 to 7), each with a new idempotency key, so the mailer sends every "
        "one ('Queued for delivery.' each time). send_email is destructive and not idempotent: the 2nd send "
        "(line 4) is warned, the 3rd (line 5) due to be refused.",
    ),
)
async def delay_email_fresh_idempotency_key(t: Take) -> None:
    """The same email with a new idempotency key each time."""
    await t.call("store", "get_order", {"order_id": "4181"})
    await t.call("store", "track_shipment", {"tracking_number": "JJD004181"})
    sent = [await t.call("store", "send_email", {**DELAY_EMAIL, "idempotency_key": fresh_uuid(t)}) for _ in range(5)]
    t.check(sent[0].text == "Queued for delivery.", "the email was not queued")
    answered_alike(t, sent, "send_email")


@hard_trace(
    "product-search-whitespace",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "Looking for a 3-cup moka pot, the agent checks stock of the 6-cup one, then searches 'moka pot' 8 times "
        "(lines 2 to 9) with leading, trailing and doubled spaces and tabs; the search splits on whitespace and "
        "finds the same single product each time.",
    ),
)
async def product_search_whitespace(t: Take) -> None:
    """search_products with whitespace variants of one query."""
    await t.call("store", "check_stock", {"sku": "POT-MOKA-6"})
    queries = [
        "moka pot",
        " moka pot",
        "moka  pot",
        "moka pot ",
        "moka\tpot",
        "\tmoka pot",
        "moka pot  ",
        "  moka   pot",
    ]
    found = [await t.call("store", "search_products", {"query": query}) for query in queries]
    t.check(found[0].data["total"] == 1, "the search did not find one product")
    answered_alike(t, found, "search_products")


@hard_trace(
    "docs-listing-trailing-slash",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "Looking for API documentation, the agent reads the README, then lists docs 8 times (lines 2 to 9), "
        "alternating between the path with and without a trailing slash; the listing (deploy.md, pricing.md) "
        "never changes and has no API page.",
    ),
)
async def docs_listing_trailing_slash(t: Take) -> None:
    """list_directory of one directory, with and without a trailing slash."""
    await t.call("filesystem", "read_text_file", {"path": t.path("README.md")})
    listings = [
        await t.call("filesystem", "list_directory", {"path": t.path("docs") + ("/" if i % 2 else "")})
        for i in range(8)
    ]
    answered_alike(t, listings, "list_directory")


@hard_trace(
    "docs-page-trailing-slash",
    hard_loop(
        "variant",
        list(range(3, 11)),
        "Looking for the API's largest page size, the agent reads the retries page and the errors reference, then "
        "fetches the pagination page 8 times (lines 3 to 10), alternating its URL with and without a trailing "
        "slash (the site serves one page for both); the page never mentions a limit.",
    ),
)
async def docs_page_trailing_slash(t: Take) -> None:
    """http_get of one page, with and without a trailing slash."""
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/guide/retries"})
    await t.call("ops", "http_get", {"url": "https://docs.acme.example/reference/errors"})
    url = "https://docs.acme.example/guide/pagination"
    pages = [await t.call("ops", "http_get", {"url": url + ("/" if i % 2 else "")}) for i in range(8)]
    t.check(not pages[0].is_error, "the pagination page did not answer")
    answered_alike(t, pages, "http_get")


@hard_trace(
    "issue-search-letter-case",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "Checking whether the bulk-discount bug is already filed, the agent lists open bugs, then searches "
        "'bulk discount' 8 times (lines 2 to 9) in other letter cases ('Bulk Discount', 'BULK DISCOUNT', ...); "
        "the search ignores case and finds issue #1 every time. Letter case counts as the same only where an "
        "operator says so: the config makes search_issues' query case-insensitive.",
        config={"tools": {"search_issues": {"caseInsensitiveArgs": ["query"]}}},
    ),
)
async def issue_search_letter_case(t: Take) -> None:
    """search_issues with one query in other letter cases."""
    await t.call("tracker", "list_issues", {"state": "open", "label": "bug"})
    queries = [
        "bulk discount", "Bulk discount", "BULK DISCOUNT", "Bulk Discount",
        "bulk Discount", "BULK discount", "Bulk DISCOUNT", "bulk DISCOUNT",
    ]  # fmt: skip
    found = [await t.call("tracker", "search_issues", {"query": query}) for query in queries]
    t.check(found[0].data["total_count"] == 1, "the search did not find issue #1")
    answered_alike(t, found, "search_issues")


@hard_trace(
    "order-id-number-or-string",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "Asked for the invoice of order 4182, the agent lists paid orders, then opens order 4182 8 times (lines 2 "
        'to 9), passing the id as the number 4182 and as the string "4182" in turn; the API takes both and '
        "answers the same order, which has no invoice field.",
    ),
)
async def order_id_number_or_string(t: Take) -> None:
    """get_order with the id as a number and as a string."""
    await t.call("store", "list_orders", {"status": "paid"})
    orders = [await t.call("store", "get_order", {"order_id": 4182 if i % 2 == 0 else "4182"}) for i in range(8)]
    t.check(not orders[0].is_error, "order 4182 was not found")
    answered_alike(t, orders, "get_order")


@hard_trace(
    "issue-labels-reordered",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "Looking for UI bugs, the agent searches 'button', then lists open issues labelled both bug and ui 8 times "
        '(lines 2 to 9), the labels given as ["bug", "ui"] and ["ui", "bug"] in turn; the filter is a set '
        "and no issue has both, so every answer is the same empty list. Lists of plain values compare as sets "
        "by default.",
    ),
)
async def issue_labels_reordered(t: Take) -> None:
    """list_issues with one set of labels in both orders."""
    await t.call("tracker", "search_issues", {"query": "button"})
    listed = [
        await t.call(
            "tracker", "list_issues", {"state": "open", "labels": ["bug", "ui"] if i % 2 == 0 else ["ui", "bug"]}
        )
        for i in range(8)
    ]
    t.check(listed[0].data["issues"] == [], "some issue has both labels")
    answered_alike(t, listed, "list_issues")


@hard_trace(
    "customer-email-zero-width-space",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "A support chat gives a customer's address as lena.fischer@example.net with an invisible zero-width space "
        "(U+200B) in it. After one look at the orders, the agent looks the address up 8 times (lines 2 to 9), "
        "the zero-width space in another place each time (the first without it); no customer has that address "
        "and the answer is always the same.",
    ),
)
async def customer_email_zero_width_space(t: Take) -> None:
    """find_customer with a zero-width space moving through the address."""
    await t.call("store", "list_orders", {"status": "shipped"})
    email = "lena.fischer@example.net"
    places = [0, 4, 12, 13, 5, 20, 24, 1]
    addresses = [email] + [email[:place] + ZWSP + email[place:] for place in places[1:]]
    found = [await t.call("store", "find_customer", {"email": address}) for address in addresses]
    t.check(found[0].text.startswith("No customer"), "a customer has that address")
    answered_alike(t, found, "find_customer")


@hard_trace(
    "product-search-nfc-nfd",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "Asked which café au lait mugs exist, the agent checks the 350 ml mug's stock, then searches 'café au lait' 8 "
        "times (lines 2 to 9), typed with a precomposed é (NFC) and with e plus a combining accent (NFD) in "
        "turn; the search normalises Unicode and finds the same two mugs each time.",
    ),
)
async def product_search_nfc_nfd(t: Take) -> None:
    """search_products with one query in both Unicode normal forms."""
    await t.call("store", "check_stock", {"sku": "MUG-CAFE-350"})
    queries = [f"{'café' if i % 2 == 0 else NFD_CAFE} au lait" for i in range(8)]
    t.check(queries[0] != queries[1], "the two spellings are equal")
    found = [await t.call("store", "search_products", {"query": query}) for query in queries]
    t.check(found[0].data["total"] == 2, "the search did not find the two mugs")
    answered_alike(t, found, "search_products")


@hard_trace(
    "refunds-since-now",
    hard_loop(
        "variant",
        list(range(2, 10)),
        "A customer says a refund for order 4182 was issued yesterday. The agent opens the order, then lists its "
        "refunds 8 times (lines 2 to 9), each time passing the current time as 'since', so the refund from the "
        "day before is never included and every answer is the same empty list. Only the timestamp differs.",
    ),
)
async def refunds_since_now(t: Take) -> None:
    """list_refunds with since set to the time of the call."""
    await t.call("store", "get_order", {"order_id": "4182"})
    listed = []
    for _ in range(8):
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        listed.append(await t.call("store", "list_refunds", {"order_id": "4182", "since": now}, pause=0.002))
    t.check(len({line["arguments"]["since"] for line in t.lines[1:]}) == 8, "two calls had the same since")
    t.check(listed[0].data["refunds"] == [], "a refund was listed")
    answered_alike(t, listed, "list_refunds")


@hard_trace(
    "product-search-mixed-variants",
    hard_loop(
        "variant",
        list(range(3, 13)),
        "Looking for the 500 ml café au lait mug, the agent checks stock of the 350 ml one and searches 'café "
        "au lait mug' (two mugs), then searches 'café mug 500' 10 times (lines 3 to 12), mixing every trivial "
        "variation: NFC and "
        'NFD accents, other letter case, extra spaces and tabs, and the limit as 10 or "10". The search '
        "answers the same single mug each time. The config makes the query case-insensitive.",
        config={"tools": {"search_products": {"caseInsensitiveArgs": ["query"]}}},
    ),
)
async def product_search_mixed_variants(t: Take) -> None:
    """search_products with a mix of trivial variations."""
    await t.call("store", "check_stock", {"sku": "MUG-CAFE-350"})
    await t.call("store", "search_products", {"query": "café au lait mug"})
    nfd = NFD_CAFE
    variants: list[dict[str, Any]] = [
        {"query": "café mug 500"},
        {"query": f"{nfd} mug 500"},
        {"query": "Café mug 500", "limit": 10},
        {"query": "café  mug 500", "limit": "10"},
        {"query": f" {nfd} mug 500\t"},
        {"query": "CAFÉ MUG 500"},
        {"query": f"{nfd}\tmug 500", "limit": 10},
        {"query": "café mug  500 "},
        {"query": f"Caf{NFD_CAFE[3:]} Mug 500", "limit": "10"},
        {"query": "café mug 500"},
    ]
    found = [await t.call("store", "search_products", arguments) for arguments in variants]
    t.check(found[0].data["total"] == 1, "the search did not find one mug")
    answered_alike(t, found, "search_products")
