"""Records the corpus from real servers: ``python -m tests.corpus.record [--set hard] [NAME ...]``.

Each trace is recorded in a fresh copy of the shop project with fresh server processes,
then written to ``tests/corpus/<name>.jsonl`` (``--set hard``: ``tests/corpus/hard/``);
that set's ``labels.json`` is rewritten from the labels declared with the scripts. With
names, only those traces are recorded. ``--list`` prints the names and labels. Needs the
test extra installed (``pip install -e '.[test]'``) and ``npm ci --prefix tests/node``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

from tests.corpus import hard_scripts, scripts
from tests.corpus.hard_labels import HardLabel
from tests.corpus.recording import REGISTRIES, Entry, RecordingError, Take
from tests.corpus.workspace import build_project

CORPUS_DIR = Path(__file__).resolve().parent
SET_DIRS = {"main": CORPUS_DIR, "hard": CORPUS_DIR / "hard"}
TAKE_TIMEOUT = 600.0


async def record(entry: Entry, out: Path) -> int:
    """Records one trace into out; returns its number of lines."""
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        root = build_project(Path(tmp) / "shop")
        log_path = Path(tmp) / "servers.log"
        with log_path.open("w", encoding="utf-8") as errlog:
            try:
                with anyio.fail_after(TAKE_TIMEOUT):
                    async with AsyncExitStack() as stack:
                        take = Take(entry.name, root, stack, errlog)
                        await entry.run(take)
            except BaseException:
                errlog.flush()
                sys.stderr.write(log_path.read_text(encoding="utf-8")[-4000:])
                raise
        lines = list(take.finished_lines())
    if entry.label.due is not None and not 1 <= entry.label.due <= len(lines):
        raise ValueError(f"{entry.name}: due {entry.label.due} is outside its {len(lines)} lines")
    if isinstance(entry.label, HardLabel) and tuple(take.marked) != entry.label.repeats:
        raise RecordingError(
            f"{entry.name}: the script marked lines {take.marked}, the label says {entry.label.repeats}"
        )
    (out / f"{entry.name}.jsonl").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return len(lines)


def write_labels(out: Path, corpus: str = "main") -> None:
    """Writes labels.json for every registered trace of a set."""
    registry = REGISTRIES[corpus]
    labels = {f"{name}.jsonl": registry[name].label.to_json() for name in sorted(registry)}
    (out / "labels.json").write_text(json.dumps(labels, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Parses the command line and records the traces asked for (all by default)."""
    parser = argparse.ArgumentParser(prog="python -m tests.corpus.record", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="traces to record (default: all)")
    parser.add_argument("--set", dest="corpus", choices=sorted(SET_DIRS), default="main", help="which corpus")
    parser.add_argument(
        "--out", type=Path, help="directory to write to (default: tests/corpus, or tests/corpus/hard for --set hard)"
    )
    parser.add_argument("--list", action="store_true", help="list the traces and their labels, record nothing")
    options = parser.parse_args(argv)
    assert scripts.__all__  # the imports register the scripts
    assert hard_scripts.__all__
    registry = REGISTRIES[options.corpus]
    if options.list:
        for name in sorted(registry):
            sys.stderr.write(f"{name}: {registry[name].label.describe()}\n")
        return 0
    unknown = [name for name in options.names if name not in registry]
    if unknown:
        parser.error(f"unknown traces: {', '.join(unknown)}")
    out: Path = options.out or SET_DIRS[options.corpus]
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in options.names or sorted(registry):
        began = time.monotonic()
        try:
            count = anyio.run(record, registry[name], out)
        except Exception as error:  # report every failed trace, record the others
            failed.append(name)
            sys.stderr.write(f"{name}: FAILED: {_innermost(error)!r}\n")
            continue
        sys.stderr.write(f"{name}: {count} lines in {time.monotonic() - began:.1f} s\n")
    write_labels(out, options.corpus)
    if failed:
        sys.stderr.write(f"failed: {' '.join(failed)}\n")
    return 1 if failed else 0


def _innermost(error: BaseException) -> BaseException:
    """The first leaf of nested exception groups: the error the script or a server raised."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


if __name__ == "__main__":
    sys.exit(main())
