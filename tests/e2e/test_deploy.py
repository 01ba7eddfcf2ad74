"""The fleet deployment files in deploy/, checked against the image, the settings and each other, then run.

No container engine or cluster runs here, so the files are read, not applied: they must parse,
set only real settings with accepted values, and agree with the Dockerfile and among
themselves (command line, ports, probe paths, service names). Then the fleet they describe is
run for real: three guards started with the compose file's command line (only the config
path, listen address and port made local), a real redis-server in place of Valkey, and a
round robin over the three in place of HAProxy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
import yaml
from mcp import types

from mcp_loop_guard.config import HttpServer, StdioServer
from mcp_loop_guard.config_file import load_config
from mcp_loop_guard.plan import plan
from mcp_loop_guard.proxy.downstream.http.middleware import HostGuard, security_settings
from mcp_loop_guard.settings import load_settings, setting_fields
from tests.dockerfile import DOCKERFILE, exec_form, image_command, instructions, localized
from tests.harness import BIN_DIR, REPO_ROOT, action, fixture_command, texts
from tests.http_harness import (
    KEY_HEADER,
    HttpSession,
    Rig,
    ServerProcess,
    http_get,
    open_http_session,
    payload_for,
    payload_verdict,
    raw_call,
    run_server,
)
from tests.redis_harness import RedisServer

pytestmark = [pytest.mark.e2e]

DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
HAPROXY = DEPLOY / "haproxy.cfg"
ENV_EXAMPLE = DEPLOY / "guard.env.example"
KUBERNETES = DEPLOY / "kubernetes"

GUARD = "guard"
"""The compose service of the guard replicas."""
BALANCER = "loop-guard"
"""The compose service of the load balancer, the name clients on the compose network use."""
NAMESPACE = "mcp-loop-guard"
TOKEN = "fleet-test-token"  # noqa: S105 - a made-up token for this test's guards only
ALONE = [None, None, "warn", "warn", "block", "block", "abort"]
"""One guard alone, seven identical calls with the default thresholds (see test_http_stateless)."""


# --- reading the files -----------------------------------------------------------------------


def compose() -> dict[str, Any]:
    """deploy/compose.yaml."""
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def service(name: str) -> dict[str, Any]:
    """One compose service."""
    found: dict[str, Any] = compose()["services"][name]
    return found


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file, comments and blank lines skipped."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def compose_environment() -> dict[str, str]:
    """What the guard replicas get: the env file (its example here), then the service's environment."""
    guard = service(GUARD)
    return env_file(ENV_EXAMPLE) | {key: str(value) for key, value in guard["environment"].items()}


def guard_command() -> list[str]:
    """What a guard container runs: the image's ENTRYPOINT, then the compose service's command."""
    return exec_form(dict(instructions(DOCKERFILE))["ENTRYPOINT"]) + list(service(GUARD)["command"])


def option(argv: Sequence[str], flag: str) -> str:
    """The value after ``flag`` in a command line."""
    return argv[list(argv).index(flag) + 1]


def kubernetes_files() -> list[Path]:
    """The manifests the kustomization lists, in its order."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text(encoding="utf-8"))
    return [KUBERNETES / name for name in kustomization["resources"]]


def kubernetes_objects() -> list[dict[str, Any]]:
    """Every object of every listed manifest."""
    return [
        document
        for path in kubernetes_files()
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document is not None
    ]


def kube(kind: str, name: str) -> dict[str, Any]:
    """The one object of that kind and name."""
    found = [item for item in kubernetes_objects() if item["kind"] == kind and item["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The only container of a Deployment's pods."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, containers
    found: dict[str, Any] = containers[0]
    return found


def container_env(item: Mapping[str, Any]) -> dict[str, str]:
    """A container's plain ``env`` values."""
    return {entry["name"]: entry["value"] for entry in item.get("env", [])}


def kubernetes_environment() -> dict[str, str]:
    """What a guard pod gets: the Secret's values (``envFrom``), then the container's ``env``."""
    guard = container(kube("Deployment", "mcp-loop-guard"))
    secret_names = [source["secretRef"]["name"] for source in guard["envFrom"]]
    from_secrets = {
        key: str(value) for name in secret_names for key, value in kube("Secret", name)["stringData"].items()
    }
    return from_secrets | container_env(guard)


def configmap_config(directory: Path) -> Path:
    """The ConfigMap's mcp.json, written to a file."""
    target = directory / "configmap-mcp.json"
    target.write_text(kube("ConfigMap", "mcp-loop-guard-config")["data"]["mcp.json"], encoding="utf-8")
    return target


def haproxy_sections() -> dict[str, list[list[str]]]:
    """haproxy.cfg by section header (``backend guards``), each line as its words, comments dropped."""
    sections: dict[str, list[list[str]]] = {}
    current: list[list[str]] = []
    for raw in HAPROXY.read_text(encoding="utf-8").splitlines():
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if not raw[0].isspace():
            current = sections.setdefault(" ".join(words), [])
        else:
            current.append(words)
    return sections


def directive(section: Sequence[list[str]], *head: str) -> list[str]:
    """The words of the one line of a section starting with ``head``."""
    found = [words for words in section if words[: len(head)] == list(head)]
    assert len(found) == 1, (head, section)
    return found[0]


def port_of(url: str) -> int:
    """The explicit port of a URL."""
    port = urlsplit(url).port
    assert port is not None, url
    return port


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No LOOP_GUARD_* variable of the test run leaks into the settings a test loads."""
    for name in list(os.environ):
        if name.startswith("LOOP_GUARD_"):
            monkeypatch.delenv(name)
    return monkeypatch


# --- the files -------------------------------------------------------------------------------


def test_dockerfile_installs_the_redis_extra_and_runs_as_a_numeric_non_root_user() -> None:
    """The image installs mcp-loop-guard[redis,otel], keeps tini as PID 1 and runs as uid 10001 by number."""
    final = instructions(DOCKERFILE)
    installs = [arguments for name, arguments in final if name == "RUN" and "pip install" in arguments]
    user = [arguments for name, arguments in final if name == "USER"]
    creates = [arguments for name, arguments in final if name == "RUN" and "useradd" in arguments]

    assert len(installs) == 1, installs
    assert "'mcp-loop-guard[redis,otel]'" in installs[0]
    assert "'.[redis,otel]'" in DOCKERFILE.read_text(encoding="utf-8"), "the build stage builds the extras' wheels"
    assert image_command(DOCKERFILE)[:3] == ["tini", "--", "mcp-loop-guard"]
    assert len(user) == 1
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user[0]), user
    assert f"--uid {user[0].split(':')[0]}" in creates[0]
    assert f"--gid {user[0].split(':')[1]}" in creates[0]


def test_compose_runs_three_stateless_replicas_of_the_image_behind_the_balancer() -> None:
    """Three replicas of the image's entrypoint with --stateless, configs/mcp.json mounted, state in valkey."""
    services = compose()["services"]
    guard = services[GUARD]
    command = guard_command()
    image_cmd = image_command(DOCKERFILE)
    state = urlsplit(guard["environment"]["LOOP_GUARD_STATE"])
    source, target, mode = guard["volumes"][0].split(":")
    health = guard["healthcheck"]["test"]

    assert set(services) == {GUARD, "valkey", "everything", BALANCER}
    assert (DEPLOY / guard["build"]["context"]).resolve() == REPO_ROOT
    assert "entrypoint" not in guard, "the image's tini stays PID 1"
    assert guard["deploy"]["replicas"] == 3
    assert "--stateless" in command
    for flag in ("--transport", "--port", "--config"):
        assert option(command, flag) == option(image_cmd, flag), flag
    assert (DEPLOY / source).resolve() == REPO_ROOT / "configs" / "mcp.json"
    assert (target, mode) == (option(command, "--config"), "ro")
    assert (state.scheme, state.hostname, state.port, state.path) == ("redis", "valkey", 6379, "/0")
    assert "--port" not in services["valkey"]["command"], "valkey listens on its default port, 6379"
    assert guard["depends_on"]["valkey"]["condition"] == "service_healthy"
    assert guard["env_file"] == "guard.env"
    assert "LOOP_GUARD_AUTH_TOKEN" in env_file(ENV_EXAMPLE)
    ignored = subprocess.run(["git", "check-ignore", "-q", "deploy/guard.env"], cwd=REPO_ROOT, check=False)
    assert ignored.returncode == 0, "deploy/guard.env holds the real token: git must ignore it"
    assert health[:3] == ["CMD", "python", "-c"]
    assert f"http://127.0.0.1:{option(command, '--port')}/healthz" in health[3]


def test_compose_reaches_every_upstream_of_the_mounted_config() -> None:
    """Each remote server in configs/mcp.json is a compose service listening on the URL's port."""
    servers = load_config(REPO_ROOT / "configs" / "mcp.json").servers
    remote = [server for server in servers if isinstance(server, HttpServer)]

    assert remote, "configs/mcp.json names a remote server the compose file must run"
    for server in remote:
        host = urlsplit(server.url).hostname
        assert host in compose()["services"], server.url
        assert str(service(str(host))["environment"]["PORT"]) == str(port_of(server.url))


def test_haproxy_balances_over_every_replica_on_the_guards_port() -> None:
    """HAProxy's servers are the guard service on the guards' port, health-checked on /healthz, found by DNS."""
    sections = haproxy_sections()
    backend = sections["backend guards"]
    _, _, count, address = directive(backend, "server-template")
    host, _, port = address.partition(":")
    published = service(BALANCER)["ports"][0].rsplit(":", 1)[1]
    mounted = service(BALANCER)["volumes"][0].split(":")

    assert directive(sections["frontend mcp"], "default_backend") == ["default_backend", "guards"]
    assert directive(sections["frontend mcp"], "bind") == ["bind", f":{published}"]
    assert (host, port) == (GUARD, option(guard_command(), "--port"))
    assert int(count) >= compose()["services"][GUARD]["deploy"]["replicas"]
    assert directive(backend, "balance") == ["balance", "roundrobin"]
    assert directive(backend, "http-check", "send") == ["http-check", "send", "meth", "GET", "uri", "/healthz"]
    assert {"check", "resolvers", "docker"} <= set(directive(backend, "default-server"))
    assert directive(sections["resolvers docker"], "nameserver")[2] == "127.0.0.11:53", "Docker's embedded DNS"
    assert ((DEPLOY / mounted[0]).resolve(), mounted[1]) == (HAPROXY, "/usr/local/etc/haproxy/haproxy.cfg")


def test_kubernetes_manifests_are_the_listed_objects() -> None:
    """The kustomization lists every manifest in the folder; together they hold each object the fleet needs."""
    listed = {path.name for path in kubernetes_files()}
    present = {path.name for path in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text(encoding="utf-8"))
    kinds = sorted((item["kind"], item["metadata"]["name"]) for item in kubernetes_objects())

    assert listed == present
    assert kustomization["namespace"] == NAMESPACE
    assert kinds == [
        ("ConfigMap", "mcp-loop-guard-config"),
        ("Deployment", "mcp-loop-guard"),
        ("Deployment", "valkey"),
        ("Namespace", NAMESPACE),
        ("NetworkPolicy", "valkey"),
        ("Secret", "mcp-loop-guard-tokens"),
        ("Service", "mcp-loop-guard"),
        ("Service", "valkey"),
    ]
    for item in kubernetes_objects():
        assert "namespace" not in item["metadata"], "the kustomization sets the namespace"


def test_kubernetes_guard_deployment_runs_the_image_as_compose_does() -> None:
    """Three non-root replicas with limits, the compose command line, probes on /healthz and /readyz."""
    deployment = kube("Deployment", "mcp-loop-guard")
    pod = deployment["spec"]["template"]
    guard = container(deployment)
    args = guard["args"]
    ports = {port["name"]: port["containerPort"] for port in guard["ports"]}
    uid = next(arguments for name, arguments in instructions(DOCKERFILE) if name == "USER").split(":")[0]
    mounts = {mount["name"]: mount["mountPath"] for mount in guard["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    readiness = guard["readinessProbe"]["exec"]["command"]

    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "command" not in guard, "the image's tini stays PID 1"
    assert args == service(GUARD)["command"]
    assert ports == {"http": int(option(args, "--port"))}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert str(pod["spec"]["securityContext"]["runAsUser"]) == uid
    assert guard["securityContext"]["allowPrivilegeEscalation"] is False
    for kind in ("requests", "limits"):
        assert set(guard["resources"][kind]) == {"cpu", "memory"}, kind
    for probe in ("startupProbe", "livenessProbe"):
        assert guard[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert readiness[:2] == ["python", "-c"]
    assert f"http://127.0.0.1:{option(args, '--port')}/readyz" in readiness[2]
    config_dir = str(Path(option(args, "--config")).parent)
    config_volume = next(name for name, path in mounts.items() if path == config_dir)
    assert volumes[config_volume]["configMap"]["name"] == "mcp-loop-guard-config"
    assert Path(option(args, "--config")).name in kube("ConfigMap", "mcp-loop-guard-config")["data"]


def test_kubernetes_services_select_their_pods_and_valkey_is_where_the_guards_look() -> None:
    """Each Service selects its own pods; LOOP_GUARD_STATE names the Valkey Service, which only guards may reach."""
    guard_pods = kube("Deployment", "mcp-loop-guard")["spec"]["template"]["metadata"]["labels"]
    valkey = kube("Deployment", "valkey")
    valkey_pods = valkey["spec"]["template"]["metadata"]["labels"]
    guard_service = kube("Service", "mcp-loop-guard")["spec"]
    valkey_service = kube("Service", "valkey")["spec"]
    state = urlsplit(container_env(container(kube("Deployment", "mcp-loop-guard")))["LOOP_GUARD_STATE"])
    valkey_ports = {port["name"]: port["containerPort"] for port in container(valkey)["ports"]}
    policy = kube("NetworkPolicy", "valkey")["spec"]

    assert guard_service["selector"].items() <= guard_pods.items()
    assert not guard_service["selector"].items() <= valkey_pods.items()
    assert guard_service["ports"][0]["targetPort"] == "http"
    assert valkey_service["selector"].items() <= valkey_pods.items()
    assert not valkey_service["selector"].items() <= guard_pods.items()
    assert (state.scheme, state.hostname, state.port) == ("redis", "valkey", valkey_service["ports"][0]["port"])
    assert valkey_ports[valkey_service["ports"][0]["targetPort"]] == 6379
    assert "--port" not in container(valkey)["args"], "valkey listens on its default port, 6379"
    assert policy["podSelector"]["matchLabels"] == valkey_service["selector"]
    assert policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"].items() <= guard_pods.items()
    assert valkey["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_every_setting_the_files_set_is_real_and_accepted(
    where: str, clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each LOOP_GUARD_* variable set for the guards is a real setting; with the config, they load and plan."""
    known = {field.env for field in setting_fields()}
    if where == "compose":
        environment = compose_environment()
        config = load_config(REPO_ROOT / "configs" / "mcp.json")
    else:
        environment = kubernetes_environment()
        config = load_config(configmap_config(tmp_path))
    for name, value in environment.items():
        clean_environment.setenv(name, value)
    settings = load_settings(config.settings)
    decided = plan(config, settings)

    assert set(environment) <= known, set(environment) - known
    assert settings.state == "redis://valkey:6379/0"
    assert settings.state_fail == "open"
    assert settings.tokens(), "every request but /healthz needs a token"
    assert decided.config.servers


def test_kubernetes_config_runs_only_commands_the_image_installs(tmp_path: Path) -> None:
    """The ConfigMap's servers are stdio commands the image installs (no remote server without a Service)."""
    servers = load_config(configmap_config(tmp_path)).servers
    build = DOCKERFILE.read_text(encoding="utf-8")

    assert servers
    for server in servers:
        assert isinstance(server, StdioServer), server
        assert re.search(rf"pip install .*\b{re.escape(server.command)}\b", build), server.command


async def host_status(environment: Mapping[str, str], host: str) -> int:
    """The status the guards' Host check gives a request to /mcp with this Host header (0: let through)."""
    statuses: list[int] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        statuses.append(0)

    async def send(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(int(message["status"]))

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    settings = load_settings(allowed_hosts=environment.get("LOOP_GUARD_ALLOWED_HOSTS", ""))
    check = HostGuard(inner, security_settings(settings), open_paths=("/healthz",))
    await check({"type": "http", "path": "/mcp", "headers": [(b"host", host.encode())]}, receive, send)
    return statuses[0]


@pytest.mark.anyio
async def test_the_names_clients_use_pass_the_guards_host_check(clean_environment: pytest.MonkeyPatch) -> None:
    """The balancer's name (compose) and the Service's names (Kubernetes) are let through; other names get 421."""
    port = option(guard_command(), "--port")
    service_names = [
        NAMESPACE,
        f"{NAMESPACE}.{NAMESPACE}",
        f"{NAMESPACE}.{NAMESPACE}.svc",
        f"{NAMESPACE}.{NAMESPACE}.svc.cluster.local",
    ]

    assert await host_status(compose_environment(), f"{BALANCER}:{port}") == 0
    assert await host_status(compose_environment(), f"localhost:{port}") == 0
    assert await host_status(compose_environment(), f"elsewhere.example:{port}") == 421
    for name in service_names:
        assert await host_status(kubernetes_environment(), f"{name}:{port}") == 0, name
    assert await host_status(kubernetes_environment(), f"elsewhere.example:{port}") == 421


# --- the fleet, run ---------------------------------------------------------------------------


def fleet_argv(config: Path, port: int) -> list[str]:
    """The compose command line with this machine's config path, port, and loopback as the listen address."""
    argv = localized(guard_command(), config, port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    return argv


def fleet_environment(redis: RedisServer) -> dict[str, str]:
    """The replicas' environment from the compose file, with the test's redis-server and token."""
    environment = compose_environment() | {"LOOP_GUARD_STATE": redis.url, "LOOP_GUARD_AUTH_TOKEN": TOKEN}
    return environment | {"PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}


def counted_calls(log: Path) -> int:
    """How many tools/call reached any replica's upstream."""
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text(encoding="utf-8").splitlines() if json.loads(line)["event"] == "call")


class RoundRobin:
    """One agent's sessions with every replica, each call sent to the next replica in turn, as HAProxy does."""

    def __init__(self, sessions: Sequence[HttpSession]) -> None:
        self.sessions = list(sessions)
        self.turn = 0

    async def call(self, text: str) -> types.CallToolResult:
        """echo{text} on the next replica."""
        session = self.sessions[self.turn % len(self.sessions)].session
        self.turn += 1
        with anyio.fail_after(20):
            return await session.call_tool("echo", {"text": text})

    async def actions(self, text: str, times: int) -> list[tuple[str | None, list[str]]]:
        """The verdict action and texts of ``times`` identical calls."""
        return [(action(result), texts(result)) for result in [await self.call(text) for _ in range(times)]]


@asynccontextmanager
async def agent(guards: Sequence[ServerProcess], key: str) -> AsyncIterator[RoundRobin]:
    """One keyed agent's sessions with every replica (stateless: the key header carries its identity)."""
    headers = {"Authorization": f"Bearer {TOKEN}", KEY_HEADER: key}
    async with AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(open_http_session(g.mcp_url, headers=headers)) for g in guards]
        yield RoundRobin(sessions)


async def readyz(guard: ServerProcess) -> dict[str, Any]:
    """/readyz of one replica, with the token; its status code under ``code``."""
    response = await http_get(guard.url("/readyz"), {"Authorization": f"Bearer {TOKEN}"})
    return response.json() | {"code": response.status_code}


async def probe(command: Sequence[str], port: int, env: Mapping[str, str]) -> int:
    """Runs a health or readiness probe command against the replica on ``port``; its exit status."""
    argv = [part.replace(":8080/", f":{port}/") for part in command]
    if argv[0] == "python":
        argv[0] = str(BIN_DIR / "python")
    with anyio.fail_after(20):
        done = await anyio.run_process(argv, check=False, env={**os.environ, **env}, stderr=subprocess.STDOUT)
    return done.returncode


@pytest.fixture
def fleet_config(tmp_path: Path) -> tuple[Path, Path]:
    """A config of one stdio fixture server logging every call it gets; (config, log)."""
    log = tmp_path / "upstream-calls.jsonl"
    command = fixture_command("counting_server")
    entry = {"command": command[0], "args": command[1:], "env": {"COUNTING_SERVER_LOG": str(log)}}
    config = tmp_path / "config" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"counting": entry}}), encoding="utf-8")
    return config, log


@pytest.mark.anyio
async def test_a_fleet_of_three_shares_one_agents_loop_state_through_redis(
    rig: Rig, redis_server: RedisServer, fleet_config: tuple[Path, Path]
) -> None:
    """Round robin over three replicas: warned and refused as by one guard, 429 everywhere, fail open, resumes."""
    config, log = fleet_config
    env = fleet_environment(redis_server)
    async with AsyncExitStack() as stack:
        guards = [
            await stack.enter_async_context(
                run_server(
                    lambda port: (fleet_argv(config, port), env), marker=rig.marker, stderr=rig.log(f"guard-{n}")
                )
            )
            for n in range(3)
        ]
        balancer_host = {"Authorization": f"Bearer {TOKEN}", "Host": f"{BALANCER}:8080"}

        # One agent's identical calls, each to the next replica: judged as one guard alone judges them.
        async with agent(guards, "agent-1") as looping:
            looped = await looping.actions("same", len(ALONE))
        reached = counted_calls(log)
        with anyio.fail_after(20):
            after_abort = [
                await raw_call(g.mcp_url, "echo", {"text": "other"}, {KEY_HEADER: "agent-1", **balancer_host})
                for g in guards
            ]
            bystander = [
                await raw_call(g.mcp_url, "echo", {"text": "same"}, {KEY_HEADER: "agent-0", **balancer_host})
                for g in guards
            ]
            foreign = await raw_call(
                guards[0].mcp_url,
                "echo",
                {"text": "x"},
                {KEY_HEADER: "agent-0", "Authorization": f"Bearer {TOKEN}", "Host": "elsewhere.example:8080"},
            )

        # Redis dies: calls keep flowing, each replica judging on what it saw; /readyz says degraded.
        before_outage = counted_calls(log)
        await anyio.to_thread.run_sync(redis_server.stop)
        async with agent(guards, "agent-2") as during:
            outage = await during.actions("same", 6)
        with anyio.fail_after(20):
            degraded = [await readyz(g) for g in guards]
        reached_in_outage = counted_calls(log) - before_outage

        # Redis is back (empty, same port): detection resumes, shared again.
        await anyio.to_thread.run_sync(redis_server.start)
        async with agent(guards, "agent-2") as after:
            resumed = await after.actions("same", 5)
        with anyio.fail_after(20):
            recovered = [await readyz(g) for g in guards]

        # The probes of the deploy files, run against a replica.
        port = guards[0].port
        compose_health = await probe(service(GUARD)["healthcheck"]["test"][1:], port, {})
        readiness = container(kube("Deployment", "mcp-loop-guard"))["readinessProbe"]["exec"]["command"]
        ready_probe = await probe(readiness, port, {"LOOP_GUARD_AUTH_TOKEN": TOKEN})
        named_token_probe = await probe(readiness, port, {"LOOP_GUARD_AUTH_TOKENS": f"ops:{TOKEN},ci:another"})
        wrong_token_probe = await probe(readiness, port, {"LOOP_GUARD_AUTH_TOKEN": "not-it"})
        with anyio.fail_after(20):
            kubelet_liveness = await http_get(guards[0].url("/healthz"), {"Host": f"10.0.0.7:{port}"})
            tokenless_readyz = await http_get(guards[0].url("/readyz"), {"Host": "localhost"})

    assert [verdict for verdict, _ in looped] == ALONE
    assert all(result[0] == "same" for _, result in looped[:4]), "the first four got the real result"
    assert reached == 4, "the refused calls reached no replica's upstream"
    for response in after_abort:
        assert response.status_code == 429, response.text
        assert 1 <= int(response.headers["retry-after"]) <= 121, response.headers
    assert [response.status_code for response in bystander] == [200, 200, 200]
    assert [payload_verdict(payload_for(response, 1)) for response in bystander] == ALONE[:3], "another agent"
    assert foreign.status_code == 421, foreign.text
    assert outage == [(None, ["same"])] * 6, "each replica saw two calls alone: none warned, all served"
    assert reached_in_outage == 6
    for status in degraded:
        assert (status["code"], status["ready"], status["store"]) == (
            200,
            True,
            {"kind": "redis", "status": "degraded"},
        )
    assert [verdict for verdict, _ in resumed] == ALONE[:5]
    for status in recovered:
        assert (status["code"], status["store"]) == (200, {"kind": "redis", "status": "ok"})
    assert compose_health == 0
    assert ready_probe == 0
    assert named_token_probe == 0, "the probe takes the first of LOOP_GUARD_AUTH_TOKENS"
    assert wrong_token_probe != 0
    assert kubelet_liveness.status_code == 200
    assert tokenless_readyz.status_code == 401, "why the readiness probe runs in the container instead of httpGet"
