#!/usr/bin/env bash
# Installs the test dependencies and runs the whole test suite: lint, format check,
# type check, then pytest (unit and end-to-end) in four worker processes (PYTEST_WORKERS=N
# for another number, 0 for none). Extra arguments go to pytest.
#
# Needs Python 3.11+ (as python3, or set PYTHON) and Node.js with npm. Creates
# .venv in the repository if missing, installs the package with its `test` extra
# (pytest, ruff, mypy, mcp-server-time, mcp-server-git, ...), and installs the
# pinned npm packages of every tests/*/package.json (server-everything and
# server-filesystem in tests/node, the conformance suite in tests/conformance, the Claude
# Code CLI in tests/clients) from their lockfiles, mcp-proxy (pinned, in a virtual environment of its own
# under tests/interop/.venvs, for the proxy chain tests), redis-server (from apt, or Homebrew on
# macOS, when missing) for the state store tests, and valgrind (from apt, when missing) for
# the benchmarks' instruction count. Runs on Linux and macOS; valgrind does not run on macOS,
# so the two instruction-count tests are skipped there.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

python="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "error: $python is $("$python" --version 2>&1); Python 3.11+ is required (set PYTHON=...)" >&2
        exit 1
    fi
    "$python" -m venv .venv
fi

echo "== installing Python test dependencies into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

# The suite starts a few hundred Python processes, and each test worker imports every test
# module: with bytecode caches off (PYTHONDONTWRITEBYTECODE), each process would compile the
# guard's modules again and each worker rewrite the asserts of every test module again (about
# 7 s of CPU a worker). So caches are on, and filled once while the installs below run.
unset PYTHONDONTWRITEBYTECODE
{
    .venv/bin/python -m compileall -q -x '(node_modules|\.venvs)' src tests benchmarks
    .venv/bin/pytest --collect-only -q -p no:cacheprovider
} >/dev/null 2>&1 &
warming=$!

if ! command -v npm >/dev/null; then
    echo "error: npm is required for the end-to-end test servers (install Node.js with npm)" >&2
    exit 1
fi
for manifest in tests/*/package.json; do
    dir="$(dirname "$manifest")"
    echo "== installing npm test packages into $dir"
    if [[ -f "$dir/package-lock.json" ]]; then
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    else
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error
    fi
done

echo "== installing mcp-proxy into tests/interop/.venvs (the proxy chain tests run it; it pins mcp<2)"
.venv/bin/python -m tests.interop.mcp_proxy_venv

if ! command -v redis-server >/dev/null && ! command -v valkey-server >/dev/null; then
    echo "== installing redis-server (the fleet tests start their own on a free port)"
    if [[ $(uname -s) == Darwin ]] && command -v brew >/dev/null; then
        brew install --quiet redis
    elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get install -y -q redis-server >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null; }
    elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
        sudo apt-get install -y -q redis-server >/dev/null
    else
        echo "error: redis-server (or valkey-server) is required for the state store tests; install it" >&2
        exit 1
    fi
fi

if [[ $(uname -s) == Darwin ]]; then
    echo "== valgrind does not run on macOS: the instruction-count smoke tests are skipped"
elif ! command -v valgrind >/dev/null; then
    echo "== installing valgrind (the benchmarks count the instructions of a judged call with it)"
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get install -y -q valgrind >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q valgrind >/dev/null; }
    elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
        sudo apt-get install -y -q valgrind >/dev/null
    else
        echo "error: valgrind is required for the benchmark smoke tests; install it" >&2
        exit 1
    fi
fi

wait "$warming" || true  # a failure here shows again, with its message, where pytest collects
echo "== ruff check"
.venv/bin/ruff check .
echo "== ruff format --check"
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
# Most tests wait on real processes starting and answering, or on a server's own pace (a task that takes
# seconds): four workers keep two cores busy through those waits (94% of a run, where three kept them 85%
# busy and took a tenth longer), and an idle worker takes tests queued on a busy one (worksteal), so the
# long tests do not end the run alone. The slowest tests are listed at the end, to see where the time goes.
exec .venv/bin/pytest -n "${PYTEST_WORKERS:-4}" --dist worksteal --durations=15 "$@"
