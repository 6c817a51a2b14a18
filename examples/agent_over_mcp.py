"""An external agent that optimizes a held-out kernel through KLineage's MCP tools only.

The shape an LLM agent would use: plan_optimization -> (edit the code) -> validate_kernel ->
record_application, with search_skills for context. The code edit an LLM would write is made here
with KLineage's operator library (``klineage.agent.moves.apply_step``), the one step that is not an
MCP call. The server is launched over stdio (``klineage mcp``) unless ``--url`` names an HTTP one.

    python examples/agent_over_mcp.py heldout/scaled_softmax/naive.py --workload scaled_softmax \
        --validator-url http://127.0.0.1:8100 [--url http://127.0.0.1:8765/mcp --token $KLINEAGE_API_TOKEN]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from klineage.agent.moves import MoveStep, apply_step
from klineage.mcp.connect import call, http_client, stdio_client


def edit(source: str, steps: list[dict[str, Any]]) -> str | None:
    """Apply a planned move's steps to the source (what an LLM would write); None when nothing changed."""
    out = source
    for step in steps:
        changed = apply_step(out, MoveStep(step["operator"], step.get("params") or {}))
        if changed is not None:
            out = changed
    return None if out == source else out


async def optimize(client: Any, source: str, workload: str, budget: int) -> dict[str, Any]:
    """Plan, validate and record with MCP tools only; returns the best kernel and the trajectory."""
    async with client as c:
        found = await call(c, "search_skills", kernel_source=source, limit=5)
        print("skills:", ", ".join(f"{h['skill']['operator']} ({h['applicable']})" for h in found["hits"]))
        start = await call(c, "validate_kernel", kernel_source=source, workload=workload)
        print(f"start: {start['verdict']}", f"{start['speedup']:.3f}x" if start["speedup"] else "(not timed)")
        best, best_source, trajectory = start, source, []
        plan = await call(c, "plan_optimization", kernel_source=source, workload=workload)
        for move in plan["moves"][:budget]:
            candidate = edit(best_source, move["steps"])
            if candidate is None:
                continue
            result = await call(c, "validate_kernel", kernel_source=candidate, workload=workload)
            relative = (result["speedup"] / best["speedup"]) if result["speedup"] and best["speedup"] else None
            kept = result["verdict"] == "pass" and ((relative is None and (move["expectedGain"] or 0) >= 1.0)
                                                    or (relative is not None and relative > 1.01))
            outcome = ("improved" if kept else "no-gain") if result["verdict"] == "pass" else \
                f"fail-{result['failedGate']}"
            for step in move["steps"]:
                if step["skillId"] is None:
                    continue  # an operator the knowledge base holds no skill of: nothing to record against
                await call(c, "record_application", skill_id=step["skillId"], kernel_source=candidate,
                           outcome=outcome, speedup=relative, gate_result=result["gateResult"],
                           context=plan["context"])
            trajectory.append({"move": move["label"], "verdict": result["verdict"], "speedup": result["speedup"],
                               "kept": kept})
            print(f"{move['label']}: {result['verdict']}" + (" (kept)" if kept else ""))
            if kept:
                best, best_source = result, candidate
        return {"verdict": best["verdict"], "speedup": best["speedup"], "trajectory": trajectory,
                "source": best_source}


def main() -> None:
    """Parse the arguments, connect, optimize, print a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--workload", required=True, help="workload folder name, e.g. scaled_softmax")
    parser.add_argument("--url", help="HTTP MCP endpoint (default: launch `klineage mcp` over stdio)")
    parser.add_argument("--token", default=os.environ.get("KLINEAGE_API_TOKEN"))
    parser.add_argument("--validator-url", default=os.environ.get("KLINEAGE_VALIDATOR_URL"))
    parser.add_argument("--budget", type=int, default=3)
    parser.add_argument("--output", type=Path, help="write the best kernel here")
    args = parser.parse_args()
    env = {"KLINEAGE_VALIDATOR_URL": args.validator_url} if args.validator_url else {}
    client = http_client(args.url, args.token) if args.url else stdio_client(env)
    report = asyncio.run(optimize(client, args.kernel.read_text(encoding="utf-8"), args.workload, args.budget))
    if args.output:
        args.output.write_text(report["source"], encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "source"}, indent=2))


if __name__ == "__main__":
    main()
