"""The bench's comparisons by template group: the offline bench's cell and record, and the shipped clip result
recomputed as docs/runs/2026-11-29-phase-offline-clip/README.md states it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_offline_bench_compares_each_setting_by_template_group(capsys, load_bench) -> None:
    from webrl.method.template_split import TemplateGroups

    bench = load_bench("phase_offline")
    keys = [f"t/{i}" for i in range(8)]
    groups = TemplateGroups({k: ("a" if i < 4 else "h") for i, k in enumerate(keys)}, frozenset({"a"}))
    row = bench.against_start("clip", keys, groups, {"t/0"}, {"t/0", "t/4", "t/5", "t/6", "t/7"})
    shown = " ".join(capsys.readouterr().out.split())
    assert "clip against the start actor on the 8 test tasks both evaluated: solved 1 -> 5" in shown
    assert row["vs_start"]["held_out"]["gained"] == ["t/4", "t/5", "t/6", "t/7"]
    # 2 templates: a resample holds the flipped one 0, 1 or 2 times, so the difference is 0, 1/2 or 1
    assert tuple(row["vs_start"]["overall"]["interval"]) == (0.0, 1.0)
    assert bench.vs_start_cell(row) == "+50.0 (+0.0..+100.0)"
    assert bench.against_start("clip", keys, None, set(), set()) == {} and bench.vs_start_cell({}) == "-"


def test_the_offline_bench_gives_the_validate_stages_verdict(load_bench) -> None:
    from webrl.method.acceptance import verdict

    bench = load_bench("phase_offline")
    tasks = [f"train/{i}" for i in range(10)]
    refused = {"validation": verdict(tasks, tasks[:6], tasks[:1], alpha=0.05).to_json()}
    published = {"validation": verdict(tasks, tasks[:6], tasks[2:8], alpha=0.05).to_json()}
    assert bench.validation_cell(refused) == "6 -> 1 refused (p 0.0312)"
    assert bench.validation_cell(published) == "6 -> 6 published (p 0.688)"
    assert bench.validation_cell({}) == "-"
    info = bench.meta(Path("phase1-smollm2"), {"t/1"}, ["t/1", "t/2"], set(tasks[:6]), tasks)
    assert info["validation_tasks"] == tasks and info["validation_baseline_solved"] == sorted(tasks[:6])
    assert "validation_tasks" not in bench.meta(Path("phase1-smollm2"), set(), [])


def test_the_shipped_clip_result_by_template_group(load_bench) -> None:
    import json

    recompute = load_bench("clip_template_bootstrap")
    groups = recompute.suite_groups(0)
    record = recompute.recompute(json.loads(recompute.RESULT.read_text()), groups)
    assert record["success"]["sft"] | {"macro": 0} == {"overall": [25, 165], "seen": [25, 85], "held_out": [0, 80],
                                                        "macro": 0, "templates": [65, 61, 4]}
    assert record["success"]["clip-0.01+warmup"]["held_out"] == [19, 80]
    clip = record["comparisons"]["clip-0.01+warmup against the SFT actor"]

    def points(interval: list[float] | tuple[float, float]) -> list[float]:
        return [round(100 * x, 1) for x in interval]

    assert round(100 * clip["overall"]["difference"], 1) == 13.3
    assert points(clip["overall"]["interval"]) == [-1.8, 35.3]  # the task bootstrap's +7.3 .. +19.4, over templates
    assert points(clip["seen"]["interval"]) == [-5.6, 12.9] and points(clip["held_out"]["interval"]) == [0.0, 71.2]
    assert points(clip["overall"]["interval_macro"]) == [-3.1, 12.2]
    assert clip["overall"]["macro_difference"] == pytest.approx(0.26076923 - 0.21538462, abs=1e-6)
    versus = record["comparisons"]["clip-0.01+warmup against smooth-l1"]
    assert points(versus["overall"]["interval"]) == [3.8, 38.8] and points(versus["seen"]["interval"]) == [4.9, 24.5]


def test_the_offline_bench_reads_the_start_actors_evaluation_back(free_sites, load_bench) -> None:
    """The start actor's results on the sample come from its stored evaluation of all the test tasks (the shipped
    SFT actor's: no episode runs, no browser), and ``--stratified`` samples one task of every template, which hold
    the 40 of ``make demo``'s middle phase."""
    from webrl.db.migrate import upgrade
    from webrl.method.presets import PRESETS
    from webrl.orchestration.pipeline import Pipeline, PipelineOptions
    from webrl.orchestration.stored_evaluation import key_for
    from webrl.sandbox.tasks.suite import load_suite
    from webrl.store.evaluations import SHIPPED, find
    from webrl.store.template_groups import template_groups

    settings = free_sites
    upgrade(settings)
    load_suite(settings, settings.seed)
    bench = load_bench("phase_offline")
    keys, suite = bench.sample_keys(settings, 65, stratified=True)
    groups = template_groups(settings)
    assert len(suite) == 165 and len({groups.template_of[k] for k in keys}) == 65
    demo = Pipeline(settings, PipelineOptions(run="cpu-demo", hyperparams=PRESETS["cpu-demo"]))
    middle = demo.fixed_sample()
    assert middle is not None and len(middle) == 40 and set(middle) <= set(keys)

    solved, source = bench.solved_on(settings, bench.SFT_ACTOR, keys, 8, suite)
    stored = find(settings, key_for(settings, bench.SFT_ACTOR, suite, PRESETS["cpu-demo"].rollout), folders=(SHIPPED,))
    assert stored is not None and source == f"stored evaluation {stored.key.digest()[:12]}"
    assert solved == {k for k in keys if stored.results[k].score >= 1.0} and len(solved) == 14


@pytest.fixture
def tiny_model(tmp_path: Path):
    """A 1-layer Llama on a tiny BPE vocabulary (``webrl.models.tiny``), every weight trainable."""
    from webrl.models.tiny import build_tiny_llama, build_tokenizer

    tokenizer = build_tokenizer(["Show me item 1", "Show me item 22", 'do(action="Click", element="3")'] * 8,
                                tmp_path, vocab_size=300)
    return build_tiny_llama(tokenizer, "test", seed=0)


def test_the_perturbation_null_scales_noise_to_each_tensor_and_finds_the_flips_it_is_asked_for(
        tiny_model, load_bench) -> None:
    """``bench/perturbation_null.py``: sigma 0 gives back the start weights; the noise of a tensor is sigma times its
    own RMS (seeded); bisection on sigma reaches a target share of flipped probe steps."""
    import torch

    bench = load_bench("perturbation_null")
    model = tiny_model
    weights = bench.lora_weights(model)
    original = {name: p.detach().clone() for name, p in weights.items()}
    bench.perturb(model, original, 0.0, seed=0)
    assert all(torch.equal(p, original[n]) for n, p in bench.lora_weights(model).items())
    bench.perturb(model, original, 0.1, seed=0)
    name, p = next(iter(bench.lora_weights(model).items()))
    p = p.detach().clone()
    ratio = float((p - original[name]).pow(2).mean().sqrt() / original[name].pow(2).mean().sqrt())
    assert ratio == pytest.approx(0.1, rel=0.2)
    bench.perturb(model, original, 0.1, seed=0)  # the same seed, the same noise
    assert torch.equal(bench.lora_weights(model)[name], p)
    prompts = torch.randint(6, 300, (60, 8), generator=torch.Generator().manual_seed(0))  # 60 token sequences

    def next_tokens() -> torch.Tensor:
        with torch.no_grad():
            return model(input_ids=prompts).logits[:, -1].argmax(-1)

    bench.perturb(model, original, 0.0, seed=0)
    start = next_tokens()

    def changed() -> float:  # the share of prompts whose greedy next token moved: the probe's flips in small
        return float((next_tokens() != start).float().mean())

    sigma, measured = bench.calibrate(model, original, changed, 0.5, seed=0, tries=14, tolerance=0.15)
    assert sigma > 0 and abs(measured - 0.5) <= 0.15


def test_the_offline_bench_rehearses_the_shipped_oracle_steps_only_when_a_setting_asks(load_bench, tmp_path) -> None:
    """``replay.demo_tasks`` N: the first N tasks of the anchor file (one train task per template); 0 reads none; a
    file without steps is refused, naming the option."""
    import typer

    from webrl.method.hyperparams import DEFAULTS, with_overrides
    from webrl.models.probe import load_probe, save_probe

    bench = load_bench("phase_offline")
    steps = load_probe(bench.ANCHORS)
    assert bench.rehearsal_pool(bench.ANCHORS, DEFAULTS) is None
    pool = bench.rehearsal_pool(bench.ANCHORS, with_overrides(DEFAULTS, {"replay.demo_tasks": 5}))
    first = list(dict.fromkeys(s.task_key for s in steps))[:5]
    assert [(e.task_key, e.index) for e in pool] == [(s.task_key, s.index) for s in steps if s.task_key in first]
    assert len({s.task_key for s in steps}) >= 60  # the templates the rehearsal can keep
    with pytest.raises(typer.BadParameter, match="no oracle steps") as refused:
        bench.rehearsal_pool(save_probe([], tmp_path / "empty.jsonl.gz"),
                             with_overrides(DEFAULTS, {"replay.demo_tasks": 5}))
    assert refused.value.param_hint == "--demonstrations"
