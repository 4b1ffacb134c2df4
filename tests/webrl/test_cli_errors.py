"""A user's mistake at the command line is one line on stderr naming the problem (exit status 2, no traceback),
and no command prints a secret. Run as a user runs them: ``python -m webrl.cli`` and ``python -m webrl.demo``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.config import Settings

REPO = Path(__file__).resolve().parents[2]
TINY_ACTOR = REPO / "webrl" / "assets" / "actor-sft"


def _run(settings: Settings, *args: str, env: dict[str, str] | None = None,
         module: str = "webrl.cli") -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WEBRL_")}
    environment.update({"WEBRL_HOME": str(settings.home), "PYTHONPATH": str(REPO), "COLUMNS": "80", **(env or {})})
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=environment,
                          cwd=REPO, timeout=600)


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_sites_serve_on_a_busy_port_names_it_and_how_to_move(settings: Settings, busy_port: int) -> None:
    done = _run(settings, "sites", "serve", "--site", "shopping",
                env={"WEBRL_SITES__SHOPPING_URL": f"http://127.0.0.1:{busy_port}"})
    line = _one_line_error(done)
    assert f"port {busy_port}" in line and "sandbox site shopping" in line and "in use" in line
    assert "WEBRL_SITES__SHOPPING_URL" in line and "--port-offset" in line


def test_eval_with_the_sites_already_served_names_the_port(free_sites: Settings, busy_port: int) -> None:
    """What `make demo` met when `webrl sites serve` ran in another terminal: the embedded run serves the sites.
    The other sites get free ports, so only reddit's is busy whatever else runs on this machine."""
    sites = {k: v for k, v in os.environ.items() if k.startswith("WEBRL_SITES__")}
    done = _run(free_sites, "eval", "--actor", str(TINY_ACTOR), "--limit", "1",
                env={**sites, "WEBRL_SITES__REDDIT_URL": f"http://127.0.0.1:{busy_port}"})
    line = _one_line_error(done)
    assert f"port {busy_port}" in line and "sandbox site reddit" in line and "WEBRL_SITES__REDDIT_URL" in line


def test_serve_on_a_busy_port_names_it(settings: Settings, busy_port: int) -> None:
    line = _one_line_error(_run(settings, "serve", "taskgen", "--port", str(busy_port)))
    assert f"port {busy_port}" in line and "taskgen" in line and "--port" in line


def test_eval_names_a_tasks_file_that_is_not_json(settings: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "notjson.json"
    bad.write_text("this is not json")
    line = _one_line_error(_run(settings, "eval", "--actor", str(TINY_ACTOR), "--tasks", str(bad)))
    assert str(bad) in line and "not JSON" in line


def test_eval_names_the_entry_and_field_of_a_bad_task(settings: Settings, tmp_path: Path) -> None:
    good = {"task_id": 1, "sites": ["shopping"], "intent": "Buy a mug", "start_url": "__SHOPPING__/"}
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([good, {"task_id": 7, "sites": ["shopping"], "start_url": "__SHOPPING__/"}, 3]))
    line = _one_line_error(_run(settings, "eval", "--actor", str(TINY_ACTOR), "--tasks", str(tasks)))
    assert "entry 1 (task_id 7): intent: Field required" in line
    tasks.write_text(json.dumps([good, 3]))
    line = _one_line_error(_run(settings, "eval", "--actor", str(TINY_ACTOR), "--tasks", str(tasks)))
    assert "entry 1 is a int, not a task config" in line


def test_eval_names_a_repeated_task_id(settings: Settings, tmp_path: Path) -> None:
    task = {"task_id": 1, "sites": ["shopping"], "intent": "Buy a mug", "start_url": "__SHOPPING__/"}
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([task, {**task, "intent": "Buy a cup"}]))
    line = _one_line_error(_run(settings, "eval", "--actor", str(TINY_ACTOR), "--tasks", str(tasks)))
    assert "task_id 1 in entries 0, 1" in line and str(tasks) in line


def test_tasks_load_under_another_seed_is_one_line_naming_it(settings: Settings,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The suite of seed 1 is not loaded over that of seed 0 (its keys would keep seed 0's tasks); the same seed
    again inserts nothing and says so. In process through the command line's own error handling (``Cli``): a
    subprocess would spend seconds importing torch."""
    from webrl.cli import app

    with pytest.raises(SystemExit) as fresh:  # a home whose database has no schema yet: it gets one
        app(["tasks", "load", "--seed", "0"])
    out = capsys.readouterr().out
    assert fresh.value.code == 0 and "test: 165 new, 0 already stored" in out, out
    with pytest.raises(SystemExit) as again:
        app(["tasks", "load", "--seed", "0"])
    out = capsys.readouterr().out
    assert again.value.code == 0 and "train: 0 new" in out and "test: 0 new, 165 already stored" in out, out
    with pytest.raises(SystemExit) as refused:
        app(["tasks", "load", "--seed", "1"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert refused.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "suite seed 1 " in lines[0] and "--seed" in lines[0] and "nothing was stored" in lines[0], lines


def test_an_invalid_setting_is_named_by_its_variable(settings: Settings) -> None:
    for module, args in (("webrl.cli", ("db", "upgrade")), ("webrl.demo", ())):
        line = _one_line_error(_run(settings, *args, module=module, env={"WEBRL_MODELS__DTYPE": "float64"}))
        assert "invalid settings: WEBRL_MODELS__DTYPE:" in line, module


def test_a_flat_setting_of_before_the_groups_is_named_with_its_new_name(settings: Settings) -> None:
    for module, args in (("webrl.cli", ("db", "upgrade")), ("webrl.demo", ())):
        line = _one_line_error(_run(settings, *args, module=module, env={"WEBRL_ACTOR_BACKEND": "openai"}))
        assert "WEBRL_ACTOR_BACKEND is now WEBRL_ACTOR__BACKEND" in line, module


@pytest.mark.postgres
def test_db_upgrade_never_prints_the_password(settings: Settings, postgres_url: str) -> None:
    secret = "s3cr%et-Pw"
    with_password = postgres_url.replace("postgres@", "postgres:s3cr%25et-Pw@")  # trust auth ignores it
    done = _run(settings, "db", "upgrade", env={"WEBRL_DATABASE__URL": with_password})
    assert done.returncode == 0, done.stderr
    assert "postgres:***@" in done.stdout and secret not in done.stdout + done.stderr
    assert "s3cr" not in done.stdout + done.stderr
    unreachable = with_password.replace("127.0.0.1:5432", "127.0.0.1:1")
    line = _one_line_error(_run(settings, "db", "upgrade", env={"WEBRL_DATABASE__URL": unreachable}))
    assert "cannot reach the database at postgresql+psycopg://postgres:***@127.0.0.1:1/" in line
    assert "s3cr" not in line


def test_db_upgrade_masks_the_password_field_not_its_letters_elsewhere(settings: Settings) -> None:
    """A one-letter password once turned libpq's "invalid port number" into "invalid ***ort number"."""
    line = _one_line_error(_run(settings, "db", "upgrade",
                                env={"WEBRL_DATABASE__URL": "postgresql+psycopg://postgres:p@127.0.0.1:70000/test"}))
    assert 'invalid port number: "70000"' in line and "postgres:***@127.0.0.1:70000" in line, line


@pytest.mark.parametrize(("url", "problem"), [
    ("notascheme://", "unknown database dialect or driver"),
    ("postgresql+psycopg://webrl:s3cret-pw@127.0.0.1:notaport/webrl", "its port is not a number"),
    ("postgresql+psycopg://webrl:s3cret-pw/webrl", "its port is not a number"),  # the '@' forgotten
    ("not a url", "not a database URL"),
    ("mysql://webrl:s3cret-pw@127.0.0.1/webrl", "the driver of 'mysql' is not installed"),
])
def test_db_upgrade_with_a_malformed_database_url_is_one_line(settings: Settings, url: str, problem: str) -> None:
    line = _one_line_error(_run(settings, "db", "upgrade", env={"WEBRL_DATABASE__URL": url}))
    assert problem in line and "WEBRL_DATABASE__URL" in line
    assert "s3cret" not in line


def test_an_invalid_database_url_is_not_quoted_by_the_settings_error() -> None:
    """A service that fails to start on it prints the settings error in its traceback: no password there."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as refused:
        Settings(database={"url": "postgresql+psycopg://webrl:s3cret-pw@127.0.0.1:notaport/webrl"}, _env_file=None)
    assert "s3cret" not in str(refused.value) and "port is not a number" in str(refused.value)


def test_train_and_eval_refuse_an_actor_the_services_may_not_load(settings: Settings, tmp_path: Path) -> None:
    """The trainer and the rollout workers load only folders a request may name (webrl.serving.paths): an actor
    elsewhere is refused as a bad --actor naming the setting that allows it (typer's usage error), before anything
    runs."""
    import shutil

    elsewhere = tmp_path / "actor"
    shutil.copytree(TINY_ACTOR, elsewhere)
    for args in (("eval", "--actor", str(elsewhere), "--limit", "1"), ("train", "--actor", str(elsewhere)),
                 ("train-orm", "--actor", str(elsewhere))):
        done = _run(settings, *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        words = " ".join(done.stderr.replace("│", " ").split())
        assert "Invalid value for --actor" in words and "WEBRL_SECURITY__MODEL_DIRS" in words, words


@pytest.mark.parametrize(("args", "problem"), [
    (("serve", "taskgen", "--host", "no-such-host.invalid"), "cannot listen on no-such-host.invalid"),
    (("sites", "serve", "--site", "shopping", "--port-offset", "70000"), "out of range (0-65535)"),
    (("db", "upgrade", "no-such-revision"), "no-such-revision"),
])
def test_an_address_or_revision_that_cannot_be_used_is_one_line(settings: Settings, args: tuple[str, ...],
                                                                problem: str) -> None:
    line = _one_line_error(_run(settings, *args, env={"WEBRL_SECURITY__API_KEY": "k" * 32}))
    assert problem in line, line


def test_a_bad_path_or_value_is_refused_naming_its_option_before_any_work(settings: Settings,
                                                                          tmp_path: Path) -> None:
    """Each mistake is typer's usage error (exit 2) naming the option, in the process that parses it: no database,
    no browser, no model is touched first."""
    from typer.testing import CliRunner

    from webrl.cli import app

    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    a_file = tmp_path / "report.md"
    a_file.write_text("kept\n")
    broken_actor = _copy_with_broken_json(tmp_path / "broken-actor")
    assert settings.artifacts_dir is not None  # the trainer reads a --probe only there
    cut_probe = _cut_gzip(settings.artifacts_dir / "cut.jsonl.gz")
    folder_probe = tmp_path / "folder.jsonl.gz"
    folder_probe.mkdir()
    off_list = _task_file(tmp_path / "off-list.json", "http://example.com/")
    no_tasks = tmp_path / "none.json"
    no_tasks.write_text("[]")
    tiny = str(TINY_ACTOR)
    cases = [
        (["eval", "--actor", str(TINY_ACTOR), "--split", "val"], "--split", "got val"),
        (["tasks", "export", "--out", str(tmp_path)], "--out", "is a folder"),
        (["evaluation", "show", "--actor", str(tmp_path / "typo")], "--actor", "no model at"),
        (["evaluation", "store", "--actor", str(TINY_ACTOR), "--into", str(a_file)], "--into", "is a file"),
        (["probe", "build", "--actor", str(not_a_model), "--output", "p.jsonl.gz"], "--actor", "no model at"),
        (["probe", "anchors", "--actor", str(not_a_model), "--output", "a.jsonl.gz"], "--actor", "no model at"),
        (["train", "--actor", str(TINY_ACTOR), "--report", str(a_file)], "--report", "is a file"),
        (["serve", "taskgen", "--port", "70000"], "--port", "65535"),
        (["train", "--actor", str(TINY_ACTOR), "--max-attempts", "3"], "--max-attempts", "--min-solved"),
        (["train", "--actor", str(TINY_ACTOR), "--min-solved", "6"], "--min-solved", "--max-attempts 2 or more"),
        (["train", "--actor", str(TINY_ACTOR), "--no-curriculum", "--value-low", "0.1"], "--value-low",
         "the curriculum is off"),
        (["train-orm", "--actor", str(TINY_ACTOR), "--policy", "checkpoint:/etc"], "--policy",
         "outside the artifacts store"),
        (["train-orm", "--actor", str(TINY_ACTOR), "--output", str(tmp_path / "orm")], "--output",
         "outside the artifacts store"),
        # a curriculum count above what a phase's requests carry (GenerateRequest.n, parent_keys, FilterRequest)
        (["train", "--actor", tiny, "--candidates-per-phase", "10001"], "--candidates-per-phase", "10000"),
        (["train", "--actor", tiny, "--tasks-per-phase", "5001"], "--tasks-per-phase", "5000"),
        (["train", "--actor", tiny, "--candidates-per-phase", "10000", "--solved-share", "0.5"],
         "--candidates-per-phase", "above the 10000 one filter request carries"),
        (["train", "--actor", tiny, "--min-solved", "1", "--max-attempts", "1000"], "--max-attempts",
         "above the 10000 one labelling request carries"),
        # a seed numpy's set_seed refuses (a probe's is also an attempt number: an INTEGER column)
        (["train", "--actor", tiny, "--seed", "-1"], "--seed", "greater than or equal to 0"),
        (["train", "--actor", tiny, "--seed", str(2**32)], "--seed", "4294967295"),
        (["bootstrap", "--seed", "-1"], "--seed", "greater than or equal to 0"),
        (["train-orm", "--actor", tiny, "--seed", str(2**32)], "--seed", "4294967295"),
        (["tasks", "load", "--seed", "-1"], "--seed", "greater than or equal to 0"),
        (["probe", "build", "--actor", tiny, "--output", "p.jsonl.gz", "--seed", str(2**31)], "--seed",
         "2147483647"),
        # more browser episodes than one rollout job runs
        (["eval", "--actor", tiny, "--concurrency", "65"], "--concurrency", "64"),
        (["evaluation", "store", "--actor", tiny, "--concurrency", "65"], "--concurrency", "64"),
        (["probe", "anchors", "--actor", tiny, "--output", "a.jsonl.gz", "--concurrency", "65"], "--concurrency",
         "64"),
        (["bootstrap", "--concurrency", "65"], "--concurrency", "64"),
        (["train-orm", "--actor", tiny, "--concurrency", "65"], "--concurrency", "64"),
        # a rate, budget or rank the job refuses, refused before the rollouts and the base that come first
        (["bootstrap", "--lr", "0"], "--lr", "must be above 0, got 0"),
        (["bootstrap", "--lora-rank", "2000"], "--lora-rank", "1024"),
        (["train-orm", "--actor", tiny, "--lr", "0"], "--lr", "must be above 0"),
        (["train-orm", "--actor", tiny, "--max-minutes", "0"], "--max-minutes", "must be above 0"),
        (["train", "--actor", tiny, "--run", "r" * 81], "--run", "at most 80 characters"),  # runs.name String(80)
        (["train", "--actor", tiny, "--probe", str(cut_probe)], "--probe", "cut or corrupt gzip"),
        (["probe", "anchors", "--actor", tiny, "--output", "a.jsonl.gz", "--exclude", str(cut_probe)], "--exclude",
         "cut or corrupt gzip"),
        (["eval", "--actor", str(broken_actor)], "--actor", "generation_config.json is not JSON"),
        (["train", "--actor", str(broken_actor)], "--actor", "generation_config.json is not JSON"),
        # an output place that cannot be written, refused before the work
        (["train-orm", "--actor", tiny, "--report-dir", str(a_file)], "--report-dir", "is a file"),
        (["report", "some-run", "--output", str(a_file)], "--output", "is a file"),
        (["tasks", "export", "--out", str(a_file / "x.json")], "--out", "is a file, so"),
        (["probe", "build", "--actor", tiny, "--output", str(folder_probe)], "--output", "is a folder"),
        (["probe", "anchors", "--actor", tiny, "--output", str(a_file / "a.jsonl.gz")], "--output",
         "is a file, so"),
        # a task file no episode could start from
        (["eval", "--actor", tiny, "--tasks", str(off_list)], "--tasks",
         "entry 0 (task_id 1): host example.com is not on the allow-list"),
        (["eval", "--actor", tiny, "--tasks", str(no_tasks)], "--tasks", "holds no task configs"),
    ]
    for args, option, problem in cases:
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200", "WEBRL_HOME": str(settings.home)})
        words = " ".join(result.output.replace("│", " ").replace("'", "").split())
        assert result.exit_code == 2, (args, result.output)
        assert f"Invalid value for {option}" in words and problem in words, (args, words)
    assert a_file.read_text() == "kept\n"
    assert not (settings.home / "webrl.db").exists()  # refused before the database was created


def _copy_with_broken_json(folder: Path) -> Path:
    """A copy of the tiny actor whose generation_config.json is cut short (no longer JSON)."""
    import shutil

    shutil.copytree(TINY_ACTOR, folder)
    (folder / "generation_config.json").write_text('{"bos_token_id": ')
    return folder


def _cut_gzip(path: Path) -> Path:
    """A probe file cut in the middle of its gzip stream (what a killed copy leaves)."""
    data = (REPO / "webrl" / "assets" / "probe-smollm2.jsonl.gz").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _task_file(path: Path, start_url: str) -> Path:
    path.write_text(json.dumps([{"task_id": 1, "sites": ["shopping"], "intent": "Buy a mug",
                                 "start_url": start_url}]))
    return path
