"""The project an agent works on while a trace is recorded, and the servers it talks to.

Every trace gets a fresh copy of the same small shop project (a Python package with
tests, a package.json, documentation), committed in a git repository with fixed author
and dates, so commit hashes and all answers are the same at every recording.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import BIN_DIR, NODE_DIR, everything_command, fixture_command, pypi_server_command

WAIT_SCALE = 0.01
"""Real seconds the wait tool sleeps per second asked for while recording (its answers do not depend on it)."""
SHOWN_ROOT = "/home/agent/shop"
"""Where the project appears to be in the recorded traces (its temporary path is replaced by this)."""
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Dana Agent",
    "GIT_AUTHOR_EMAIL": "dana@example.com",
    "GIT_COMMITTER_NAME": "Dana Agent",
    "GIT_COMMITTER_EMAIL": "dana@example.com",
    "GIT_AUTHOR_DATE": "1796025600 +0000",
    "GIT_COMMITTER_DATE": "1796025600 +0000",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

PRICING = '''"""Prices of order lines: unit price, bulk discount, tax, cents."""

from decimal import ROUND_HALF_UP, Decimal

BULK_THRESHOLD = 10
BULK_DISCOUNT = Decimal("0.10")
TAX_RATE = Decimal("0.20")


def line_total(unit_price: Decimal, quantity: int) -> Decimal:
    """Price of quantity units, with the bulk discount from BULK_THRESHOLD units on."""
    total = unit_price * quantity
    if quantity > BULK_THRESHOLD:
        total -= total * BULK_DISCOUNT
    return total


def with_tax(amount: Decimal) -> Decimal:
    """The amount with tax added, rounded to cents."""
    return (amount * TAX_RATE).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def cents(amount: Decimal) -> int:
    """The amount in whole cents, rounded half up."""
    return int(amount * 100)
'''
TEST_PRICING = """import unittest
from decimal import Decimal

from inventory.pricing import cents, line_total, with_tax


class PricingTest(unittest.TestCase):
    def test_bulk_discount_from_ten_units(self):
        self.assertEqual(line_total(Decimal("2.00"), 10), Decimal("18.00"))

    def test_small_order_has_no_discount(self):
        self.assertEqual(line_total(Decimal("2.50"), 3), Decimal("7.50"))

    def test_tax_is_added(self):
        self.assertEqual(with_tax(Decimal("10.00")), Decimal("12.00"))

    def test_cents_round_half_up(self):
        self.assertEqual(cents(Decimal("19.995")), 2000)
"""
HANDLERS = (
    "order_created", "order_paid", "order_cancelled", "order_shipped", "order_returned", "stock_received",
    "stock_adjusted", "stock_reserved", "stock_released", "price_changed", "coupon_applied", "refund_issued",
    "customer_created", "customer_merged", "invoice_sent", "invoice_overdue", "warehouse_synced",
    "supplier_updated", "report_requested", "export_finished",
)  # fmt: skip


def _handler(event: str) -> str:
    noun, verb = event.split("_", 1)
    return (
        f'"""Handles the {event} event: updates the {noun} and records an audit entry."""\n\n'
        "from inventory.storage import audit, load, save\n\n\n"
        f"def handle_{event}(payload: dict) -> None:\n"
        f'    {noun} = load("{noun}", payload["{noun}_id"])\n'
        f'    {noun}["status"] = "{verb}"\n'
        f"    save({noun})\n"
        f'    audit("{event}", {noun}["id"])\n'
    )


FILES: dict[str, str] = {
    "README.md": "# shop\n\nInventory and pricing service of the web shop.\n\nRun the tests: `python -m unittest`.\n",
    "CHANGELOG.md": "# Changelog\n\n## 1.8.0\n\n- Bulk discount for large orders.\n- Weekly stock report.\n",
    "pyproject.toml": '[project]\nname = "inventory"\nversion = "1.8.0"\nrequires-python = ">=3.11"\n',
    "config.json": (
        "{\n"
        '  "currency": "EUR",\n'
        '  "tax_rate": "0.20",\n'
        '  "bulk_threshold": 10,\n'
        '  "feature_flags": {"csv_export": false}\n'
        "}\n"
    ),
    "package.json": (
        '{\n  "name": "shop-web",\n  "private": true,\n  "scripts": {"test": "vitest run", "build": "vite build"}\n}\n'
    ),
    "app.py": '"""Entry point of the stock sync worker."""\n\nimport redis\n\nQUEUE = redis.Redis().pubsub()\n',
    "inventory/__init__.py": "",
    "inventory/pricing.py": PRICING,
    "inventory/models.py": (
        '"""Records of the shop."""\n'
        "\n"
        "from dataclasses import dataclass\n"
        "from decimal import Decimal\n"
        "\n"
        "\n"
        "@dataclass\n"
        "class Item:\n"
        "    sku: str\n"
        "    name: str\n"
        "    price: Decimal\n"
        "    stock: int\n"
    ),
    "inventory/storage.py": (
        '"""A tiny key-value store for the handlers."""\n'
        "\n"
        "_DATA: dict[tuple[str, str], dict] = {}\n"
        "_AUDIT: list[tuple[str, str]] = []\n"
        "\n"
        "\n"
        "def load(kind: str, key: str) -> dict:\n"
        '    return _DATA.setdefault((kind, key), {"id": key})\n'
        "\n"
        "\n"
        "def save(record: dict) -> None:\n"
        "    pass\n"
        "\n"
        "\n"
        "def audit(event: str, key: str) -> None:\n"
        "    _AUDIT.append((event, key))\n"
    ),
    "inventory/report.py": (
        '"""The weekly stock report."""\n'
        "\n"
        "\n"
        "def average(values: list[int]) -> float:\n"
        "    return sum(values) / len(values)\n"
    ),
    "inventory/api/__init__.py": "",
    "inventory/api/routes.py": (
        '"""HTTP routes."""\n\nROUTES = {"/items": "list_items", "/items/{sku}": "get_item", "/healthz": "health"}\n'
    ),
    "inventory/api/auth.py": (
        '"""API keys for the warehouse scanners."""\n'
        "\n"
        "import hmac\n"
        "\n"
        "\n"
        "def valid(key: str, expected: str) -> bool:\n"
        "    return hmac.compare_digest(key, expected)\n"
    ),
    "inventory/api/schemas.py": (
        '"""Request and response shapes."""\n\nITEM = {"sku": str, "name": str, "price": str, "stock": int}\n'
    ),
    "inventory/cli/__init__.py": "",
    "inventory/cli/main.py": (
        '"""Command line entry point."""\n'
        "\n"
        "import sys\n"
        "\n"
        "\n"
        "def main() -> int:\n"
        '    print("inventory", *sys.argv[1:])\n'
        "    return 0\n"
    ),
    "inventory/utils/__init__.py": "",
    "inventory/utils/money.py": (
        '"""Money formatting."""\n'
        "\n"
        "from decimal import Decimal\n"
        "\n"
        "\n"
        "def fmt(amount: Decimal) -> str:\n"
        '    return f"{amount:.2f} EUR"\n'
    ),
    "inventory/handlers/__init__.py": "",
    **{f"inventory/handlers/{event}.py": _handler(event) for event in HANDLERS},
    "tests/__init__.py": "",
    "tests/test_pricing.py": TEST_PRICING,
    "docs/pricing.md": "# Pricing\n\nBulk discount: 10% from 10 units. Tax: 20%, added after the discount.\n",
    "docs/deploy.md": "# Deploying\n\nStart the `deploy-staging` pipeline; promote to production after checks pass.\n",
    "web/index.js": "import { renderCart } from './cart.js';\n\nrenderCart(document.getElementById('cart'));\n",
    "web/cart.js": "export function renderCart(el) {\n  el.textContent = 'Your cart is empty';\n}\n",
}


def git(root: Path, *args: str) -> str:
    """Runs git in the project with the fixed identity and dates."""
    done = subprocess.run(
        ["git", *args], cwd=root, env={**os.environ, **GIT_ENV}, capture_output=True, text=True, check=True
    )
    return done.stdout


def build_project(root: Path) -> Path:
    """Writes the shop project under root and commits it; returns its resolved path."""
    root.mkdir(parents=True)
    root = root.resolve()
    for relative, content in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    git(root, "init", "--quiet", "--initial-branch=main")
    git(root, "add", "--all")
    git(root, "commit", "--quiet", "-m", "Inventory service 1.8.0")
    return root


@dataclass(frozen=True)
class ServerSpec:
    """How to start one upstream server for a project."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def server_spec(name: str, root: Path) -> ServerSpec:
    """The command of the server called name, working on the project at root."""
    node_bin = NODE_DIR / "node_modules" / ".bin"
    fixture = fixture_command(f"{name}_server")
    path = f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    specs = {
        "git": ServerSpec(pypi_server_command("mcp-server-git", "--repository", str(root)), GIT_ENV),
        "time": ServerSpec(pypi_server_command("mcp-server-time", "--local-timezone", "UTC")),
        "everything": ServerSpec(everything_command("stdio")),
        "filesystem": ServerSpec([str(node_bin / "mcp-server-filesystem"), str(root)]),
        "jobs": ServerSpec(fixture),
        "ops": ServerSpec(fixture),
        "tracker": ServerSpec(fixture),
        "shell": ServerSpec([*fixture, str(root)], {"PATH": path}),
        "store": ServerSpec(fixture),
        "booking": ServerSpec(fixture),
        "sql": ServerSpec(fixture),
        "kv": ServerSpec(fixture),
        "wait": ServerSpec([*fixture, "--scale", str(WAIT_SCALE)]),
    }
    return specs[name]
