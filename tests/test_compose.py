"""docker-compose.yml agrees with the code (Docker does not run here, so the file is checked, not run):
services, images, ports, environment names, commands, healthchecks and the GPU reservation; and a
plain `docker compose up` on a CPU host gives a populated knowledge base: no GPU reservation outside
the `gpu` profile, a one-shot kb-init that ingests the lineages baked into the image before the api
starts, named volumes only, a slim CPU image for the api."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
ONE_SHOT = {"kb-init"}  # services that run to completion (no healthcheck, never restarted)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


class RecordingEnv(dict[str, str]):
    """A mapping that remembers which keys were read."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)


def _env_names_read_by_neo4j_store() -> set[str]:
    from klineage.kb.neo4j_store import Neo4jStore

    env = RecordingEnv()

    class Probe(Neo4jStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # no connection: only the names matter
            self.args = args

    Probe.from_env(env)
    return env.read


def _ports(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for item in service.get("ports", []):
        parts = str(item).split(":")
        out[int(parts[-1])] = int(parts[-2])
    return out


def _command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(x) for x in command]


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return " ".join(test) if isinstance(test, list) else str(test)


def _stages(text: str) -> dict[str, str]:
    """Dockerfile stage name -> its text (from its FROM line to the next)."""
    parts = re.split(r"^(?=FROM )", text, flags=re.M)
    out = {}
    for part in parts:
        match = re.match(r"FROM \S+(?: AS (\S+))?", part)
        if match:
            out[match.group(1) or ""] = part
    return out


def _instructions(text: str) -> str:
    """Dockerfile text without comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_services_and_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"neo4j", "kb-init", "api", "validator"}
    for name, service in services.items():
        if name in ONE_SHOT:
            assert service.get("restart") == "no" and "healthcheck" not in service, name
            continue
        assert "healthcheck" in service, name
        assert service["healthcheck"]["test"], name
    assert services["kb-init"]["depends_on"] == {"neo4j": {"condition": "service_healthy"}}
    assert services["api"]["depends_on"] == {"neo4j": {"condition": "service_healthy"},
                                             "kb-init": {"condition": "service_completed_successfully"}}


def test_a_plain_up_needs_no_gpu(compose: dict[str, Any]) -> None:
    services = compose["services"]
    default = {name for name, service in services.items() if not service.get("profiles")}
    assert default == {"neo4j", "kb-init", "api"}
    assert services["validator"]["profiles"] == ["gpu"]
    for name in default:
        assert "deploy" not in services[name], name  # no device reservation a CPU host cannot meet
        for dependency in services[name].get("depends_on", {}):
            assert dependency in default, (name, dependency)


def test_volumes_are_named_and_the_image_declares_none(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            assert source in declared, (name, volume)  # a named volume, not a host path or an anonymous one
            assert target.startswith("/")
            used.add(source)
    assert used == declared
    assert not re.search(r"^VOLUME\b", _instructions(DOCKERFILE.read_text(encoding="utf-8")), re.M)


def test_kb_init_ingests_the_lineages_baked_into_the_image(compose: dict[str, Any]) -> None:
    from typer.main import get_command

    from klineage.cli import kb_commands
    from klineage.cli.main import app

    services = compose["services"]
    init = services["kb-init"]
    command = _command(init)
    assert command[:2] == ["klineage", "ingest"] and "ingest" in get_command(app).commands  # type: ignore[attr-defined]
    folder = command[2]
    env = {k: v for k, v in init["environment"].items() if k != "HF_HUB_OFFLINE"}
    api_env = services["api"]["environment"]
    assert env == {k: v for k, v in api_env.items() if k.startswith(("NEO4J_", "KLINEAGE_STORE"))}
    text = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    base = _stages(text)["base"]
    # the measured lineages are copied where kb-init reads them, and the CLI is pointed there too
    copies = re.findall(r"^COPY (\S+) (\S+)", base, re.M)
    source = next(src for src, dst in copies if src.startswith("lineages/"))
    assert sorted(ROOT.glob(source)) == sorted((ROOT / "lineages").glob("*.lineage.json")) != []
    workdir = re.search(r"^WORKDIR (\S+)", base, re.M).group(1)  # type: ignore[union-attr]
    dest = next(dst for src, dst in copies if src == source)
    assert str(Path(workdir) / dest).rstrip("/") == folder
    assert f"{kb_commands.LINEAGES_ENV}={folder}" in base
    ignored = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    assert not {"lineages", "lineages/", "*.json", "**/*.json"} & set(ignored)


def test_the_api_image_is_slim_and_the_validator_image_has_cuda(compose: dict[str, Any]) -> None:
    services = compose["services"]
    stages = _stages(_instructions(DOCKERFILE.read_text(encoding="utf-8")))
    assert {"base", "api", "validator"} <= set(stages)
    for name in ("kb-init", "api"):
        assert services[name]["build"]["target"] == "api"
        assert services[name]["image"] == services["api"]["image"]
    assert services["validator"]["build"]["target"] == "validator"
    assert services["validator"]["image"] != services["api"]["image"]
    api = stages["api"]
    assert "download.pytorch.org/whl/cpu" in api and '"torch==2.11.0"' in api
    assert "triton" in api and "pip install --no-deps ." in api  # every dependency but torch and triton
    assert "gcc" not in api and "nvidia" not in api
    validator = stages["validator"]
    assert "pip install ." in validator and "gcc" in validator
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"torch==2.11.0"' in pyproject  # the CPU wheel pins the same version


def test_neo4j_service_matches_the_design_and_the_store(compose: dict[str, Any]) -> None:
    from klineage.kb import neo4j_store

    neo4j = compose["services"]["neo4j"]
    assert neo4j["image"] == "neo4j:5.26-community"
    design = (ROOT.parent / "shared" / "DESIGN.md")
    if design.is_file():
        assert neo4j["image"] in design.read_text(encoding="utf-8")
    ports = _ports(neo4j)
    default_bolt = urlparse(neo4j_store.DEFAULT_URI).port
    assert ports == {7474: 7474, 7687: 7687} and default_bolt == 7687
    assert {"/data", "/logs"} <= {str(v).split(":")[1] for v in neo4j["volumes"]}
    auth = neo4j["environment"]["NEO4J_AUTH"]
    assert auth.startswith("neo4j/${NEO4J_PASSWORD")
    health = _healthcheck_text(neo4j)
    assert "cypher-shell" in health and "7687" in health and "RETURN 1" in health
    assert "NEO4J_AUTH" in health  # the healthcheck logs in with the configured password


def test_api_talks_to_neo4j_with_the_names_the_code_reads(compose: dict[str, Any]) -> None:
    from klineage.kb import settings

    services = compose["services"]
    env = services["api"]["environment"]
    assert env[settings.STORE_ENV] == "neo4j" and "neo4j" in settings.STORE_KINDS
    neo4j_names = {k for k in env if k.startswith("NEO4J_")}
    assert neo4j_names == _env_names_read_by_neo4j_store() == {"NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD",
                                                               "NEO4J_DATABASE"}
    uri = urlparse(env["NEO4J_URI"])
    assert uri.scheme in ("bolt", "neo4j") and uri.hostname == "neo4j"
    assert uri.port in _ports(services["neo4j"])
    user, _, password = services["neo4j"]["environment"]["NEO4J_AUTH"].partition("/")
    assert env["NEO4J_USER"] == user and env["NEO4J_PASSWORD"] == password
    assert env["NEO4J_DATABASE"] == "neo4j"  # Community edition has only this database
    from klineage.graphql.schema import TOKEN_ENV

    assert TOKEN_ENV in env


def test_api_command_port_and_health_route(compose: dict[str, Any], tmp_path: Path) -> None:
    from typer.main import get_command

    from klineage.cli.main import app

    api = compose["services"]["api"]
    command = _command(api)
    assert command[:2] == ["klineage", "serve"]
    cli = get_command(app)
    serve = cli.commands["serve"]  # type: ignore[attr-defined]
    assert {"--host", "--port"} <= {opt for p in serve.params for opt in p.opts}
    port = int(_option(command, "--port"))
    assert _option(command, "--host") == "0.0.0.0"
    assert _ports(api) == {port: port}
    health = _healthcheck_text(api)
    assert f":{port}/healthz" in health

    from klineage.graphql.app import create_app
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.service import KnowledgeBase

    routes = {getattr(r, "path", None) for r in create_app(KnowledgeBase(EmbeddedStore(tmp_path))).routes}
    assert "/healthz" in routes


def test_validator_service_gpu_port_and_environment(compose: dict[str, Any]) -> None:
    from typer.main import get_command

    from klineage.cli.main import app
    from klineage.validator import service as validator_service

    validator = compose["services"]["validator"]
    command = _command(validator)
    assert command[:3] == ["klineage", "validator", "serve"]
    group = get_command(app).commands["validator"]  # type: ignore[attr-defined]
    serve = group.commands["serve"]
    port_param = next(p for p in serve.params if "--port" in p.opts)
    port = int(_option(command, "--port"))
    assert port == port_param.default == 8100
    assert _ports(validator) == {port: port}
    assert f":{port}/healthz" in _healthcheck_text(validator)
    assert "/healthz" in {getattr(r, "path", None) for r in validator_service.create_app().routes}
    devices = validator["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    source = Path(validator_service.__file__).read_text(encoding="utf-8")
    for name in validator["environment"]:
        if name.startswith("KLINEAGE_"):
            assert f'"{name}"' in source, name
    cache = validator["environment"]["KLINEAGE_VALIDATOR_CACHE"]
    assert any(cache.startswith(str(v).split(":")[1]) for v in validator["volumes"])


def test_images_build_from_the_dockerfile(compose: dict[str, Any]) -> None:
    for name in ("kb-init", "api", "validator"):
        build = compose["services"][name]["build"]
        dockerfile = ROOT / build["context"] / build["dockerfile"]
        assert dockerfile.is_file(), dockerfile
        text = dockerfile.read_text(encoding="utf-8")
        assert re.search(r"^FROM python:3\.1[1-9]", text, re.M)
        assert "pip install ." in text and "HF_HUB_OFFLINE=1" in text
        for copied in re.findall(r"^COPY (\S+)", text, re.M):
            if not copied.startswith("--"):
                assert list(ROOT.glob(copied)), copied
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'klineage = "klineage.cli.main:app"' in pyproject
