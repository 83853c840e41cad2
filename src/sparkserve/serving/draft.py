"""The Eagle3 draft before vLLM starts: it is where SPECULATIVE_DRAFT says (a folder, or the Hugging Face
cache when offline), and its config.json fits the target's (serving/speculative.py). vLLM itself would
find either only after loading the 65 GB target, or not at all (a draft reading the wrong layers runs and
accepts nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sparkserve.serving import checkpoint, speculative
from sparkserve.serving import model as modelmod
from sparkserve.serving.profile import Profile, ProfileError

VAR = "SPECULATIVE_DRAFT"


def _present(p: Profile, env: Mapping[str, str]) -> str:
    """Where vLLM will load the draft from (for the log), or ModelMissing saying what to do."""
    draft = p.speculative_draft
    dummy = p.load_format == "dummy"
    if checkpoint.is_path(draft):
        folder = Path(draft)
        if not folder.is_dir():
            raise modelmod.ModelMissing(
                f"{VAR}={draft}: no such folder in the container. Mount the draft there (compose: a volume "
                f"on the serve and preflight services), or set {VAR} to a Hugging Face id and download it "
                f"with `{modelmod.DOWNLOAD_COMMAND}` (it fetches the draft with the model)")
        lacks = modelmod.missing_files(folder)
        if dummy:  # random weights for the draft too: vLLM loads it with the target's load format
            lacks = [x for x in lacks if x == "config.json"]
        if lacks:
            raise modelmod.ModelMissing(f"{VAR}={draft}: the folder is not a complete draft; it lacks "
                                        f"{', '.join(lacks[:3])}")
        return f"folder {folder}" + (" (LOAD_FORMAT=dummy: random weights)" if dummy else "")
    if not p.offline:
        return f"{draft} (online: vLLM downloads what the cache lacks)"
    cache = checkpoint.hub_cache(env)
    if dummy and checkpoint.config(draft, env) is not None:
        return f"{draft}, its config.json from the cache (LOAD_FORMAT=dummy: random weights)"
    try:
        snapshot = modelmod.cached_snapshot(cache, draft)
    except modelmod.ModelMissing as exc:
        raise modelmod.ModelMissing(
            f"the Eagle3 draft ({VAR}): {exc}, and the server is offline (HF_HUB_OFFLINE=1). Download it "
            f"with `{modelmod.DOWNLOAD_COMMAND}` (it fetches the draft with the model), or set "
            "SPECULATIVE=off") from None
    return f"{draft} from the cache, snapshot {snapshot.name[:12]}"


def check(p: Profile, env: Mapping[str, str]) -> str | None:
    """The speculation line of the start log, after refusing a draft that is missing (ModelMissing) or
    does not fit the target (ProfileError naming both); None when SPECULATIVE=off."""
    if p.speculative == "off":
        return None
    line = f"{p.speculative}, {p.speculative_tokens} speculative tokens"
    if p.speculative_synthetic_acceptance is not None:
        line += (f"; MEASUREMENT ONLY: synthetic acceptance length {p.speculative_synthetic_acceptance:g} "
                 "(draft tokens accepted without the target's verdict)")
    if p.speculative != "eagle3":
        return line + " (draft-free)"
    where = _present(p, env)
    target, draft = checkpoint.config(p.model, env), checkpoint.config(p.speculative_draft, env)
    if target is None or draft is None:
        missing = "MODEL's" if target is None else "the draft's"
        return f"{line}, draft {where}; fit not checked: {missing} config.json is not here yet (online)"
    problems = speculative.fit_problems(target, draft)
    if problems:
        raise ProfileError(VAR, p.speculative_draft,
                           f"does not fit MODEL={p.model}: {'; '.join(problems)} (draft "
                           f"{checkpoint.config_path(p.speculative_draft, env)}, target "
                           f"{checkpoint.config_path(p.model, env)}); use an Eagle3 draft trained for MODEL")
    return f"{line}, draft {where}; fits MODEL (vocab_size {target.get('vocab_size')}, hidden_size " \
           f"{target.get('hidden_size')})"
