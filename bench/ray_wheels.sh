#!/usr/bin/env bash
# Ray for the GPU machine, which does not have it: wheels for its Python (3.12, manylinux x86_64) in .whl/, small
# enough to carry (the `device` tool carries 64 MiB a call, working tree included; Ray's wheel is 79 MB). What the
# validator never uses is taken out of the wheel, with its RECORD lines: the jar for Java workers (32 MB), the
# dashboard's web client, and the libraries on top of Ray core (rllib, data, serve, llm). Ray's
# needs that the machine's image lacks (jsonschema and its own) come too; the rest (msgpack, protobuf, grpcio,
# aiohttp's family, click, filelock, pyyaml, requests) is there. Run here, then carry ".whl":
#
#   bash bench/ray_wheels.sh
#   run(command="... bash bench/device_call.sh ...", carry=[".eval", ".whl"])   # device_call.sh installs .whl
#
# The device tool copies the working tree and the carried paths, 64 MiB in all: with the committed gate caches (about
# 29 MiB of tracked files in December 2026) and these wheels (38 MiB) that is too much. For a call that needs Ray
# but not the caches (tests/validator/test_ray_gpu.py), move the *.sqlite files out of the tree before the call and
# put them back after (`git checkout -- '*.sqlite'`).
#
# TARGET_PYTHON=3.11 builds them for another Python (to try them here). The version is the one this checkout's venv has (pyproject's ray extra), so both ends speak the same Ray.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
RAY_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("ray"))')
rm -rf .whl && mkdir -p .whl
download() {
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$@"
}
download "ray==$RAY_VERSION"
for name in jsonschema jsonschema-specifications referencing rpds-py; do
  download "$name==$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")"
done
# what the validator never uses out of the wheel (and out of its RECORD, which pip checks)
"$PY" - <<'EOF'
import pathlib, zipfile
UNUSED = ("ray/jars/", "ray/dashboard/client/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/llm/")
wheel = next(pathlib.Path(".whl").glob("ray-*.whl"))
slim = wheel.with_suffix(".slim")
with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
    for item in src.infolist():
        if item.filename.startswith(UNUSED):
            continue
        data = src.read(item.filename)
        if item.filename.endswith(".dist-info/RECORD"):
            data = b"".join(line + b"\n" for line in data.splitlines() if not line.decode().startswith(UNUSED))
        dst.writestr(item, data)
slim.replace(wheel)
EOF
du -sh .whl
ls .whl
