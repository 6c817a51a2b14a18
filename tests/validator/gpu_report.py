"""Where GPU tests leave their measured figures: ``$KLINEAGE_GPU_OUT/<name>.json`` when that is set.

Each record carries the GPU, torch/triton versions and the date, so that a figure is never separated
from where and when it was measured.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def stamp() -> dict[str, Any]:
    """GPU name, versions and UTC date of this process's device."""
    import torch
    import triton

    return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
            "torch": str(torch.__version__), "triton": str(triton.__version__),
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def write(name: str, data: dict[str, Any]) -> Path | None:
    """Write ``data`` (stamped) to ``$KLINEAGE_GPU_OUT/name.json``; None when the variable is unset."""
    folder = os.environ.get("KLINEAGE_GPU_OUT")
    if not folder:
        return None
    path = Path(folder) / f"{name}.json"
    path.write_text(json.dumps({**stamp(), **data}, indent=2, default=str))
    return path
