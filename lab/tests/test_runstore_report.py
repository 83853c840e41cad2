"""The run store, kernel validation marking runs invalid, and the generated report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_logs import engine_log
from sparkserve_lab.report import anchors, markdown
from sparkserve_lab.runstore import BENCH, ENGINE_LOG, METADATA, Store, write_json
from sparkserve_lab.validate import runs
from sparkserve_lab.validate.kernels import load_kernel_rules

from sparkserve.errors import SparkserveError
from sparkserve.serving import envfile

ROOT = Path(__file__).resolve().parents[2]

EXPECTATIONS = ROOT / "lab" / "configs" / "engine-kernels.toml"


def bench_json(tg: float, pp: float = 4000.0, depths: tuple[int, ...] = (0,)) -> dict[str, object]:
    def m(v: float) -> dict[str, object]:
        return {"mean": v, "std": 0.1, "values": [v, v, v]}

    return {
        "version": "0.4.0",
        "model": "m",
        "benchmarks": [
            {
                "concurrency": 1,
                "context_size": d,
                "prompt_size": 2048,
                "response_size": 32,
                "is_context_prefill_phase": False,
                "pp_throughput": m(pp),
                "tg_throughput": m(tg - d / 10000),
                "tg_req_throughput": m(tg),
                "ttfr": m(500.0),
            }
            for d in depths
        ],
    }


def make_run(
    store: Store,
    config: str,
    log: str,
    tg: float,
    hw: str = "nvidia-gb10",
    depths: tuple[int, ...] = (0,),
    rss: int = 10**9,
    pp: float = 4000.0,
    random_weights: bool = False,
) -> object:
    run = store.new_run(hw, config, "quick")
    write_json(
        run.file(METADATA),
        {
            "configuration": config,
            "preset": {"name": "quick"},
            "created": "2026-11-22T00:00:00Z",
            "memory": {"gpu_memory_used_bytes": rss},
            "gpu": [{"name": "NVIDIA GB10", "compute_cap": "12.1"}],
            "random_weights": random_weights,
        },
    )
    write_json(run.file(BENCH), bench_json(tg, pp, depths=depths))
    (run.path / ENGINE_LOG).write_text((engine_log(log)).read_text())
    runs.validate(run, load_kernel_rules(EXPECTATIONS)[config], EXPECTATIONS, run.file(ENGINE_LOG), None)
    return run


def test_wrong_backend_run_is_invalid_in_store_and_report(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    good = make_run(store, "marlin-moe", "spark-marlin-moe.log", 58.0, depths=(0, 4096))
    bad = make_run(store, "cutlass-mxfp8", "spark-cutlass-wrong-backend.log", 61.0)
    assert good.status() == "valid"  # type: ignore[attr-defined]
    assert bad.status() == "invalid"  # type: ignore[attr-defined]
    assert json.loads((bad.path / "validation.json").read_text())["valid"] is False  # type: ignore[attr-defined]

    out = tmp_path / "docs" / "BENCHMARK_RESULTS.md"
    anchor_list = anchors.parse((ROOT / "tests" / "data" / "anchors-sample.toml").read_text())
    text = markdown.render(store, anchor_list, out, out.parent / "img", "ANCHORS.md", make_plots=False)
    measured = text.split("## All runs")[0]
    assert "### marlin-moe · quick" in measured
    assert "cutlass-mxfp8" not in measured  # excluded from every table
    invalid = text.split("## Invalid runs (excluded)")[1]
    assert bad.run_id in invalid and "moe must match" in invalid  # type: ignore[attr-defined]
    assert "*external: llama.cpp `benches/dgx-spark.md`*" in text  # anchors as labelled rows on Spark
    with pytest.raises(SparkserveError, match="invalid"):
        store.set_baseline(bad)  # type: ignore[arg-type]


def test_report_over_an_h100_matrix(tmp_path: Path) -> None:
    """Three H100 configurations of one matrix (random weights), validated on the recorded H100 logs:
    tables per configuration, the comparison table, decode and prefill plots, the random-weights note."""
    pytest.importorskip("matplotlib")
    store = Store(tmp_path / "results")
    hw = "nvidia-h100-80gb-hbm3"
    runs = [
        make_run(store, "stock-sm90", "h100-stock.log", 206.8, hw, pp=25688.0, random_weights=True),
        make_run(store, "mxfp4-dense-sm90", "h100-mxfp4-dense-fa3.log", 226.0, hw, pp=22600.0,
                 random_weights=True),
        make_run(store, "flashinfer-sinks-sm90", "h100-flashinfer-sinks.log", 227.0, hw, pp=22300.0,
                 random_weights=True),
        # a run whose log does not prove its claim: excluded, listed
        make_run(store, "flashinfer-sinks-sm90", "h100-mxfp4-dense-fa3.log", 300.0, hw, random_weights=True),
    ]
    assert [r.status() for r in runs] == ["valid", "valid", "valid", "invalid"]  # type: ignore[attr-defined]
    out = tmp_path / "docs" / "BENCHMARK_RESULTS.md"
    img = out.parent / "img"
    text = markdown.render(store, [], out, img, "ANCHORS.md", make_plots=True)
    measured = text.split("## All runs")[0]
    for cfg in ("stock-sm90", "mxfp4-dense-sm90", "flashinfer-sinks-sm90"):
        assert f"### {cfg} · quick" in measured and f"| {cfg} | pp2048/tg32 |" in measured
    assert "random weights" in measured and "token relay" in measured
    assert "300.0" not in measured  # the invalid run's number is nowhere in the tables
    assert (img / f"{hw}-decode.png").stat().st_size > 0 and (img / f"{hw}-prefill.png").stat().st_size > 0
    assert f"img/{hw}-prefill.png" in text


def test_anchor_parsing() -> None:
    rows = anchors.parse((ROOT / "tests" / "data" / "anchors-sample.toml").read_text())
    by = {a.stack: a for a in rows}
    assert by["llama.cpp `benches/dgx-spark.md`"].tg32 == (59.0, 59.0)
    assert by["fork"].pp2048 == (4573.0, 4910.0)
    assert by["SGLang"].pp2048 is None and by["SGLang"].tg32 == (52.0, 52.0)
    assert by["SGLang"].tg_text == "~52" and by["fork"].pp_text == "4,573-4,910"


@pytest.mark.parametrize(("pair", "message"), [
    ("[52]", "anchors: anchor[1].tg32: expected a list of 2 numbers, got [52]"),  # the file's type
    ("[60, 52]", "anchors: anchor 1 tg32: expected [low, high] tok/s, got [60.0, 52.0]"),  # more than a type
])
def test_a_bad_anchor_pair_is_refused(pair: str, message: str) -> None:
    with pytest.raises(SparkserveError) as info:
        anchors.parse(f'schema = 1\n[[anchor]]\nstack = "s"\nsource = "x"\ntg32 = {pair}\n')
    assert str(info.value) == message


def test_repo_anchors_are_project_data() -> None:
    """The report's default anchors live in the repo, each with its source."""
    rows = anchors.load(ROOT / anchors.DEFAULT_FILE)
    assert len(rows) >= 5 and all(a.source and (a.tg32 or a.pp2048) for a in rows)
    assert any(a.stack.startswith("llama.cpp") and a.tg32 for a in rows)


def test_store_lookup_and_baselines(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    a = make_run(store, "marlin-moe", "spark-marlin-moe.log", 58.0)
    store.set_baseline(a)  # type: ignore[arg-type]
    assert store.baseline("nvidia-gb10", "marlin-moe") == a
    assert store.get(a.run_id) == a  # type: ignore[attr-defined]
    assert store.baseline("nvidia-gb10", "cutlass-mxfp8") is None


# --- the report never drops anything silently, and says what its numbers are -----------------------------

def plain_run(store: Store, config: str, hw: str, bench: dict[str, object] | None,
              random_weights: bool = True) -> object:
    """A run without an engine log (unvalidated): metadata and, when given, a llama-benchy result."""
    run = store.new_run(hw, config, "quick")
    write_json(run.file(METADATA), {"configuration": config, "preset": {"name": "quick"},
                                    "created": "2026-11-23T00:00:00Z", "random_weights": random_weights,
                                    "gpu": [{"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0"}]})
    if bench is not None:
        write_json(run.file(BENCH), bench)
    return run


def report(store: Store, tmp_path: Path, *extra: str) -> int:
    from sparkserve_lab.cli import main as cli

    return cli.main(["report", "--store", str(store.root), "--out", str(tmp_path / "docs" / "B.md"),
                     "--anchors", str(ROOT / "tests" / "data" / "anchors-sample.toml"), "--no-plots", *extra])


def test_report_refuses_to_drop_a_section_of_the_current_file(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`sparkserve report` used to rewrite docs/BENCHMARK_RESULTS.md without a section (rc 0)."""
    store = Store(tmp_path / "results")
    make_run(store, "marlin-moe", "spark-marlin-moe.log", 58.0)
    out = tmp_path / "docs" / "B.md"
    assert report(store, tmp_path) == 0
    before = out.read_text()
    assert "## nvidia-gb10" in before and "## External reference (not measured by sparkserve)" in before
    empty = Store(tmp_path / "no-store-here")
    assert report(empty, tmp_path) == 3
    err = capsys.readouterr().err
    assert "would drop" in err and "## nvidia-gb10" in err and "nothing was written" in err
    assert out.read_text() == before
    assert report(empty, tmp_path, "--allow-dropped") == 0
    assert "dropped on request (--allow-dropped)" in capsys.readouterr().err
    assert "## nvidia-gb10" not in out.read_text()


def test_every_section_is_written_even_when_empty(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "B.md"
    text = markdown.render(Store(tmp_path / "results"), [], out, out.parent / "img", "lab/configs/none.toml",
                           make_plots=False)
    for heading in ("## External reference (not measured by sparkserve)", "## All runs",
                    "## A/B comparisons (`sparkserve ab`)",
                    "## Invalid runs (excluded)", "## Runs without usable numbers (excluded)"):
        assert heading in text
    assert "No external anchors in `lab/configs/none.toml`." in text and "No usable runs" in text


def test_runs_without_numbers_are_listed_with_the_reason(tmp_path: Path) -> None:
    store = Store(tmp_path / "results")
    hw = "nvidia-h100-80gb-hbm3"
    plain_run(store, "stock-sm90", hw, None)
    plain_run(store, "mxfp4-dense-sm90", hw, {"benchmarks": []})
    plain_run(store, "flashinfer-sinks-sm90", hw, {"benchmarks": [{"concurrency": "x"}]})
    out = tmp_path / "docs" / "B.md"
    text = markdown.render(store, [], out, out.parent / "img", "a.toml", make_plots=False)
    left = text.split("## Runs without usable numbers (excluded)")[1]
    assert "| stock-sm90 | no llama-benchy.json |" in left
    assert "| mxfp4-dense-sm90 | llama-benchy.json holds no results |" in left
    assert "| flashinfer-sinks-sm90 | llama-benchy.json unreadable:" in left


def test_configuration_names_are_explained_and_the_shipped_default_marked(tmp_path: Path) -> None:
    from sparkserve_lab.report import configs

    rules = configs.load(EXPECTATIONS)
    store = Store(tmp_path / "results")
    hw = "nvidia-h100-80gb-hbm3"
    plain_run(store, "stock-sm90", hw, bench_json(210.0))
    out = tmp_path / "docs" / "B.md"
    text = markdown.render(store, [], out, out.parent / "img", "a.toml", make_plots=False, configs=rules)
    assert "- `stock-sm90`: Upstream defaults on H100 (reference measurement)" in text
    assert ("The shipped default on this hardware, `profiles/hopper-h100.env` (configuration "
            "`hopper-profile-sm90`), has no run") in text
    assert "Plots: not generated (`sparkserve report --no-plots`)." in text
    plain_run(store, "hopper-profile-sm90", hw, bench_json(220.0))
    text = markdown.render(store, [], out, out.parent / "img", "a.toml", make_plots=False, configs=rules)
    assert "| **hopper-profile-sm90** (shipped default) | pp2048/tg32 |" in text
    assert "**Shipped default** (`profiles/hopper-h100.env`)" in text and "has no run" not in text
    # level 6 and A/B runs name their configuration after the profile they served: the profile as shipped
    # is the shipped default, an override of it is not
    run = plain_run(store, "hopper-h100", "nvidia-h200", bench_json(244.0))
    meta = json.loads(run.file(METADATA).read_text())  # type: ignore[attr-defined]
    write_json(run.file(METADATA), {**meta, "profile": {"name": "hopper-h100", "overrides": {}, "env": {}}})  # type: ignore[attr-defined]
    run = plain_run(store, "hopper-h100+MXFP4_LAYERS=moe", "nvidia-h200", bench_json(245.0))
    meta = json.loads(run.file(METADATA).read_text())  # type: ignore[attr-defined]
    write_json(run.file(METADATA), {**meta, "profile": {"name": "hopper-h100",  # type: ignore[attr-defined]
                                                        "overrides": {"MXFP4_LAYERS": "moe"}, "env": {}}})
    text = markdown.render(store, [], out, out.parent / "img", "a.toml", make_plots=False, configs=rules)
    h200 = text.split("## nvidia-h200")[1]
    assert "| **hopper-h100** (shipped default) |" in h200
    assert "| hopper-h100+MXFP4_LAYERS=moe |" in h200
    assert "- `hopper-h100+MXFP4_LAYERS=moe`: the profile `hopper-h100` with MXFP4_LAYERS=moe." in h200
    spark = configs.shipped_default("nvidia-gb10", rules)
    assert spark == configs.Shipped("spark", None)
    assert configs.shipped_default("cpu-x86_64-2c", rules) is None


def _served_profile(store: Store, name: str, env: dict[str, str], overrides: dict[str, str],
                    **meta_extra: object) -> None:
    """A stored H200 run of hopper-h100 that keeps the profile values it served (`env`)."""
    run = plain_run(store, name, "nvidia-h200", bench_json(230.0))
    meta = json.loads(run.file(METADATA).read_text())  # type: ignore[attr-defined]
    write_json(run.file(METADATA), {**meta, **meta_extra, "profile": {  # type: ignore[attr-defined]
        "name": "hopper-h100", "overrides": overrides, "env": env}})


def _rendered_with_profiles(store: Store, tmp_path: Path) -> str:
    """The report of `store` with the repository's profiles read (what marks the shipped default)."""
    from sparkserve_lab.report import configs

    out = tmp_path / "docs" / "B.md"
    return markdown.render(store, [], out, out.parent / "img", "a.toml", make_plots=False,
                           configs=configs.load(EXPECTATIONS), repo=ROOT)


def test_a_run_of_the_profile_before_a_default_changed_is_not_the_shipped_default(tmp_path: Path) -> None:
    """With the repository's profiles read, a run that kept its profile values counts as the shipped default
    only where they choose today's kernels: the profile as served before MOE_BACKEND changed is not, the A/B
    arm whose override is today's value is."""
    from sparkserve_lab.report import configs

    rules = configs.load(EXPECTATIONS)
    today = envfile.read(ROOT / "profiles" / "hopper-h100.env", {})
    now = today["MOE_BACKEND"]
    assert now != "auto"
    store = Store(tmp_path / "results")
    for name, overrides, moe in (("hopper-h100", {}, "auto"),
                                 (f"hopper-h100+MOE_BACKEND={now}", {"MOE_BACKEND": now}, now)):
        _served_profile(store, name, {**today, "MOE_BACKEND": moe}, overrides)
    text = _rendered_with_profiles(store, tmp_path)
    assert "| hopper-h100 | pp2048/tg32 |" in text
    assert f"| **hopper-h100+MOE_BACKEND={now}** (shipped default) |" in text
    assert "- `hopper-h100`: the profile `hopper-h100` as shipped then." in text
    shipped = configs.shipped_default("nvidia-h200", rules, ROOT / "profiles")
    assert shipped is not None and shipped.kernels is not None and shipped.kernels["MOE_BACKEND"] == now


def test_a_run_without_a_switch_the_profile_sets_today_is_not_the_shipped_default(tmp_path: Path) -> None:
    """An engine variable the profile file sets (a patch's switch) decides no kernel choice, yet a run of
    the profile without it, with another value, or with a switch the file leaves unset, served something
    else than today's file."""
    today = envfile.read(ROOT / "profiles" / "hopper-h100.env", {})
    switches = {k: v for k, v in today.items() if k.startswith("VLLM_")}
    assert switches, "the hopper profile sets a patch's switch"
    store = Store(tmp_path / "results")
    without = {k: v for k, v in today.items() if k not in switches}
    _served_profile(store, "hopper-h100", without, {})
    _served_profile(store, "hopper-h100+switches", today, switches)
    _served_profile(store, "hopper-h100+more", {**today, "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS": "64"}, switches)
    text = _rendered_with_profiles(store, tmp_path)
    assert "| hopper-h100 | pp2048/tg32 |" in text
    assert "| **hopper-h100+switches** (shipped default) |" in text
    assert "| hopper-h100+more | pp2048/tg32 |" in text


def test_runs_before_and_after_a_default_changed_are_marked_per_run(tmp_path: Path) -> None:
    """One configuration name, two presets: the older preset's run served the profile before MOE_BACKEND
    changed, the newer one today's values. The depth-0 summary row comes from the older run and must not
    be marked the shipped default; the configuration line says which runs are."""
    today = envfile.read(ROOT / "profiles" / "hopper-h100.env", {})
    store = Store(tmp_path / "results")
    for preset, moe in (("ab", "auto"), ("concurrency", today["MOE_BACKEND"])):
        _served_profile(store, "hopper-h100", {**today, "MOE_BACKEND": moe}, {}, preset={"name": preset})
    text = _rendered_with_profiles(store, tmp_path)
    assert "| hopper-h100 | pp2048/tg32 |" in text
    assert "**hopper-h100** (shipped default)" not in text
    assert ("**Shipped default** (`profiles/hopper-h100.env`), except its `ab` run: made before a default "
            "of the profile changed.") in text


def test_plot_labels_are_wrapped_never_cut() -> None:
    from sparkserve_lab.report import plots

    for a in anchors.load(ROOT / anchors.DEFAULT_FILE):
        label = f"{a.stack} (external)"
        assert plots.wrap(label).split() == label.split(), label  # every word whole
    wrapped = plots.wrap("eugr/spark-vllm-docker --exp-mxfp4 image")
    assert wrapped == "eugr/spark-vllm-docker\n--exp-mxfp4 image"


def test_plots_show_spread_the_hardware_and_the_shipped_default(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """No error bars, no "random weights", no shipped-default mark and a line through two noisy depths
    used to be what the plots showed."""
    pytest.importorskip("matplotlib")
    from sparkserve_lab.report import configs, plots

    figures: dict[str, object] = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.__setitem__(path.name, fig))
    store = Store(tmp_path / "results")
    hw = "nvidia-h100-80gb-hbm3"
    plain_run(store, "stock-sm90", hw, bench_json(210.0, depths=(0, 4096)))
    plain_run(store, "hopper-profile-sm90", hw, bench_json(220.0, pp=5000.0))
    out = tmp_path / "docs" / "B.md"
    markdown.render(store, [], out, out.parent / "img", "a.toml", make_plots=True,
                    configs=configs.load(EXPECTATIONS))
    decode = figures[f"{hw}-decode.png"]
    title = decode._suptitle.get_text()  # type: ignore[attr-defined]
    assert "NVIDIA H100 80GB HBM3" in title and "random weights" in title and "mean ± std" in title
    ax = decode.axes[0]  # type: ignore[attr-defined]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert [x.replace("\n", " ") for x in labels] == ["hopper-profile-sm90 (shipped default)", "stock-sm90"]
    assert any(getattr(c, "errorbar", None) is not None or type(c).__name__ == "ErrorbarContainer"
               for c in ax.containers), "no error bars"
    depth = figures[f"{hw}-depth.png"]
    assert "no trend line" in depth._suptitle.get_text()  # type: ignore[attr-defined]
    for dax in depth.axes:  # type: ignore[attr-defined]
        for line in dax.get_lines():
            if len(line.get_xdata()) == 2:
                assert line.get_linestyle() == "None", "two depths joined by a line"


def test_records_of_one_name_in_one_second_get_folders_of_their_own(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # two speculation costs (or A/Bs) started on two GPUs of one host in the same second
    import time as time_module

    from sparkserve_lab.speculative import runs as spec_runs

    second_of_both = time_module.struct_time((2026, 11, 27, 7, 12, 25, 4, 331, 0))
    monkeypatch.setattr(time_module, "gmtime", lambda *_: second_of_both)
    store = Store(tmp_path)
    first = store.new_record("nvidia-h200-x4", "ab-hopper-h100-moe_backend-triton")
    second = store.new_record("nvidia-h200-x4", "ab-hopper-h100-moe_backend-triton")
    assert first.path != second.path
    assert first.run_id.startswith("20261127T071225Z-ab-hopper-h100-moe_backend-triton-")
    a = spec_runs._record_dir(tmp_path, "nvidia-h200-x4", "speculative-cost", "hopper-h100+eagle3")
    b = spec_runs._record_dir(tmp_path, "nvidia-h200-x4", "speculative-cost", "hopper-h100+eagle3")
    assert a != b and a.is_dir() and b.is_dir()
    assert a.name.startswith("20261127T071225Z-speculative-cost-hopper-h100-eagle3-")


def test_the_curve_shows_the_newest_whole_curve_not_a_later_partial_one(tmp_path: Path) -> None:
    from sparkserve_lab.report import decode

    def curve(cs: tuple[int, ...]) -> dict[str, object]:
        b = bench_json(200.0)
        first = b["benchmarks"][0]  # type: ignore[index]
        return {**b, "benchmarks": [{**first, "concurrency": c, "prompt_size": 512, "response_size": 128}
                                    for c in cs]}

    store = Store(tmp_path / "results")
    made = []
    for cs in ((1, 2, 4, 5, 8), (4, 5), (4, 5)):  # a whole curve, then an A/B's runs at two points
        run = plain_run(store, "hopper-h100", "nvidia-h200", curve(cs))
        meta = json.loads(run.file(METADATA).read_text())  # type: ignore[attr-defined]
        write_json(run.file(METADATA), {**meta, "preset": {"name": decode.CURVE_PRESET}})  # type: ignore[attr-defined]
        made.append(run.run_id)  # type: ignore[attr-defined]
    out = tmp_path / "docs" / "B.md"
    text = "\n".join(decode.curve_section(store, out, tmp_path, "img", make_plots=False))
    assert made[0] in text and made[1] not in text and made[2] not in text
    assert "| 8 | 200.0" in text
    run = plain_run(store, "hopper-h100", "nvidia-h200", curve((1, 2, 4, 5, 8, 10)))
    meta = json.loads(run.file(METADATA).read_text())  # type: ignore[attr-defined]
    write_json(run.file(METADATA), {**meta, "preset": {"name": decode.CURVE_PRESET}})  # type: ignore[attr-defined]
    text = "\n".join(decode.curve_section(store, out, tmp_path, "img", make_plots=False))
    assert run.run_id in text and made[0] not in text  # type: ignore[attr-defined]


def test_the_speculation_plot_is_drawn_per_hardware(tmp_path: Path) -> None:
    """(here, not in test_report_speculative.py: plots need matplotlib, which this module's second CI run
    has)"""
    pytest.importorskip("matplotlib")
    from sparkserve_lab.report import speculative
    from test_report_speculative import cost_record

    store = Store(tmp_path / "results")
    cost_record(store, "nvidia-h200", 2)
    cost_record(store, "nvidia-h200", 4)
    lines = speculative.section(store, tmp_path / "docs" / "B.md", tmp_path / "img", "img", make_plots=True)
    assert "![nvidia-h200 speculative decoding cost](img/nvidia-h200-speculative.png)" in lines
    assert (tmp_path / "img" / "nvidia-h200-speculative.png").stat().st_size > 10_000
