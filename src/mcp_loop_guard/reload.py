"""Config reload: SIGHUP (or ``--watch-config``) re-reads the config file without dropping a session.

The file is read and checked as at start-up; a bad one is rejected with the usual message
and the running config stays. A good one applies at once: the loop rules and budgets judge
the next call of every session (the counts so far are kept), and added, removed or changed
servers are started, stopped or restarted, after which clients get ``list_changed``.
Settings that shape the process itself (transport, port, state store, tokens, limits) take
effect at the next start; a reload that changes them says so. Command-line flags and
``LOOP_GUARD_*`` variables still win over the file, as at start-up.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import anyio.abc

from mcp_loop_guard.config import ConfigError, ServerSpec
from mcp_loop_guard.config_file import MAX_CONFIG_BYTES, load_config
from mcp_loop_guard.plan import Plan, plan
from mcp_loop_guard.settings import RULE_SETTINGS, Settings, SettingsError, load_settings
from mcp_loop_guard.userfile import UserFileError, read_bytes

__all__ = ["LIVE_SETTINGS", "Reloader", "on_sighup", "reloader_for"]

logger = logging.getLogger(__name__)

LIVE_SETTINGS = RULE_SETTINGS | {"log_level", "watch_config"}
"""Settings a reload applies to the running guard; the others wait for a restart."""

ApplyServers = Callable[[Sequence[ServerSpec]], Awaitable[str | None]]
"""Make the running upstreams match these servers; None when done, else why it cannot be done live."""


class Reloader:
    """Re-reads one guard's config file and applies what changed."""

    def __init__(self, current: Plan, apply_servers: ApplyServers) -> None:
        """``current``: the plan the guard started with; its rules are swapped in place."""
        assert current.config.path is not None
        self.path: Path = current.config.path
        self.current = current
        self.apply_servers = apply_servers
        self._lock = anyio.Lock()
        self.reloads = 0
        """Reloads applied so far."""

    async def reload(self, why: str) -> bool:
        """Read the file and apply it; False (and the running config kept) when it is rejected."""
        async with self._lock:
            try:
                config = load_config(self.path)
                settings = load_settings(config.settings, **self.current.overrides)
                fresh = plan(config, settings, self.current.overrides)
            except (ConfigError, SettingsError) as error:
                logger.error("config reload (%s) rejected, the running config stays: %s", why, error)
                return False
            old_servers, new_servers = self.current.config.servers, config.servers
            if old_servers != new_servers:
                problem = await self.apply_servers(new_servers)
                if problem is not None:
                    logger.error("config reload (%s) rejected, the running config stays: %s", why, problem)
                    return False
            self.current.policies.table = fresh.policies.table
            _apply_log_level(self.current.settings, settings)
            waiting = [
                name
                for name in Settings.fields
                if name not in LIVE_SETTINGS and getattr(self.current.settings, name) != getattr(settings, name)
            ]
            self.current = Plan(config, settings, self.current.policies, self.current.overrides)
            self.reloads += 1
            logger.info("config reloaded from %s (%s)%s", self.path, why, _servers_changed(old_servers, new_servers))
            if waiting:
                logger.warning("changed settings that take effect at the next start: %s", ", ".join(waiting))
            return True

    async def watch(self, interval: float = 1.0) -> None:
        """Reload whenever the file's contents change (checked every ``interval`` seconds)."""
        seen = _fingerprint(self.path)
        while True:
            await anyio.sleep(interval)
            now = _fingerprint(self.path)
            if now is None or now == seen:
                continue  # gone for a moment (an editor replacing it), or unchanged
            seen = now
            await self.reload("the file changed")


def _fingerprint(path: Path) -> str | None:
    """The file's hash; for a file that cannot be used, its problem (a change, so the reload says why); None if gone."""
    try:
        return hashlib.sha256(read_bytes(path, limit=MAX_CONFIG_BYTES)).hexdigest()
    except UserFileError as error:
        return None if error.missing else error.problem


def _apply_log_level(old: Settings, new: Settings) -> None:
    if old.log_level != new.log_level:
        logging.getLogger("mcp_loop_guard").setLevel(new.log_level.upper())


def _servers_changed(old: Sequence[ServerSpec], new: Sequence[ServerSpec]) -> str:
    before = {spec.name: spec for spec in old}
    after = {spec.name: spec for spec in new}
    added = [name for name in after if name not in before]
    removed = [name for name in before if name not in after]
    restarted = [name for name in after if name in before and before[name] != after[name]]
    parts = [
        f"{label} {', '.join(names)}"
        for label, names in (("added", added), ("removed", removed), ("restarted", restarted))
        if names
    ]
    return f": servers {'; '.join(parts)}" if parts else ""


def reloader_for(current: Plan, apply_servers: ApplyServers, tg: anyio.abc.TaskGroup) -> Reloader | None:
    """The guard's reloader when it runs from a config file (watching it when asked), else None."""
    if current.config.path is None:
        if current.settings.watch_config:
            logger.warning("LOOP_GUARD_WATCH_CONFIG needs --config FILE; there is no file to watch")
        return None
    reloader = Reloader(current, apply_servers)
    if current.settings.watch_config:
        tg.start_soon(reloader.watch)
    return reloader


def on_sighup(reloader: Reloader | None, tg: anyio.abc.TaskGroup) -> Callable[[str], None] | None:
    """What SIGHUP does: start a reload in ``tg``; None without a config file (SIGHUP then stops a stdio guard)."""
    if reloader is None:
        return None

    def reload(why: str) -> None:
        tg.start_soon(reloader.reload, why)

    return reload
