"""The results store: what a run leaves in it, two writers at once, a store that cannot be written,
the index rebuilt from the folders, and `fastbench runs` listing, filtering and exporting."""

from __future__ import annotations

import copy
import csv
import datetime
import gzip
import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from fastbench import BenchConfig, ConfigError, api, run
from fastbench.cli import command as cli
from fastbench.cli import runs as runs_cli
from fastbench.cli import tomlconfig
from fastbench.exceptions import StoreError
from fastbench.study import store as run_store
from fastbench.study.runfile import flat_keys, load_result, per_request_values, read_records
from fastbench.study.store import KEY_FIGURES, SCHEMA_VERSION, Store
from fastbench.synthetic import SyntheticServer

SMALL = dict(num_prompts=12, concurrency=4, random_input_len=32, random_output_len=8,
             synthetic_args=("--ttft-ms", "20", "--itl-ms", "5"))


def fastbench(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real run against the synthetic server, kept in a store and written to files beside it."""
    where = tmp_path_factory.mktemp("stored")
    config = BenchConfig(**SMALL, store=where / "store", label="first", variant="base",  # type: ignore[arg-type]
                         result_json=where / "r.json", save_detailed=where / "d.jsonl")
    result = run(config)
    return {"where": where, "store": where / "store", "result": result, "config": config}


def _doc(stored: dict[str, Any]) -> dict[str, Any]:
    return load_result(stored["where"] / "r.json")


# -- what a run leaves --------------------------------------------------------------------------------

def test_a_run_with_a_store_is_kept_whole_and_indexed(stored: dict[str, Any]) -> None:
    result = stored["result"]
    assert result.run_id is not None
    folder = stored["store"] / "runs" / result.run_id
    assert sorted(p.name for p in folder.iterdir()) == ["card.md", "histograms.hlog", "requests.jsonl.gz",
                                                        "result.json"]  # attached: no server log to keep
    kept = load_result(folder / "result.json")
    written = _doc(stored)
    for key in ("completed", "failed", "p99_ttft_ms", "median_tpot_ms", "output_throughput", "ttfts"):
        assert kept[key] == written[key], key
    assert kept["fastbench"]["config"]["store"] == str(stored["store"])
    assert kept["fastbench"]["config"]["variant"] == "base"
    # the per-request records are --save-detailed's, byte for byte
    assert gzip.decompress((folder / "requests.jsonl.gz").read_bytes()) == (stored["where"] / "d.jsonl").read_bytes()
    assert "Measured results" in (folder / "card.md").read_text()
    hlog = (folder / "histograms.hlog").read_text().splitlines()
    tags = {line.split(",")[0] for line in hlog if line.startswith("Tag=")}
    assert {"Tag=ttft", "Tag=tpot", "Tag=itl", "Tag=decode_rate"} <= tags
    ttft_line = next(line for line in hlog if line.startswith("Tag=ttft,"))
    assert ttft_line.split(",")[-1] == kept["fastbench"]["histograms"]["ttft"]["data"]

    with Store(stored["store"]) as store:
        (row,) = store.query()
    assert row.run_id == result.run_id and row.has_records
    assert (row.meta.label, row.meta.variant, row.meta.model, row.meta.engine, row.meta.concurrency) == (
        "first", "base", kept["model_id"], "synthetic", 4)
    assert row.meta.request_rate is None and row.meta.completed == 12 and row.meta.stopped_reason == "completed"
    flat = flat_keys(kept)
    for name in KEY_FIGURES:
        if flat.get(name) is not None:
            assert row.figures[name] == pytest.approx(flat[name]), name
    assert row.figures["median_decode_rate_tok_s"] == pytest.approx(
        kept["fastbench"]["distributions"]["decode_rate"]["median_tok_s"])


def test_the_per_request_series_are_those_the_result_reports(stored: dict[str, Any]) -> None:
    """Recomputed from the kept records, each series gives the result file's own figures."""
    folder = stored["store"] / "runs" / stored["result"].run_id
    doc = load_result(folder / "result.json")
    values = per_request_values(read_records(folder / "requests.jsonl.gz"))
    dists = doc["fastbench"]["distributions"]
    for name, key in (("ttft", "median_ms"), ("tpot", "median_ms"), ("e2el", "p99_ms"),
                      ("decode_rate", "median_tok_s"), ("prefill_rate", "mean_tok_s")):
        stat = key.split("_")[0]
        got = float(np.mean(values[name])) if stat == "mean" else float(
            np.percentile(values[name], 50.0 if stat == "median" else 99.0))
        assert got == pytest.approx(dists[name][key], rel=1e-6), name


# -- two writers ---------------------------------------------------------------------------------------

_WRITER = """
import sys, time
from fastbench.study.runfile import load_result
from fastbench.study.store import Store
doc = load_result(sys.argv[2])
records = open(sys.argv[3], "rb").read()
go = sys.argv[4]
print("ready", flush=True)  # imported and loaded: the test starts both at once
while not __import__("os").path.exists(go):
    time.sleep(0.001)
spans = []
for i in range(int(sys.argv[5])):
    doc["fastbench"]["config"]["label"] = f"{sys.argv[6]}-{i}"
    start = time.time()
    with Store(sys.argv[1], create=True) as store:
        store.add(doc, card="card", records_jsonl=records)
    spans.append((start, time.time()))
print(min(s for s, _ in spans), max(e for _, e in spans))
"""


def test_two_processes_writing_to_one_store_corrupt_nothing(stored: dict[str, Any], tmp_path: Path) -> None:
    root, go, each = tmp_path / "shared", tmp_path / "go", 25
    # both create the store too: its schema is made once
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(root), str(stored["where"] / "r.json"),
                                 str(stored["where"] / "d.jsonl"), str(go), str(each), name],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name in ("a", "b")]
    for proc in writers:  # both imported and waiting (a fixed sleep was too short on a loaded host)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
    go.touch()
    spans = []
    for proc in writers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        spans.append(tuple(float(x) for x in out.split()))
    (a_start, a_end), (b_start, b_end) = spans
    assert a_start < b_end and b_start < a_end, "the writers did not overlap: the test tested nothing"

    with Store(root) as store:
        runs = store.query()
        assert store._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert store._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    labels = sorted(r.meta.label or "" for r in runs)
    assert labels == sorted([f"{n}-{i}" for n in "ab" for i in range(each)])
    assert len({r.run_id for r in runs}) == 2 * each
    assert not [p for p in (root / "runs").iterdir() if p.name.startswith(".")]  # no half-written folder
    whole = load_result(stored["where"] / "r.json")
    for r in runs:
        doc = load_result(Path(r.folder) / "result.json")
        assert doc["fastbench"]["config"]["label"] == r.meta.label
        assert doc["p99_ttft_ms"] == whole["p99_ttft_ms"]
        assert gzip.decompress((Path(r.folder) / "requests.jsonl.gz").read_bytes()) == \
            (stored["where"] / "d.jsonl").read_bytes()


# -- a store that cannot be written ----------------------------------------------------------------------

def _is_a_file(tmp: Path) -> tuple[Path, str]:
    (tmp / "f").write_text("x")
    return tmp / "f", "is not a directory"


def _under_a_file(tmp: Path) -> tuple[Path, str]:
    (tmp / "f").write_text("x")
    return tmp / "f" / "store", "cannot create"


def _index_not_a_database(tmp: Path) -> tuple[Path, str]:
    (tmp / "s").mkdir()
    (tmp / "s" / "index.sqlite").write_bytes(b"this is no database, only text that is long enough" * 100)
    return tmp / "s", "file is not a database"


def _runs_is_a_file(tmp: Path) -> tuple[Path, str]:
    (tmp / "s").mkdir()
    (tmp / "s" / "runs").write_text("x")
    return tmp / "s", "cannot create"


def _newer_index(tmp: Path) -> tuple[Path, str]:
    Store(tmp / "s", create=True).close()
    db = sqlite3.connect(tmp / "s" / "index.sqlite")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    return tmp / "s", f"index schema {SCHEMA_VERSION + 1} is newer than this fastbench reads"


@pytest.mark.parametrize("make", [_is_a_file, _under_a_file, _index_not_a_database, _runs_is_a_file, _newer_index],
                         ids=lambda f: f.__name__.strip("_"))
def test_an_unwritable_store_fails_before_anything_is_sent(tmp_path: Path, make: Any) -> None:
    root, words = make(tmp_path)
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        with pytest.raises(ConfigError) as refused:
            run(BenchConfig(base_url=server.base_url, num_prompts=2, store=root))
        assert server.stats()["generation_requests"] == 0
        proc = fastbench("--base-url", server.base_url, "--num-prompts", "2", "--store", str(root),
                         "--result-json", str(tmp_path / "r.json"))
        assert server.stats()["generation_requests"] == 0
    message = str(refused.value)
    assert message.startswith(f"--store {root}: ") and words in message and "\n" not in message
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"fastbench: error: {message}"]
    assert not (tmp_path / "r.json").exists()


def test_a_store_that_fails_after_the_run_keeps_the_result_files(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The store is written last: a failure there is reported, and every other file is written."""
    def fail(*args: Any, **kwargs: Any) -> str:
        raise StoreError("disk full")

    monkeypatch.setattr(run_store.Store, "add", fail)
    from fastbench import ResultWriteError

    with pytest.raises(ResultWriteError) as failed:
        run(BenchConfig(**SMALL, store=tmp_path / "s", result_json=tmp_path / "r.json"))  # type: ignore[arg-type]
    assert str(failed.value) == f"could not store the run in --store {tmp_path / 's'}: disk full"
    assert failed.value.result.counts.completed == 12 and failed.value.result.run_id is None
    assert load_result(tmp_path / "r.json")["completed"] == 12


# -- the index: migrations and rebuilding ---------------------------------------------------------------

def test_an_index_at_version_0_is_migrated_in_place(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    sqlite3.connect(tmp_path / "s" / "index.sqlite").close()  # an empty database: user_version 0
    with Store(tmp_path / "s") as store:
        assert store._db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert store.count() == 0


def test_a_version_1_index_is_migrated_with_its_rows_listed_as_before(stored: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """Version 2 packs a row's listing into one text (see store.py); a version 1 index's rows, migrated
    by SQL alone, list the same meta and figures as a row written by version 2, infinity as None."""
    doc = _doc(stored)
    with Store(tmp_path / "new", create=True) as store:
        new = store.query()[0] if store.add(doc) else None
    assert new is not None
    root = tmp_path / "old"
    (root / "runs").mkdir(parents=True)
    db = sqlite3.connect(root / "index.sqlite", isolation_level=None)
    for statement in run_store.MIGRATIONS[0]:
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    row = {"run_id": "20250101-000000-abcdef", "folder": "runs/20250101-000000-abcdef", "stored_unix": 0.0,
           "has_records": 1, **new.meta._asdict(), "collapsed": 0, **new.figures, "p99_itl_ms": float("inf")}
    db.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", tuple(row.values()))
    db.close()
    with Store(root) as store:
        (old,) = store.query()
    assert store_version(root) == SCHEMA_VERSION
    assert old.meta == new.meta and old.has_records and old.folder == str(root / "runs" / old.run_id)
    assert old.figures == {**new.figures, "p99_itl_ms": None}


def store_version(root: Path) -> int:
    db = sqlite3.connect(root / "index.sqlite")
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_the_index_is_rebuilt_from_the_folders(stored: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "s"
    doc = _doc(stored)
    with Store(root, create=True) as store:
        ids = [store.add(_relabelled(doc, label=f"r{i}")) for i in range(3)]
    (root / "runs" / ".tmp-123-abc").mkdir()  # a writer killed mid-folder: never read
    broken = root / "runs" / "20200101-000000-000000"
    broken.mkdir()
    (broken / "result.json").write_text("{")
    (root / "index.sqlite").unlink()
    with Store(root) as store:  # no index: rebuilt on opening
        assert sorted(r.run_id for r in store.query()) == sorted(ids)
        assert sorted(r.meta.label or "" for r in store.query()) == ["r0", "r1", "r2"]
    proc = fastbench("runs", "--store", str(root), "--reindex")
    assert proc.returncode == 0, proc.stderr
    assert "indexed 3 runs" in proc.stdout
    assert "20200101-000000-000000/result.json: not valid JSON" in proc.stderr


def test_a_run_id_is_found_by_a_unique_prefix(stored: dict[str, Any], tmp_path: Path) -> None:
    doc = _doc(stored)
    with Store(tmp_path / "s", create=True) as store:
        first, second = store.add(doc), store.add(doc)
        assert store.resolve(first).run_id == first
        assert store.resolve(second[:-2]).run_id == second or first[:-2] == second[:-2]
        common = os.path.commonprefix([first, second])
        with pytest.raises(StoreError, match="names several runs"):
            store.resolve(common)
        with pytest.raises(StoreError, match="no run 'zzz'"):
            store.resolve("zzz")


# -- fastbench runs ------------------------------------------------------------------------------------

_KEEP: Any = object()


def _relabelled(doc: dict[str, Any], *, label: str | None = None, model: str | None = None,
                variant: str | None = _KEEP, created: datetime.datetime | None = None,
                p99_ttft_ms: float | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    config = doc["fastbench"]["config"]
    if label is not None:
        config["label"] = label
    if variant is not _KEEP:
        config["variant"] = variant
    if model is not None:
        doc["model_id"] = model
    if created is not None:
        doc["fastbench"]["created_at"] = created.astimezone().isoformat(timespec="seconds")
    if p99_ttft_ms is not None:
        doc["p99_ttft_ms"] = p99_ttft_ms
    return doc


@pytest.fixture()
def many(stored: dict[str, Any], tmp_path: Path) -> Path:
    """A store of six runs made from the real one, differing in label, model, variant and date."""
    doc = _doc(stored)
    root = tmp_path / "many"
    day = datetime.datetime(2025, 3, 1, 12, 0)
    with Store(root, create=True) as store:
        for i, (label, model, variant) in enumerate([
                ("sweep-a", "gemma", "base"), ("sweep-a", "gemma", "eagle3"), ("sweep-b", "gemma", "ngram"),
                ("solo", "qwen", "base"), ("solo", "qwen", None), ("sweep-b", "qwen", "eagle3")]):
            store.add(_relabelled(doc, label=label, model=model, variant=variant,
                                  created=day + datetime.timedelta(days=i), p99_ttft_ms=100.0 + i))
    return root


def _listed(root: Path, *args: str) -> list[str]:
    proc = fastbench("runs", "--store", str(root), "--ids", *args)
    assert proc.returncode == 0, proc.stderr
    with Store(root) as store:
        labels = {r.run_id: (r.meta.label, r.meta.model, r.meta.variant) for r in store.query()}
    return [f"{labels[i][0]}/{labels[i][1]}/{labels[i][2]}" for i in proc.stdout.split()]


def test_runs_filters_by_label_model_variant_and_date(many: Path) -> None:
    assert _listed(many, "--label", "sweep-*") == ["sweep-a/gemma/base", "sweep-a/gemma/eagle3",
                                                   "sweep-b/gemma/ngram", "sweep-b/qwen/eagle3"]
    assert _listed(many, "--model", "qwen", "--variant", "eagle3") == ["sweep-b/qwen/eagle3"]
    assert _listed(many, "--since", "2025-03-03", "--until", "2025-03-04") == ["sweep-b/gemma/ngram",
                                                                              "solo/qwen/base"]
    assert _listed(many, "--last", "2") == ["solo/qwen/None", "sweep-b/qwen/eagle3"]
    assert _listed(many, "--label", "nothing") == []


def test_runs_lists_a_table_and_says_when_nothing_matches(many: Path) -> None:
    proc = fastbench("runs", "--store", str(many), "--variant", "eagle3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:5] == ["run", "created", "label", "variant", "model"]
    assert len(lines) == 4 and lines[-1].startswith("2 runs")
    assert "2025-03-02 12:00" in lines[1] and "eagle3" in lines[1] and "101.0" in lines[1]
    proc = fastbench("runs", "--store", str(many), "--label", "x")
    assert proc.stdout.strip() == f"no runs match in {many} (6 stored)"


def test_runs_exports_csv_with_every_flat_key(many: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs.csv"
    proc = fastbench("runs", "--store", str(many), "--model", "gemma", "--csv", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [row["variant"] for row in rows] == ["base", "eagle3", "ngram"]
    assert [float(row["p99_ttft_ms"]) for row in rows] == [100.0, 101.0, 102.0]
    for key in ("median_decode_rate_tok_s", "p99.9_tpot_ms", "config.concurrency", "config.variant",
                "output_throughput", "stopped_reason"):
        assert key in rows[0], key
    assert rows[0]["config.concurrency"] == "4"


@pytest.mark.parametrize("args,words", [
    (["--since", "yesterday"], "expected a date (2025-03-01)"),
    (["--last", "0"], "--last must be at least 1"),
    (["--csv", "/nonexistent/x.csv"], "--csv /nonexistent/x.csv: No such file or directory"),
])
def test_runs_bad_input_is_one_line(many: Path, args: list[str], words: str) -> None:
    proc = fastbench("runs", "--store", str(many), *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr


def test_runs_without_a_store_names_the_one_it_looked_for(tmp_path: Path) -> None:
    proc = fastbench("runs", cwd=tmp_path, env={"FASTBENCH_STORE": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("fastbench runs: error: fastbench-runs: no fastbench store here (no index.sqlite); "
                                   "runs land in one with fastbench --store DIR")
    assert not (tmp_path / "fastbench-runs").exists()  # looking creates nothing


def test_runs_add_keeps_result_files_with_their_records(stored: dict[str, Any], tmp_path: Path) -> None:
    proc = fastbench("runs", "--store", str(tmp_path / "s"), "--add", str(stored["where"] / "r.json"))
    assert proc.returncode == 0, proc.stderr
    with Store(tmp_path / "s") as store:
        (row,) = store.query()
    assert row.has_records and proc.stdout.split()[0] == row.run_id
    assert gzip.decompress((Path(row.folder) / "requests.jsonl.gz").read_bytes()) == \
        (stored["where"] / "d.jsonl").read_bytes()


def test_a_store_is_an_option_of_a_config_file(tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('[benchmark]\nstore = "kept"\nvariant = "eagle3"\n')
    parser = cli.build_parser()
    path, argv = tomlconfig.expand(["--config", str(toml)], parser)
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert (config.store, config.variant) == ("kept", "eagle3")
    assert api.runs.OUTPUT_FLAGS  # the store is checked with the outputs, before the run
    with pytest.raises(ConfigError, match="--store .*is not a directory"):
        api.validate(config.replace(store=str(toml)))


def test_parse_when_takes_dates_times_and_spans() -> None:
    now = datetime.datetime(2025, 3, 10, 12, 0)
    assert runs_cli.parse_when("2025-03-01") == datetime.datetime(2025, 3, 1).timestamp()
    assert runs_cli.parse_when("2025-03-01", end_of_day=True) == datetime.datetime(2025, 3, 2).timestamp()
    assert runs_cli.parse_when("2025-03-01T14:30") == datetime.datetime(2025, 3, 1, 14, 30).timestamp()
    assert runs_cli.parse_when("36h", now=now) == datetime.datetime(2025, 3, 9, 0, 0).timestamp()
    assert runs_cli.parse_when("7d", now=now) == datetime.datetime(2025, 3, 3, 12, 0).timestamp()


def test_the_flat_keys_name_fastbench_figures_as_vllm_names_its_own() -> None:
    doc = {"p99_ttft_ms": 0, "ttfts": [0.1], "fastbench": {
        "distributions": {"ttft": {"count": 3, "p99_ms": 5.0}, "decode_rate": {"count": 2, "median_tok_s": 40.0,
                                                                             "p99.9_tok_s": 41.0}},
        "throughput": {"prefill_throughput_tok_s": 900.0}, "run": {"stopped_reason": "completed"}}}
    flat = flat_keys(doc)
    assert flat["p99_ttft_ms"] == 0  # the top level (vLLM's reading) wins
    assert flat["median_decode_rate_tok_s"] == 40.0 and flat["p99.9_decode_rate_tok_s"] == 41.0
    assert flat["decode_rate_count"] == 2 and flat["prefill_throughput_tok_s"] == 900.0
    assert "ttfts" not in flat and orjson.dumps(flat)


def test_a_launched_servers_log_is_kept_from_its_launch_with_secrets_redacted(tmp_path: Path) -> None:
    from support.fakevllm import free_port, write_fake_engines
    from fastbench import LaunchConfig

    vllm, _ = write_fake_engines(tmp_path / "bin")
    key, token = "sk-store-secret-0123456789", "hf_store_secret_0123456789"
    ids = []
    for _ in range(2):  # one --server-log for both: each run keeps its own launch's lines only
        launch = LaunchConfig(engine="vllm", model="fake/model", engine_bin=str(vllm), port=free_port(),
                              engine_args=("--api-key", key, "--served-model-name", "fake-model",
                                           "--max-model-len", "2048", "--hf-note", token),
                              env=("FAKE_SYNTH_ARGS=--itl-ms 4 --ttft-ms 10", f"HF_TOKEN={token}"),
                              log_path=str(tmp_path / "server.log"), ready_timeout_s=20.0, stop_grace_s=3.0)
        result = run(BenchConfig(launch=launch, api_key=key, num_prompts=4, concurrency=2, random_input_len=8,
                                 random_output_len=8, store=tmp_path / "s", variant="fake"))
        ids.append(result.run_id)
    with Store(tmp_path / "s") as store:
        rows = {r.run_id: r for r in store.query()}
    for run_id in ids:
        assert rows[run_id].meta.engine == "vllm" and rows[run_id].meta.model == "fake-model"
        kept = (Path(rows[run_id].folder) / "server.log").read_text()
        assert kept.startswith("# fastbench: the server's log from its launch to the measured window\n")
        assert kept.count("launching: ") == 1 and "Model loading took 0.51 GiB" in kept
        assert "# fastbench: the measured window's warnings, errors" in kept
        assert token not in kept and key not in kept
    raw = (tmp_path / "server.log").read_text()
    assert raw.count("launching: ") == 2
    # the engine logged its arguments and its environment's token: hidden before they reached the disk
    assert "'--api-key', '***'" in raw and key not in raw and token not in raw


# -- what a killed writer leaves -------------------------------------------------------------------------

KILLED_WRITER = """
import os, sys, time
from pathlib import Path
import orjson
from fastbench import atomicfile
from fastbench.study import store as run_store

root, doc_path = Path(sys.argv[1]), sys.argv[2]
real_write = run_store.write_synced
def write_then_hang(path, data):
    real_write(path, data)
    if path.name == run_store.RECORDS_FILE:  # the folder half written: killed here
        print("ready", flush=True)
        time.sleep(600)
run_store.write_synced = write_then_hang
def hang(src, dst):  # the temporary written whole, killed before its rename
    atomicfile.os.replace = real_replace
    with run_store.Store(root) as store:
        store.add(orjson.loads(Path(doc_path).read_bytes()), records_jsonl=os.urandom(1 << 20))
real_replace = atomicfile.os.replace
atomicfile.os.replace = hang
atomicfile.write_bytes_atomic(root / "sweeps" / "summary.csv", os.urandom(1 << 20))
"""


def test_reindex_removes_what_a_killed_writer_left_and_says_so(stored: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "s"
    with Store(root, create=True) as store:
        kept_id = store.add(_doc(stored))
    (root / "sweeps").mkdir()
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), str(stored["where"] / "r.json")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    finally:
        writer.kill()
        writer.wait()
    left_folders = [p for p in (root / "runs").iterdir() if p.name.startswith(".tmp-")]
    left_files = list((root / "sweeps").glob(f".summary.csv.{writer.pid}.*.tmp"))
    assert len(left_folders) == 1 and len(left_files) == 1
    # a writer still at work (this process) keeps its temporaries
    live_folder = root / "runs" / f".tmp-{os.getpid()}-0123abcd"
    live_folder.mkdir()
    live_file = root / f".card.md.{os.getpid()}.00ff.tmp"
    live_file.write_bytes(b"x")
    proc = fastbench("runs", "--store", str(root), "--reindex")
    assert proc.returncode == 0, proc.stderr
    assert "indexed 1 run " in proc.stdout
    assert f"removed {left_folders[0]}/ (1.1 MB, a run folder" in proc.stdout  # the records and the result
    assert f"removed {left_files[0]} (1.0 MB" in proc.stdout
    assert not left_folders[0].exists() and not left_files[0].exists()
    assert live_folder.is_dir() and live_file.is_file() and (root / "runs" / kept_id / "result.json").is_file()


def test_an_index_with_tables_but_no_version_is_refused_naming_the_versions(tmp_path: Path) -> None:
    (tmp_path / "s" / "runs").mkdir(parents=True)
    db = sqlite3.connect(tmp_path / "s" / "index.sqlite")
    db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY)")  # another program's, or unversioned
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=f"index schema unknown .*reads version {SCHEMA_VERSION}.*delete "):
        Store(tmp_path / "s")
    proc = fastbench("runs", "--store", str(tmp_path / "s"))
    assert proc.returncode != 0 and "already exists" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "index schema unknown" in proc.stderr


def test_an_older_index_that_cannot_be_migrated_names_both_versions(tmp_path: Path) -> None:
    (tmp_path / "s" / "runs").mkdir(parents=True)
    db = sqlite3.connect(tmp_path / "s" / "index.sqlite")
    db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, listing TEXT)")  # not the version 1 it claims
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=f"index schema 1 could not be brought to version {SCHEMA_VERSION}"):
        Store(tmp_path / "s")
