"""Properties of the Dockerfile and compose.yaml that docker need not run to check (issue 27)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
COMPOSE = (ROOT / "compose.yaml").read_text()


def _healthcheck() -> str:
    match = re.search(r"^HEALTHCHECK .*?(?<!\\)\n", DOCKERFILE, re.MULTILINE | re.DOTALL)
    assert match, "the image has a HEALTHCHECK"
    return match.group(0)


def test_the_health_check_asks_liveness_on_the_configured_port():
    check = _healthcheck()
    assert "/healthz" in check and "/readyz" not in check, "a Slack outage must not mark every replica unhealthy"
    assert "COUNTERSIGN_PORT" in check and ":3000/" not in check
    assert "COUNTERSIGN_PORT=3000" in DOCKERFILE
    entrypoint = next(line for line in DOCKERFILE.splitlines() if line.startswith("ENTRYPOINT"))
    assert "$COUNTERSIGN_PORT" in entrypoint and entrypoint.count("exec countersign serve") == 1


def test_compose_has_no_literal_password_and_publishes_no_port_in_socket_mode():
    urls = re.findall(r"postgresql://[^\s]+", COMPOSE)
    assert urls and all("${POSTGRES_PASSWORD:?" in url for url in urls)
    assert re.search(r"POSTGRES_PASSWORD: \$\{POSTGRES_PASSWORD:\?", COMPOSE)
    assert not re.search(r"^\s+ports:", COMPOSE, re.MULTILINE), "Socket Mode: nothing to publish; /metrics stays in"
    assert "Socket Mode" in COMPOSE and "load balancer" in COMPOSE


def test_every_compose_service_runs_under_an_init_process():
    services = COMPOSE.split("\nservices:\n", 1)[1].split("\nnetworks:", 1)[0]
    names = re.findall(r"^  ([a-z][\w-]*):\n", services, re.MULTILINE)
    assert names == ["postgres", "countersign-a", "countersign-b"]
    assert "init: true" in COMPOSE.split("\nservices:\n", 1)[0], "the shared replica settings"
    assert "init: true" in services.split("countersign-a:")[0], "postgres"


def test_the_image_installs_only_from_the_hashed_lock_file_which_pins_every_runtime_dependency():
    import tomllib

    assert "--require-hashes -r requirements.lock" in DOCKERFILE
    assert "--no-deps ." in DOCKERFILE, "countersign itself must not pull unpinned dependencies"
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {m.group(1).lower().replace("_", "-") for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==", lock, re.MULTILINE)}
    blocks = re.split(r"\n(?=[A-Za-z0-9_.\-]+==)", lock)
    assert all("--hash=sha256:" in block for block in blocks[1:]), "every pin carries its hashes"
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0].lower().replace("_", "-") for dep in dependencies}
    missing = names - pinned
    assert not missing, f"requirements.lock lacks {sorted(missing)}: rerun pip-compile (docs/deployment.md)"
