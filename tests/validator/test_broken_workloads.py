"""A broken workload (its trusted ``reference.py``) is a request error naming the file, never a verdict on the
candidate: ``errors.WorkloadError`` from ``LocalValidator``, ``error: ...`` and exit code 2 from the CLI, a
422 from the service. CPU, interpreter, tiny shapes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klineage.cli.main import app
from klineage.validator import LocalValidator, ValidationRequestError
from klineage.validator.errors import WorkloadError

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"
KERNEL = (ROWSUM / "kernel.py").read_text()

GOOD = '''import torch


def make_inputs(shape, dtype, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn((shape["rows"], shape["cols"]), generator=g, device=device),)


def reference(x):
    return x.double().sum(dim=-1).to(x.dtype)


def vendor(x):
    return x.sum(dim=-1)
'''

# name: (reference.py text, cpu shape, the message's telling part)
BROKEN: dict[str, tuple[str, str, str]] = {
    "noref": (GOOD.replace("def make_inputs(", "def make_inputs_x("), "rows = 2, cols = 8",
              "reference.py defines no make_inputs() (a workload's reference.py must define make_inputs"),
    "refsyntax": (GOOD.replace("def reference(x):", "def reference(x)"), "rows = 2, cols = 8",
                  "reference.py: line 9: SyntaxError: expected ':'"),
    "refimport": ("import klineage_no_such_module_xyz\n" + GOOD, "rows = 2, cols = 8",
                  "reference.py: import failed: ModuleNotFoundError: No module named 'klineage_no_such_module_xyz'"),
    "cpu_key": (GOOD, "ROWS = 2, cols = 8",
                "raised KeyError 'rows' (the manifest's shapes must use the keys make_inputs reads)"),
    "ref_tensor": (GOOD.replace("return (torch.randn(", "return torch.randn(").replace("device),)", "device)"),
                   "rows = 2, cols = 8",
                   "reference.py: make_inputs returned a Tensor; expected a tuple of the inputs run() takes"),
}


def _workload(root: Path, name: str, reference: str, cpu_shape: str = "rows = 2, cols = 8") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "manifest.toml").write_text(f'''[workload]
name = "{name}"
family = "row-reduction"
description = "A workload of the validator's tests: row sums."
role = "heldout"
kernel = "kernel.py"
reference = "reference.py"
dtypes = ["fp32"]
shapes = [{{ rows = 64, cols = 64 }}]
cpu_shapes = [{{ {cpu_shape} }}]

[workload.tolerance]
fp32 = 1e-5
''')
    (folder / "reference.py").write_text(reference)
    (folder / "kernel.py").write_text(KERNEL)
    return folder


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("workloads")
    for name, (reference, shape, _) in BROKEN.items():
        _workload(root, name, reference, shape)
    _workload(root, "good", GOOD)
    return root


@pytest.fixture(scope="module")
def validator() -> LocalValidator:
    return LocalValidator(cache=None, device="cpu", seeds=1)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_workload_is_a_request_error_naming_the_file(name: str, workloads: Path,
                                                               validator: LocalValidator) -> None:
    with pytest.raises(WorkloadError) as caught:
        validator.validate(KERNEL, workloads / name)
    message = str(caught.value)
    assert isinstance(caught.value, ValidationRequestError) and caught.value.status == 422
    assert BROKEN[name][2] in message, message
    assert message.startswith(str((workloads / name / "reference.py").resolve())), message
    if name == "cpu_key":  # the compile gate's cases, made first, find it
        assert "reference.py: make_inputs({'ROWS': 2, 'cols': 8}, 'fp32', seed 0) raised" in message, message
    assert "\n" not in message


@pytest.mark.parametrize("gate", ["correctness", "integrity"])
@pytest.mark.parametrize("name", ["cpu_key", "ref_tensor"])
def test_each_checking_gate_blames_the_workload_not_the_candidate(name: str, gate: str, workloads: Path,
                                                                   validator: LocalValidator) -> None:
    with pytest.raises(WorkloadError) as caught:  # no compile gate: the gate's own make_inputs call finds it
        validator.validate(KERNEL, workloads / name, gates=[gate])
    message = str(caught.value)
    seed = 1 if gate == "correctness" else 4242
    assert f"seed {seed}" in message and "run()" not in message.split("expected")[0], message


def test_a_correct_workload_still_passes(workloads: Path, validator: LocalValidator) -> None:
    result = validator.validate(KERNEL, workloads / "good", gates=["compile", "correctness", "integrity"])
    assert result.verdict == "pass", result.to_dict()


def test_the_trusted_reference_passes_every_other_attribute_through(workloads: Path) -> None:
    from klineage.validator.trusted import TrustedReference, load_trusted_reference

    module = load_trusted_reference(workloads / "good" / "reference.py")
    wrapped = TrustedReference(module)
    assert wrapped.reference is module.reference and wrapped.vendor is module.vendor
    assert wrapped.__file__ == module.__file__ and getattr(wrapped, "flops", None) is None
    made = wrapped.make_inputs({"rows": 2, "cols": 3}, "fp32", 0, device="cpu")
    assert isinstance(made, tuple) and made[0].shape == (2, 3)


def test_a_device_memory_error_in_make_inputs_stays_what_it_was(tmp_path: Path) -> None:
    from klineage.validator.trusted import TrustedReference, load_trusted_reference

    oom = "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')\n"
    folder = _workload(tmp_path, "oom", GOOD.replace("    g = torch", oom + "    g = torch"))
    wrapped = TrustedReference(load_trusted_reference(folder / "reference.py"))
    with pytest.raises(torch_oom()):  # the gate fails with it and validate_job retries the job alone
        wrapped.make_inputs({"rows": 2, "cols": 3}, "fp32", 0, device="cpu")


def torch_oom() -> type[BaseException]:
    import torch

    return torch.OutOfMemoryError


@pytest.mark.parametrize("json_out", [False, True])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_cli_says_error_and_exits_2_without_a_traceback(name: str, json_out: bool, workloads: Path,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_VALIDATOR_CACHE", str(tmp_path / "cache.sqlite"))
    args = ["validate", str(workloads / name / "kernel.py"), "-w", str(workloads / name), "--cpu",
            "--gates", "static,correctness"] + (["--json"] if json_out else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert f"error: {(workloads / name / 'reference.py').resolve()}" in result.output
    assert BROKEN[name][2] in result.output
    assert '"verdict"' not in result.output  # no gate result document: there is no verdict


def test_the_installed_cli_prints_one_line(workloads: Path, tmp_path: Path) -> None:
    env = {**os.environ, "KLINEAGE_VALIDATOR_CACHE": str(tmp_path / "cache.sqlite")}
    run = subprocess.run([sys.executable, "-m", "klineage.cli.main", "validate",
                          str(workloads / "noref" / "kernel.py"), "-w", str(workloads / "noref"), "--cpu", "--json"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and BROKEN["noref"][2] in lines[0], run.stderr


def test_the_service_answers_422_and_the_http_client_raises_a_request_error(workloads: Path,
                                                                          tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from klineage.validator import HttpValidator
    from klineage.validator.service import ServiceConfig, create_app

    config = ServiceConfig(workload_roots=[workloads], cache_path=tmp_path / "cache.sqlite", device="cpu")
    client: Any
    with TestClient(create_app(config)) as client:
        answer = client.post("/v1/validate", json={"candidate": KERNEL, "workload": "noref",
                                                   "gates": ["static", "correctness"], "wait_s": 120})
        assert answer.status_code == 422, answer.text
        assert BROKEN["noref"][2] in answer.json()["error"]
        http = HttpValidator("http://testserver", client=client, poll_s=0.05)
        with pytest.raises(ValidationRequestError, match="defines no make_inputs"):
            http.validate(KERNEL, "noref", gates=["static", "correctness"])
