"""The manifest loader accepts DESIGN.md's format and names file, key and expectation on every error."""

from __future__ import annotations

from pathlib import Path

import pytest

from klineage.schema.errors import ManifestError
from klineage.schema.manifest import load_manifest

GOOD = """
[workload]
name = "rowsum"
family = "reduction"
description = "Sum of each row"
role = "heldout"
kernel = "naive.py"
reference = "reference.py"
dtypes = ["fp32", "bf16"]
shapes = [{ rows = 4096, cols = 1000 }, { rows = 8, cols = 65536 }]
cpu_shapes = [{ rows = 4, cols = 33 }]

[workload.tolerance]
fp32 = 1e-5
bf16 = 2e-2
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "naive.py").write_text("def run(): ...\n")
    (tmp_path / "reference.py").write_text("def reference(): ...\n")
    (tmp_path / "manifest.toml").write_text(text)
    return tmp_path


def test_good_manifest_loads(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, GOOD))
    assert m.name == "rowsum" and m.role == "heldout"
    assert m.dtypes == ("fp32", "bf16")
    assert m.shapes[1] == {"rows": 8, "cols": 65536}
    assert m.cpu_shapes == ({"rows": 4, "cols": 33},)
    assert m.tolerance == {"fp32": 1e-5, "bf16": 2e-2}
    assert m.kernel_path == (tmp_path / "naive.py").resolve()


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('role = "heldout"', 'role = "student"', "workload.role"),
        ('dtypes = ["fp32", "bf16"]', 'dtypes = ["fp64"]', "workload.dtypes"),
        ('kernel = "naive.py"', 'kernel = "missing.py"', "workload.kernel"),
        ("cpu_shapes = [{ rows = 4, cols = 33 }]", "cpu_shapes = []", "workload.cpu_shapes"),
        ("{ rows = 8, cols = 65536 }", "{ rows = 8, cols = -1 }", "workload.shapes[1].cols"),
        ("bf16 = 2e-2", "bf16 = 0", "workload.tolerance.bf16"),
        ('name = "rowsum"', 'name = "rowsum"\ncolour = "red"', "workload.colour"),
        ('name = "rowsum"\n', "", "workload.name"),
    ],
)
def test_bad_manifest_names_the_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert old in GOOD
    write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.key == key
    assert str(tmp_path / "manifest.toml") in str(info.value)
    assert "expected" in str(info.value)


def test_invalid_toml_and_missing_folder(tmp_path: Path) -> None:
    write(tmp_path, "[workload\nname=")
    with pytest.raises(ManifestError, match="valid TOML"):
        load_manifest(tmp_path)
    with pytest.raises(ManifestError, match="not found"):
        load_manifest(tmp_path / "nowhere")


def test_unknown_top_level_table(tmp_path: Path) -> None:
    write(tmp_path, GOOD + "\n[extra]\nx = 1\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.key == "extra"


def test_roles_table_is_optional_and_checked(tmp_path: Path) -> None:
    assert load_manifest(write(tmp_path, GOOD)).roles is None
    declared = GOOD.replace("[workload.tolerance]", '[workload.roles]\nrows = "rows"\ncols = "reduce"\n\n'
                            "[workload.tolerance]")
    assert load_manifest(write(tmp_path, declared)).roles == {"rows": "rows", "cols": "reduce"}
    for bad, key in (('cols = "reduce"', "workload.roles.cols"), ('colz = "reduce"', "workload.roles.colz")):
        text = declared.replace('cols = "reduce"', bad if key.endswith("colz") else 'cols = "columns"')
        write(tmp_path, text)
        with pytest.raises(ManifestError) as info:
            load_manifest(tmp_path)
        assert info.value.key == key and str(tmp_path / "manifest.toml") in str(info.value)


def test_a_flag_written_as_a_number_says_to_write_true_or_false(tmp_path: Path) -> None:
    flagged = GOOD.replace("{ rows = 8, cols = 65536 }", "{ rows = 8, cols = 65536, masked = true }").replace(
        "[workload.tolerance]", '[workload.roles]\nmasked = "flag"\n\n[workload.tolerance]')
    assert load_manifest(write(tmp_path, flagged)).shapes[1]["masked"] is True
    write(tmp_path, flagged.replace("masked = true }", "masked = 0 }"))
    with pytest.raises(ManifestError) as info:
        load_manifest(tmp_path)
    assert info.value.key == "workload.shapes[1].masked" and "true or false" in str(info.value)
    assert "declares masked a flag" in str(info.value)
