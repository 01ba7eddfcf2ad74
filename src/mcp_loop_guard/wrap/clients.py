"""The MCP clients whose config files ``wrap`` knows: where they keep them and how they write servers.

Paths are the documented ones per platform. With ``--client`` and no ``--scope``, the
project file is used when the current directory has one, the user file otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

Scope = Literal["user", "project"]


@dataclass(frozen=True, slots=True)
class Client:
    """One client's config file format."""

    key: str
    """The ``--client`` name."""
    title: str
    syntax: Literal["json", "toml"] = "json"
    sections: tuple[str, ...] = ("mcpServers",)
    """Where server maps sit: top-level keys, ``*`` matching any key (``projects.*.mcpServers``)."""
    url_keys: tuple[str, ...] = ("url",)
    """Keys that hold a remote server's URL; empty when the client runs only local servers from the file."""
    headers_key: str = "headers"
    type_routes: bool = True
    """The client picks the transport from ``type``, so a wrapped entry says ``"type": "stdio"``."""
    type_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({"http": "http", "sse": "sse"}))
    """The ``type`` spelling of each transport, written back on unwrap."""
    signs_in: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Keys by which the client itself authenticates to a remote server, which the guard cannot do."""
    http_only: bool = False
    """The client speaks only streamable HTTP to remote servers."""
    no_remote_reason: str = ""


_OAUTH = "the client signs in to it with OAuth (oauth), which the guard cannot do for it"

CLIENTS: Mapping[str, Client] = MappingProxyType(
    {
        "claude-desktop": Client(
            "claude-desktop",
            "Claude Desktop",
            url_keys=(),
            no_remote_reason="Claude Desktop starts only command entries from this file (remote ones are connectors)",
        ),
        "claude-code": Client(
            "claude-code",
            "Claude Code",
            sections=("mcpServers", "projects.*.mcpServers"),
            signs_in=MappingProxyType(
                {"oauth": _OAUTH, "headersHelper": "its headers come from a command Claude Code runs (headersHelper)"}
            ),
        ),
        "cursor": Client(
            "cursor", "Cursor", signs_in=MappingProxyType({"auth": "Cursor signs in to it with OAuth (auth)"})
        ),
        "vscode": Client("vscode", "VS Code", sections=("servers",), signs_in=MappingProxyType({"oauth": _OAUTH})),
        "windsurf": Client("windsurf", "Windsurf", url_keys=("serverUrl",), type_routes=False),
        "gemini": Client(
            "gemini",
            "Gemini CLI",
            url_keys=("httpUrl", "url"),
            type_routes=False,
            signs_in=MappingProxyType(
                {
                    "oauth": _OAUTH,
                    "authProviderType": "Gemini CLI authenticates to it itself (authProviderType)",
                }
            ),
        ),
        "codex": Client(
            "codex",
            "Codex",
            syntax="toml",
            sections=("mcp_servers",),
            headers_key="http_headers",
            type_routes=False,
            http_only=True,
            signs_in=MappingProxyType(
                {
                    "bearer_token_env_var": "Codex reads its token from an environment variable (bearer_token_env_var)",
                    "env_http_headers": "Codex fills its headers from environment variables (env_http_headers)",
                    "bearer_token": "it has a bearer_token, which Codex rejects",
                    "oauth": _OAUTH,
                    "scopes": "Codex signs in to it with OAuth (scopes)",
                    "oauth_resource": "Codex signs in to it with OAuth (oauth_resource)",
                }
            ),
        ),
    }
)

GENERIC = Client("generic", "an mcpServers file", sections=("mcpServers", "servers"))
"""Any other JSON file: ``mcpServers`` (or VS Code's ``servers``), remote servers under ``url``."""


def _config_home(environ: Mapping[str, str], home: Path, platform: str) -> Path:
    """Where per-user application settings live on this platform."""
    if platform == "darwin":
        return home / "Library" / "Application Support"
    if platform == "win32":
        return Path(environ.get("APPDATA") or home / "AppData" / "Roaming")
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config")


def paths(
    client: Client,
    scope: Scope,
    *,
    home: Path,
    cwd: Path,
    environ: Mapping[str, str],
    platform: str = sys.platform,
) -> tuple[Path, ...]:
    """The files a client reads for a scope, most likely first; empty when it has no such scope."""
    config = _config_home(environ, home, platform)
    user: dict[str, tuple[Path, ...]] = {
        "claude-desktop": (config / "Claude" / "claude_desktop_config.json",),
        "claude-code": (Path(environ["CLAUDE_CONFIG_DIR"]) / ".claude.json",)
        if environ.get("CLAUDE_CONFIG_DIR")
        else (home / ".claude.json",),
        "cursor": (home / ".cursor" / "mcp.json",),
        "vscode": (config / "Code" / "User" / "mcp.json", config / "Code - Insiders" / "User" / "mcp.json"),
        "windsurf": (home / ".codeium" / "windsurf" / "mcp_config.json",),
        "gemini": (home / ".gemini" / "settings.json",),
        "codex": (Path(environ.get("CODEX_HOME") or home / ".codex") / "config.toml",),
    }
    project: dict[str, tuple[Path, ...]] = {
        "claude-code": (cwd / ".mcp.json",),
        "cursor": (cwd / ".cursor" / "mcp.json",),
        "vscode": (cwd / ".vscode" / "mcp.json",),
        "gemini": (cwd / ".gemini" / "settings.json",),
        "codex": (cwd / ".codex" / "config.toml",),
    }
    return (user if scope == "user" else project).get(client.key, ())


def client_of(path: Path) -> Client:
    """The client whose file ``path`` is, by its name and folder; the generic reading otherwise."""
    name, folder = path.name, path.parent.name
    if path.suffix == ".toml":
        return CLIENTS["codex"]
    by_name = {
        "claude_desktop_config.json": "claude-desktop",
        ".claude.json": "claude-code",
        ".mcp.json": "claude-code",
        "mcp_config.json": "windsurf",
    }
    by_folder = {
        (".cursor", "mcp.json"): "cursor",
        (".vscode", "mcp.json"): "vscode",
        ("User", "mcp.json"): "vscode",
        (".gemini", "settings.json"): "gemini",
    }
    key = by_name.get(name) or by_folder.get((folder, name))
    return CLIENTS[key] if key else GENERIC
