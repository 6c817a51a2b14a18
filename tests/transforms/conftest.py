"""Transforms tests run kernels under the Triton interpreter: import the harness (which sets
TRITON_INTERPRET=1) before anything imports triton."""

from tests.transforms import harness  # noqa: F401
