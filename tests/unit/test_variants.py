"""Argument variants answered identically are the same call; real differences stay different."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.core import Family, Policy
from mcp_loop_guard.core.arguments import ArgumentRules, normalized
from mcp_loop_guard.core.detector import call_of
from tests.unit.timed import ABORT, ALLOW, BLOCK, WARN, Timed, actions, first, text

NOT_FOUND = text("No issues match your search.")
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "fresh request id": [{"q": "login bug", "request_id": f"req-{i:04d}"} for i in range(6)],
    "fresh reason": [{"q": "login bug", "reason": f"checking again, attempt {i}"} for i in range(6)],
    "fresh thought": [{"q": "login bug", "thought": f"maybe the index caught up ({i})"} for i in range(6)],
    "whitespace": [
        {"q": q} for q in ["login bug", " login bug", "login  bug", "login bug ", "\tlogin bug", "login bug\n"]
    ],
    "trailing slash": [{"url": u} for u in ["https://x.dev/api/issues", "https://x.dev/api/issues/"] * 3],
    "number as text": [{"id": v} for v in [4182, "4182", 4182.0, "4182", 4182, "4182"]],
    "set in another order": [{"labels": list(v)} for v in [("bug", "ui"), ("ui", "bug")] * 3],
    "zero-width space": [{"q": q} for q in ["login bug", "login\u200b bug", "login bug\u200b", "\ufefflogin bug"] * 2][
        :6
    ],
    "unicode forms": [{"q": q} for q in ["caf\u00e9 menu", "cafe\u0301 menu"] * 3],
    "fresh timestamp": [{"q": "login bug", "since": f"2026-12-04T10:0{i}:00Z"} for i in range(6)],
    "idempotency key": [{"q": "login bug", "idempotency_key": f"k-{i}"} for i in range(6)],
    "a mix": [
        {"q": "login bug", "request_id": "a"},
        {"q": " login  bug", "reason": "again"},
        {"q": "login bug\u200b", "thought": "hm"},
        {"q": "login bug", "nonce": 4},
        {"q": "login bug ", "requestId": "e"},
        {"q": "login bug"},
    ],
}


@pytest.mark.parametrize("name", VARIANTS)
def test_an_argument_variant_answered_identically_is_refused_as_the_same_call(name: str) -> None:
    """Each variant of one call, answered the same every time: warned at the 3rd, refused at the 5th."""
    agent = Timed()
    verdicts = [agent.call("search_issues", arguments, NOT_FOUND) for arguments in VARIANTS[name]]
    assert actions(verdicts) == [ALLOW, ALLOW, WARN, WARN, BLOCK, BLOCK], name
    assert verdicts[4].family is Family.IDENTICAL
    assert "trivial differences" in (verdicts[4].reason or "")


def test_letter_case_counts_only_where_configured() -> None:
    """`Login Bug` and `login bug`: two calls by default; one with caseInsensitiveArgs on the argument."""
    queries = [{"q": q} for q in ["login bug", "Login Bug", "LOGIN BUG"] * 2]
    default = Timed()
    assert BLOCK not in actions([default.call("search_issues", q, NOT_FOUND) for q in queries])
    folding = Policy(arguments=ArgumentRules(case_insensitive=("q",)))
    configured = Timed(folding)
    assert first([configured.call("search_issues", q, NOT_FOUND) for q in queries], BLOCK) == 5


def test_ignored_arguments_are_left_out_by_name_or_path() -> None:
    """ignoreArgs: a per-tool name (`seed`) or JSON path (`$.options.trace`) that never makes another call."""
    rules = ArgumentRules(ignore=("seed", "$.options.trace"))
    agent = Timed(Policy(arguments=rules))
    calls = [{"q": "x", "seed": i, "options": {"trace": f"t{i}", "limit": 5}} for i in range(6)]
    assert first([agent.call("search", c, NOT_FOUND) for c in calls], BLOCK) == 5
    other = Timed(Policy(arguments=rules))
    limits = [{"q": "x", "options": {"trace": "t", "limit": i}} for i in range(6)]
    assert BLOCK not in actions([other.call("search", c, NOT_FOUND) for c in limits])


def test_ordered_arguments_keep_the_order_of_their_lists() -> None:
    """orderedArgs: a command's argv in another order is another command."""
    rules = ArgumentRules(ordered=("argv",))
    argvs = [["mv", "a", "b"], ["mv", "b", "a"]] * 3
    agent = Timed(Policy(arguments=rules))
    assert BLOCK not in actions([agent.call("run", {"argv": a}, text("ok")) for a in argvs])


def test_a_variant_with_a_different_answer_is_a_different_call() -> None:
    """A trailing slash that changes the answer (a redirect, another page) never joins a streak."""
    agent = Timed()
    verdicts = []
    for i in range(8):
        url = "https://x.dev/docs" + ("/" if i % 2 else "")
        verdicts.append(agent.call("fetch", {"url": url}, text("301 moved" if i % 2 else "the docs")))
    assert BLOCK not in actions(verdicts)


def test_long_text_stays_exact() -> None:
    """Content over 512 characters (a file to write) keeps its spaces: two writes differing in indentation differ."""
    body = "def f():\n" + "    return 1\n" * 60
    first_key = call_of("write_file", {"path": "f.py", "content": body}).key
    second_key = call_of("write_file", {"path": "f.py", "content": body.replace("    ", "  ")}).key
    assert first_key != second_key


def test_a_batch_of_different_ids_is_no_burst() -> None:
    """Five different UUIDs fetched at once are five calls, though their loose forms agree."""
    agent = Timed()
    ids = [f"0b8e{i}c2a-9f7e-4d6b-8a1c-1234567890a{i}" for i in range(5)]
    verdicts = agent.batch([("get_item", {"id": i}, text(f"item {i}")) for i in ids])
    assert set(actions(verdicts)) == {ALLOW}


def test_a_destructive_call_with_a_new_idempotency_key_is_the_same_effect() -> None:
    """send_email five times with a fresh idempotency key: warned at the 2nd, refused from the 3rd."""
    agent = Timed()
    destructive = {"destructiveHint": True, "idempotentHint": False}
    verdicts = [
        agent.call(
            "send_email",
            {"to": "ops@x.dev", "subject": "Deploy done", "idempotency_key": f"key-{i}"},
            text(f"sent message {i}"),
            annotations=destructive,
        )
        for i in range(5)
    ]
    assert actions(verdicts) == [ALLOW, WARN, BLOCK, BLOCK, ABORT]
    assert verdicts[2].family is Family.SIDE_EFFECT
    assert agent.reached == 2


def test_different_recipients_are_different_emails() -> None:
    """The same body to five people: five effects, none repeated."""
    agent = Timed()
    destructive = {"destructiveHint": True, "idempotentHint": False}
    verdicts = [
        agent.call("send_email", {"to": f"u{i}@x.dev", "subject": "Hi"}, text("sent"), annotations=destructive)
        for i in range(5)
    ]
    assert set(actions(verdicts)) == {ALLOW}


words = st.text(st.characters(categories=("Ll", "Lu", "Nd")), min_size=1, max_size=12)


@given(st.lists(words, min_size=1, max_size=4), st.integers(0, 3), st.sampled_from(["", " ", "\u200b", "\t"]))
def test_spacing_and_invisible_characters_never_make_another_call(parts: list[str], extra: int, pad: str) -> None:
    """Any words, spaced and padded differently, compare as one loose form."""
    plain = " ".join(parts)
    varied = pad + (" " * (extra + 1)).join(parts) + pad
    rules = ArgumentRules()
    assert normalized({"q": plain}, rules, scrub_values=True) == normalized({"q": varied}, rules, scrub_values=True)


@given(words, words)
def test_different_words_stay_different_calls(one: str, other: str) -> None:
    """Queries that differ in more than spacing, case or invisible characters are different calls."""
    rules = ArgumentRules()
    same = normalized({"q": one}, rules, scrub_values=True) == normalized({"q": other}, rules, scrub_values=True)
    numeric = one.isdigit() and other.isdigit() and int(one) == int(other)
    assert same == (one == other or numeric)
