"""A stored identity or cost record judged again from what it measured (samples, counters, engine logs) with
this checkout's rules: for a level-1.5 rule fixed after the run. The record's own verdict stays as it was;
the new one goes to recheck.json beside it, with the commit that judged it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.serving import profiles
from sparkserve_lab import gzfile, metadata
from sparkserve_lab.levels.matrix import Matrix, common_settings
from sparkserve_lab.runstore import METADATA, read_json, write_json
from sparkserve_lab.speculative import cost, identity
from sparkserve_lab.speculative.runs import (
    CONTROL_SAMPLES,
    KIND_COST,
    KIND_IDENTITY,
    arm_overrides,
    configurations,
    fail_invalid_arms,
    invalid_starts,
    level15,
    without_speculation,
)

RECHECK = "recheck.json"


def _identity(record: Path, meta: dict[str, Any], resolve: Any, root: Path) -> dict[str, Any]:
    def samples(name: str) -> list[identity.Sample]:
        return [identity.Sample.from_dict(d) for d in read_json(record / name)]

    overrides = meta.get("overrides") or {}
    margin = float(meta.get("tie_margin", identity.DEFAULT_TIE_MARGIN))
    reference = samples("samples-reference.json")
    verdict = identity.compare(reference, samples("samples-speculative.json"),
                               (meta.get("counters") or {}).get("drafts"), margin)
    checked = {"reference": level15(resolve(without_speculation(overrides)), record / "engine-reference.log",
                                    root),
               "speculative": level15(resolve(overrides), record / "engine-speculative.log", root)}
    fail_invalid_arms(verdict, checked)
    out = {"ok": verdict.ok, "verdict": verdict.to_dict(), "level_1_5": checked}
    if gzfile.existing(record / CONTROL_SAMPLES).is_file():  # records made before the control have none
        out["control"] = identity.control(reference, samples(CONTROL_SAMPLES), margin).to_dict()
    return out


def _cost(record: Path, meta: dict[str, Any], resolve: Any, root: Path) -> dict[str, Any]:
    overrides = meta.get("overrides") or {}
    served = configurations(meta.get("ks") or [], meta.get("modes") or [])
    extra = {(k, mode): over for k, mode, over in served}
    checked: list[dict[str, Any]] = []
    points = []
    for p in meta["points"]:
        k, mode = int(p["k"]), str(p["mode"])
        over = arm_overrides(overrides, mode, extra[(k, mode)])
        checked.append({"k": k, "mode": mode,
                        "level_1_5": level15(resolve(over), record / f"engine-k{k}-{mode}.log", root)})
        points.append(cost.Point(k, mode, float(p["tok_s"]), float(p["acceptance_length"])))
    invalid = invalid_starts(checked)
    table = [] if invalid else cost.costs(points)
    return {"ok": not invalid, "invalid": invalid, "level_1_5": checked,
            "break_even": {c.k: c.break_even() for c in table}, "estimates": cost.estimates(table),
            "table": cost.markdown(table, str(meta.get("hardware"))) if table else None}


def recheck(record: Path, settings: Matrix, root: Path) -> dict[str, Any]:
    """Judge `record` again (settings: the matrix it was served with); writes and returns recheck.json."""
    meta: dict[str, Any] = json.loads((record / METADATA).read_text())
    kind = meta.get("kind")

    def resolve(overrides: dict[str, str]) -> profiles.Resolved:
        served = meta.get("profile_env")
        if not isinstance(served, dict):
            raise SparkserveError(f"{record}: the record does not say which profile values it served "
                                  "(`profile_env`): it cannot be judged again")
        return profiles.resolve(str(meta["profile"]), root, common_settings(settings), overrides,
                                {str(k): str(v) for k, v in served.items()})

    if kind == KIND_IDENTITY:
        result = _identity(record, meta, resolve, root)
    elif kind == KIND_COST:
        result = _cost(record, meta, resolve, root)
    else:
        raise SparkserveError(f"{record}: a {kind!r} record; recheck takes speculative identity and cost "
                              "records")
    was = meta.get("verdict", {}).get("ok") if kind == KIND_IDENTITY else meta.get("valid")
    out = {"kind": kind, "rechecked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "commit": metadata.repo_info(root).get("commit"), "rules": "lab/configs/engine-kernels.toml",
           "was": was, **result}
    write_json(record / RECHECK, out)
    return out
