"""deploy/kubernetes/ is valid Kubernetes, and runs agentik as documented.

Schema validation is ``kubernetes-validate`` (a test dependency from PyPI):
it ships the official API's JSON schemas, generated from Kubernetes' OpenAPI
document, for every minor version it supports, so it validates offline (no
schema is downloaded at test time, which this machine could not do). Strict
mode refuses fields the API does not have (a misspelled ``readinesProbe``
would otherwise be dropped silently by the API server). The manifests are
checked against the oldest and the newest version it ships.

Beyond the schema: the selectors of the Service and the PodDisruptionBudget
pick the Deployment's pods, the probes ask ``/health`` on the container's
port, the advertise address is the pod IP (downward API), the DSN and the
token come from the Secret's keys, and the environment the container gets
(with the example Secret's values) is a valid agentik configuration in which
every ``AGENTIK_*`` variable is one agentik reads.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from agentik.server import load_config
from agentik.server._config_sources import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
VERSIONS = sorted({all_versions()[0], all_versions()[-1]})


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                found.append((path.name, document))
    return found


def of_kind(kind: str) -> dict[str, Any]:
    (found,) = [d for _, d in documents() if d["kind"] == kind]
    return found


def test_the_manifests_are_the_documented_set() -> None:
    assert sorted(d["kind"] for _, d in documents()) == [
        "Deployment",
        "PodDisruptionBudget",
        "Secret",
        "Service",
    ]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "document"), documents(), ids=lambda v: str(v)[:30])
def test_each_manifest_is_valid_kubernetes(
    name: str, document: dict[str, Any], version: str
) -> None:
    kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda c: c.update(readinesProbe=c.pop("readinessProbe")), "readinesProbe"),
        (lambda c: c["ports"][0].update(containerPort="8080"), "'8080' is not of type 'integer'"),
        (lambda c: c["env"][0].update(valueFrom={"fieldRef": {}}), "'fieldPath' is a required"),
    ],
)
def test_the_validator_refuses_a_damaged_deployment(damage: Any, message: str) -> None:
    """The check can fail: a misspelled field, a wrong type, a missing one."""
    deployment = copy.deepcopy(of_kind("Deployment"))
    damage(deployment["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(kubernetes_validate.ValidationError) as refused:
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)
    assert message in str(refused.value.message)


def container() -> dict[str, Any]:
    (found,) = of_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = found
    return result


def test_the_selectors_pick_the_nodes() -> None:
    deployment = of_kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert of_kind("Service")["spec"]["selector"].items() <= labels.items()
    budget = of_kind("PodDisruptionBudget")["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1 and deployment["spec"]["replicas"] >= 2


def test_the_probes_ask_health_on_the_nodes_port() -> None:
    node = container()
    port_names = {p["name"]: p["containerPort"] for p in node["ports"]}
    assert node["command"][-2:] == ["--bind", f"0.0.0.0:{port_names['http']}"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check = node[probe]["httpGet"]
        assert check["path"] == "/health" and check["port"] in port_names, probe
        # /health answers within its probe's 2 s bound: the timeout leaves room
        assert node[probe]["timeoutSeconds"] >= 3, probe
    service_port = of_kind("Service")["spec"]["ports"][0]
    assert service_port["targetPort"] in port_names


def environment(secret: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet makes it (the pod IP
    10.1.2.3), with ``secret``'s values."""
    env: dict[str, str] = {}
    for variable in container()["env"]:
        source = variable.get("valueFrom")
        if source is None:
            value = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], variable["value"])
        elif "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "status.podIP"
            value = "10.1.2.3"
        else:
            reference = source["secretKeyRef"]
            assert reference["name"] == of_kind("Secret")["metadata"]["name"]
            value = secret[reference["key"]]
        env[variable["name"]] = value
    return env


def test_the_environment_is_a_valid_configuration() -> None:
    secret = of_kind("Secret")["stringData"]
    env = environment(secret)
    known = {s.env for s in SETTINGS if s.env is not None}
    unknown = {n for n in env if n.startswith("AGENTIK_")} - known
    assert not unknown, f"agentik reads no {sorted(unknown)}"
    config = load_config(env=env, overrides={("server", "bind"): container()["command"][-1]})
    assert config.advertise_url == "http://10.1.2.3:8080"
    assert config.database == secret["database-url"]
    assert config.auth_token == secret["auth-token"]
    assert config.lease_seconds == 20
    assert config.limits.keepalive_timeout == 300
    assert config.readers == 4
    grace = of_kind("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    stop = int(container()["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert grace > stop + config.limits.graceful_timeout, "the drain fits before SIGKILL"
