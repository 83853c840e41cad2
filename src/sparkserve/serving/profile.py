"""Serving profiles: the variables of profiles/*.env, parsed and validated before vLLM starts.

Every variable is declared once, as a field of `Profile` in serving/settings.py (its kind, default, vLLM
flags, docs line); parse() reads them in the fields' order. Every error names the variable, the value it
got and what it
accepts. Parsing is a mapping in, a `Profile` out (it reads the model's config.json, when there is one, to
know whether it is gpt-oss), so it is unit-tested on a CPU; the vLLM command line is serving/flags.py.

Strict: the mapping is what the container sees. An empty value is an error (remove the line to get the
default); names are checked by serving/environment.py; extra vLLM arguments (VLLM_EXTRA_ARGS) may not set
a flag a profile variable owns (serving/overrides.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from sparkserve.serving import checkpoint, environment, overrides
from sparkserve.serving.kinds import Context, ProfileError
from sparkserve.serving.settings import SETTINGS, VARIABLES, Profile, is_engine_variable, parse_mxfp4_layers

__all__ = ["Profile", "ProfileError", "check_extra_args", "check_known", "parse", "parse_mxfp4_layers"]


def check_known(names: Iterable[str], where: str, engine: bool = False) -> None:
    """Refuse variables no profile has, with the closest known name; with `engine`, an engine variable
    (VLLM_*, TORCHINDUCTOR_*, ...: ENGINE_PREFIXES) passes as it does in a profile file."""
    import difflib

    for name in sorted(names):
        if engine and is_engine_variable(name):
            continue
        if name not in VARIABLES:
            close = difflib.get_close_matches(name, VARIABLES, n=1)
            hint = f"; did you mean {close[0]}?" if close else "; docs/PROFILES.md lists them"
            raise ProfileError(name, "", f"not a serving-profile variable ({where}){hint}")


def check_names(env: Mapping[str, str]) -> None:
    """The names of the environment (serving/environment.py), errors only."""
    environment.check(env)


def check_extra_args(args: Iterable[str], source: str, p: Profile | None = None) -> None:
    """Extra vLLM arguments may not set a flag a profile variable owns; `source` names where they came
    from. With a profile, vLLM's own parser decides where vLLM is importable."""
    args = tuple(args)
    if not args:
        return  # nothing to check: vLLM's parser is not even loaded
    if p is None:
        overrides.check_static(args, source)
    else:
        overrides.guard().check(args, source, p)


def _raw(env: Mapping[str, str], var: str) -> str | None:
    value = env.get(var)
    if value is None:
        return None
    if value.strip() == "":
        raise ProfileError(var, value, "empty; remove the line to get the default, or give a value")
    return value.strip()


def _quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'"


def _with_quote_hint(exc: ProfileError, var: str, text: str | None) -> ProfileError:
    """A refused value that carries its quotes says so: only an env file's quotes are taken off (compose's
    env_file); `docker run -e`, a list entry of compose's `environment:` and a pod's `env` pass them on as
    part of the value."""
    if exc.variable != var or text is None or not _quoted(text):
        return exc
    return ProfileError(var, exc.value, f"{exc.why}; the value carries quotes ({text}): remove them (only an "
                                        "env file's quotes are taken off; docker run -e, a list entry "
                                        "of compose's environment: and a pod's env keep them)")


def parse(env: Mapping[str, str], gpt_oss: Callable[[str], bool] | None = None) -> Profile:
    """The profile the environment describes, or a ProfileError naming the first bad variable (names
    first, then values in the table's order). `gpt_oss` says whether a model is gpt-oss (default: its
    config.json, in its folder or in the Hugging Face cache the environment names)."""
    environment.check(env)
    ctx = Context(env, gpt_oss or (lambda model: checkpoint.is_gpt_oss(model, env)))
    for s in SETTINGS:
        text = _raw(env, s.var)
        try:
            value = s.default_for(ctx) if text is None else s.kind.read(s.var, text, ctx)
            if s.check is not None:
                s.check(value, ctx)
        except ProfileError as exc:
            raise _with_quote_hint(exc, s.var, text) from None
        ctx.values[s.field] = value
    profile = Profile(**ctx.values, gpt_oss=ctx.gpt_oss)
    check_extra_args(profile.extra_args, "VLLM_EXTRA_ARGS", profile)
    return profile
