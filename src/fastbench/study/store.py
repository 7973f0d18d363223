"""The results store: a folder per run (the truth) and a SQLite index beside them (a cache of them,
rebuildable from the folders with :meth:`Store.reindex`).

Layout of a store directory::

    index.sqlite            one row per run: who and what it measured, key figures, config and flat keys
    runs/<run id>/
        result.json         the result file (docs/result-schema.md)
        card.md             the run card
        requests.jsonl.gz   the per-request records (--save-detailed's format), gzip
        histograms.hlog     the run's HDR histograms in HdrHistogram's log format, one tagged line each
        server.log          a launched server's loading log and the window's warnings (when launched)

Writers never disturb each other or a reader: a run's folder is written under a temporary name
(``runs/.tmp-...``) and renamed into place whole, and its index row is added in one transaction
afterwards; the index runs in WAL mode, so readers never block the writer, and two writers queue
for its lock (``busy_timeout``). A writer killed between the rename and the row leaves a complete
folder that :meth:`Store.reindex` indexes; a writer killed earlier leaves a ``.tmp-`` folder that
nothing reads, and which reindex removes once that writer's process is gone (``study.leftovers``).

The index's schema is versioned by ``PRAGMA user_version``. :data:`MIGRATIONS` holds, per version, the
statements that take an index from it to the next; opening an older index applies the missing ones
in one transaction. An index newer than this fastbench is refused (upgrade fastbench), and since the
folders hold everything, deleting ``index.sqlite`` and reindexing is always a way back.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import gzip
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from fastbench.atomicfile import fsync_directory, write_synced
from fastbench.exceptions import ConfigError, StoreError
from fastbench.study.leftovers import remove_leftovers
from fastbench.study.runfile import RunMeta, Scalar, flat_keys, load_result, run_meta
from fastbench.study.sustained import with_sustained

__all__ = ("KEY_FIGURES", "MIGRATIONS", "SCHEMA_VERSION", "Reindexed", "Store", "StoredRun", "check_store_path")

INDEX_NAME = "index.sqlite"
RUNS_DIR = "runs"
RESULT_FILE = "result.json"
CARD_FILE = "card.md"
RECORDS_FILE = "requests.jsonl.gz"
HISTOGRAMS_FILE = "histograms.hlog"
SERVER_LOG_FILE = "server.log"
BUSY_TIMEOUT_S = 60.0  # a writer waits this long for another's transaction (each takes milliseconds)

# Figures kept as columns of their own, so that listing and sorting 10,000 runs reads no JSON.
KEY_FIGURES: tuple[str, ...] = (
    "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms",
    "median_decode_rate_tok_s", "median_prefill_rate_tok_s", "spec_decode_acceptance_length",
)
_META_COLUMNS: tuple[str, ...] = RunMeta._fields
_COLLAPSED = _META_COLUMNS.index("collapsed")
_FIGURES_AT = 1 + len(_META_COLUMNS)  # where KEY_FIGURES start in a row's listing
_COLUMNS = "run_id, listing"  # StoredRun's

_V1 = (
    "CREATE TABLE runs ("
    " run_id TEXT PRIMARY KEY, folder TEXT NOT NULL, stored_unix REAL NOT NULL, has_records INTEGER NOT NULL,"
    " created_at TEXT NOT NULL, created_unix REAL NOT NULL, label TEXT, model TEXT, variant TEXT, engine TEXT,"
    " concurrency INTEGER, request_rate REAL, num_prompts INTEGER, completed INTEGER, failed INTEGER,"
    " duration_s REAL, stopped_reason TEXT, collapsed INTEGER NOT NULL, result_schema INTEGER,"
    " fastbench_version TEXT, "
    + ", ".join(f"{name} REAL" for name in KEY_FIGURES) + ")",
    # The configuration and flat keys (kilobytes a run) in a table of their own: a scan of runs then
    # reads a few hundred bytes a row instead of a chain of overflow pages.
    "CREATE TABLE run_data (run_id TEXT PRIMARY KEY, config_json TEXT NOT NULL, flat_json TEXT NOT NULL)",
    "CREATE INDEX runs_created ON runs (created_unix, run_id)",  # the listing's order, no sort
    "CREATE INDEX runs_label ON runs (label, created_unix)",
    "CREATE INDEX runs_model ON runs (model, created_unix)",
    "CREATE INDEX runs_variant ON runs (variant, created_unix)",
    "CREATE TABLE store_info (key TEXT PRIMARY KEY, value TEXT)",
)
# MIGRATIONS[v]: the statements (or, where SQL cannot, functions of the connection) that take an index
# at schema version v to v + 1 (0 is a new file), in the migration's one transaction. A
# new version appends its statements here (ALTER TABLE runs ADD COLUMN ...; filling it from the folders
# where it needs their data is reindex's job) and raises SCHEMA_VERSION; old entries never change.
# Version 2: ``listing``, a row's has_records, RunMeta and KEY_FIGURES values as one JSON array.
# Listing every run read them as 30 columns, and making 300,000 Python values out of them took 100-190
# ms for 10,000 runs here; one text a row, parsed when a run's meta or figures are first read, takes a
# third of that (bench/store_query.py). The columns stay: filters and the order use them.
_V2_LISTED = (  # as of version 2: never changes (a new figure is a new version's column)
    "has_records", "created_at", "created_unix", "label", "model", "variant", "engine", "concurrency",
    "request_rate", "num_prompts", "completed", "failed", "duration_s", "stopped_reason", "collapsed",
    "result_schema", "fastbench_version",
    "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
    "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms", "median_decode_rate_tok_s",
    "median_prefill_rate_tok_s", "spec_decode_acceptance_length",
)


def _fill_listings(db: sqlite3.Connection) -> None:
    """Version 2's listing of each row written by version 1 (in Python: SQLite's json_array keeps 15
    digits of a number and writes infinity as Inf, which no JSON parser reads; orjson round-trips)."""
    rows = db.execute(f"SELECT run_id, {', '.join(_V2_LISTED)} FROM runs").fetchall()
    db.executemany("UPDATE runs SET listing = ? WHERE run_id = ?",
                   ((orjson.dumps(list(row[1:])).decode(), row[0]) for row in rows))


_V2: tuple[str | Callable[[sqlite3.Connection], None], ...] = (
    "ALTER TABLE runs ADD COLUMN listing TEXT NOT NULL DEFAULT '[]'", _fill_listings)
MIGRATIONS: tuple[tuple[str | Callable[[sqlite3.Connection], None], ...], ...] = (_V1, _V2)
SCHEMA_VERSION = len(MIGRATIONS)


class Reindexed(NamedTuple):
    """What :meth:`Store.reindex` did."""

    indexed: int  # runs indexed
    skipped: list[str]  # a line per folder that could not be (its result file unreadable)
    removed: list[str]  # a line per temporary a killed writer left, removed (study.leftovers)


class StoredRun:
    """One row of the index. A listing makes 10,000 of them, so a row is its id and its listing text
    (has_records, RunMeta's values, KEY_FIGURES' values, as a JSON array), parsed on first use of
    anything but the id."""

    __slots__ = ("_figures", "_has_records", "_listing", "_meta", "_root", "run_id")

    def __init__(self, run_id: str, listing: str, root: str) -> None:
        self.run_id = run_id
        self._listing = listing
        self._root = root
        self._meta: RunMeta | None = None  # with _has_records and _figures, set by _parse

    def _parse(self) -> RunMeta:
        values = orjson.loads(self._listing)
        meta = values[1:_FIGURES_AT]
        meta[_COLLAPSED] = bool(meta[_COLLAPSED])
        self._has_records: bool = bool(values[0])
        self._figures: dict[str, float | None] = dict(zip(KEY_FIGURES, values[_FIGURES_AT:]))
        self._meta = parsed = RunMeta._make(meta)
        return parsed

    @property
    def folder(self) -> str:
        """The run's folder: the store's directory joined with runs/<run id>."""
        return os.path.join(self._root, RUNS_DIR, self.run_id)

    @property
    def has_records(self) -> bool:
        """Its per-request records are kept (requests.jsonl.gz)."""
        if self._meta is None:
            self._parse()
        return self._has_records

    @property
    def meta(self) -> RunMeta:
        return self._meta or self._parse()

    @property
    def figures(self) -> dict[str, float | None]:
        """KEY_FIGURES, by name."""
        if self._meta is None:
            self._parse()
        return self._figures

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoredRun) and (self.run_id, self._root, self._listing) == (
            other.run_id, other._root, other._listing)

    def __hash__(self) -> int:
        return hash((self.run_id, self.folder))

    def __repr__(self) -> str:
        return f"StoredRun({self.run_id!r}, folder={self.folder!r})"


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def check_store_path(root: str | os.PathLike[str], flag: str = "--store") -> None:
    """Raise ConfigError (one line) unless runs can be stored in ``root``: called before a run starts,
    so that a measured run is never lost for want of its store. Creates the store if it is new."""
    path = Path(root)
    if not str(root):
        raise ConfigError(f"{flag} needs a directory path")
    try:
        with Store(path, create=True) as store:
            store.probe_write()
    except StoreError as exc:
        raise ConfigError(f"{flag} {root}: {exc}") from None


class Store:
    """A results store at ``root`` (see the module docstring). ``create``: make it when absent;
    otherwise a directory without a store is refused."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False) -> None:
        self.root = Path(root)
        self._root_text = str(self.root)
        self.runs_dir = self.root / RUNS_DIR
        index = self.root / INDEX_NAME
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{root} is not a directory")
        if not index.exists() and not self.runs_dir.is_dir() and not create:
            raise StoreError(f"{root}: no fastbench store here (no {INDEX_NAME}); runs land in one with "
                             "fastbench --store DIR")
        rebuild = not index.exists()
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.runs_dir} ({_why(exc)})") from None
        try:
            self._db = sqlite3.connect(index, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {index} ({exc})") from None
        try:
            self._set_up_index()
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(f"{index}: {exc}") from None
        except BaseException:
            self._db.close()
            raise
        if rebuild and any(self._folders()):  # the index was deleted: the folders hold everything
            self.reindex()

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the write lock from its start (BEGIN IMMEDIATE), so that two
        writers queue instead of failing at their first write."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _set_up_index(self) -> None:
        """WAL mode and the schema. Two processes opening a new store at once can find each other
        switching the journal mode, which SQLite answers "database is locked" without waiting on its
        busy timeout (seen 1 run in 3 with two writers starting together): those are tried again."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                # The index is a cache of the folders: a power cut may lose its last rows, never corrupt it.
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _migrate(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version == SCHEMA_VERSION:
            return
        rebuild = f"delete {self.root / INDEX_NAME} to rebuild it from the run folders (nothing is lost)"
        with self._transaction() as db:
            (version,) = db.execute("PRAGMA user_version").fetchone()  # another process may have done it
            if version > SCHEMA_VERSION:
                raise StoreError(f"index schema {version} is newer than this fastbench reads ({SCHEMA_VERSION}): "
                                 f"upgrade fastbench, or {rebuild}")
            if version == 0 and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
                # tables without a version: written by another program, or a fastbench older than versioning
                raise StoreError(f"index schema unknown (tables but no version; this fastbench reads version "
                                 f"{SCHEMA_VERSION}): {rebuild}")
            try:
                for statements in MIGRATIONS[version:]:
                    for statement in statements:
                        if callable(statement):  # a step SQL alone cannot do
                            statement(db)
                        else:
                            db.execute(statement)
            except sqlite3.Error as exc:
                raise StoreError(f"index schema {version} could not be brought to version {SCHEMA_VERSION} ({exc}): "
                                 f"{rebuild}") from None
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def probe_write(self) -> None:
        """Raise StoreError unless both a run folder and an index row can be written now."""
        probe = self.runs_dir / f".tmp-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            probe.mkdir()
            (probe / "probe").write_bytes(b"")
        except OSError as exc:
            raise StoreError(f"cannot write in {self.runs_dir} ({_why(exc)})") from None
        finally:
            shutil.rmtree(probe, ignore_errors=True)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR REPLACE INTO store_info VALUES ('probe', ?)", (str(os.getpid()),))
            finally:
                self._db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write {self.root / INDEX_NAME} ({exc})") from None

    # -- writing ---------------------------------------------------------------------------------

    def add(self, doc: Mapping[str, Any], *, card: str | None = None, records_jsonl: bytes | None = None,
            server_log: str | None = None) -> str:
        """Keep one run: its result document, card, per-request records (JSONL bytes, as --save-detailed
        writes them) and server log lines; return its run id. The folder appears whole or not at all."""
        meta = run_meta(doc)
        tmp = self.runs_dir / f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
        try:
            tmp.mkdir()
            write_synced(tmp / RESULT_FILE, orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
                                                    | orjson.OPT_SERIALIZE_NUMPY))
            if card is not None:
                write_synced(tmp / CARD_FILE, card.encode("utf-8"))
            if records_jsonl is not None:
                write_synced(tmp / RECORDS_FILE, gzip.compress(records_jsonl, compresslevel=6, mtime=0))
            hlog = histogram_log(doc)
            if hlog:
                write_synced(tmp / HISTOGRAMS_FILE, hlog.encode("ascii"))
            if server_log:
                write_synced(tmp / SERVER_LOG_FILE, server_log.encode("utf-8"))
            run_id = self._rename_into_place(tmp, meta)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StoreError(f"cannot write a run folder in {self.runs_dir} ({_why(exc)})") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            with self._transaction() as db:
                self._insert(db, run_id, doc, meta, has_records=records_jsonl is not None)
        except sqlite3.Error as exc:
            raise StoreError(f"run {run_id} is kept in {self.runs_dir / run_id} but the index was not updated "
                             f"({exc}): fastbench runs --store {self.root} --reindex") from None
        return run_id

    def add_files(self, result_path: str | os.PathLike[str], records_path: str | os.PathLike[str] | None = None,
                  card_path: str | os.PathLike[str] | None = None) -> str:
        """Keep a run from its files (a result JSON, and its --save-detailed JSONL and card if given)."""
        doc = load_result(result_path)
        try:
            records = Path(records_path).read_bytes() if records_path is not None else None
            card = Path(card_path).read_text(encoding="utf-8") if card_path is not None else None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{records_path if card_path is None else card_path}: {_why(exc)}") from None
        if records is not None and records_path is not None and str(records_path).endswith(".gz"):
            records = gzip.decompress(records)
        return self.add(doc, card=card, records_jsonl=records)

    def _rename_into_place(self, tmp: Path, meta: RunMeta) -> str:
        stamp = datetime.datetime.fromtimestamp(meta.created_unix).strftime("%Y%m%d-%H%M%S")
        for _ in range(8):
            run_id = f"{stamp}-{secrets.token_hex(3)}"
            try:
                os.rename(tmp, self.runs_dir / run_id)  # never over another's folder: it is not empty
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue
                raise
            fsync_directory(self.runs_dir)
            return run_id
        raise StoreError(f"no free run id in {self.runs_dir} after 8 tries")

    def _insert(self, db: sqlite3.Connection, run_id: str, doc: Mapping[str, Any], meta: RunMeta, *,
                has_records: bool) -> None:
        flat = flat_keys(doc)
        config = (doc.get("fastbench") or {}).get("config") or {}
        row: dict[str, Any] = {
            "run_id": run_id, "folder": f"{RUNS_DIR}/{run_id}",
            "stored_unix": datetime.datetime.now().timestamp(), "has_records": int(has_records),
            **meta._asdict(),
        }
        row["collapsed"] = int(meta.collapsed)
        for name in KEY_FIGURES:
            value = flat.get(name)
            row[name] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        row["listing"] = orjson.dumps([row[name] for name in _V2_LISTED]).decode()
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        db.execute(f"INSERT OR REPLACE INTO runs ({names}) VALUES ({marks})", tuple(row.values()))
        db.execute("INSERT OR REPLACE INTO run_data VALUES (?, ?, ?)",
                   (run_id, orjson.dumps(config).decode(), orjson.dumps(flat).decode()))

    def reindex(self) -> Reindexed:
        """Rebuild the index from the run folders, in one transaction, after removing the temporaries that
        killed writers left (their process gone: ``study.leftovers``)."""
        removed = remove_leftovers(self.root, self.runs_dir)
        entries: list[tuple[str, dict[str, Any], bool]] = []
        skipped: list[str] = []
        for folder in self._folders():
            try:
                doc = load_result(folder / RESULT_FILE)
            except StoreError as exc:
                skipped.append(str(exc))
                continue
            entries.append((folder.name, doc, (folder / RECORDS_FILE).is_file()))
        with self._transaction() as db:
            db.execute("DELETE FROM runs")
            db.execute("DELETE FROM run_data")
            for run_id, doc, has_records in entries:
                self._insert(db, run_id, doc, run_meta(doc), has_records=has_records)
        return Reindexed(len(entries), skipped, removed)

    def _folders(self) -> Iterator[Path]:
        try:
            with os.scandir(self.runs_dir) as found:
                for entry in found:
                    if entry.is_dir() and not entry.name.startswith("."):
                        yield Path(entry.path)
        except FileNotFoundError:
            return

    # -- reading ---------------------------------------------------------------------------------

    def query(self, *, label: str | None = None, model: str | None = None, variant: str | None = None,
              since: float | None = None, until: float | None = None, limit: int | None = None) -> list[StoredRun]:
        """The runs that match, oldest first. ``label``, ``model`` and ``variant`` match as shell patterns
        (``eagle*``); ``since`` and ``until`` are Unix times bounding the run's creation; ``limit`` keeps the
        newest that many."""
        where, args = self._where(label=label, model=model, variant=variant, since=since, until=until)
        sql = f"SELECT {_COLUMNS} FROM runs{where} ORDER BY created_unix DESC, run_id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        root = self._root_text
        return [StoredRun(run_id, listing, root) for run_id, listing in reversed(self._read(sql, args))]

    def flat(self, run_ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], dict[str, Scalar]]]:
        """run id -> (its config, its flat keys), from the index."""
        out: dict[str, tuple[dict[str, Any], dict[str, Scalar]]] = {}
        for start in range(0, len(run_ids), 500):  # SQLite caps a statement's parameters
            chunk = list(run_ids[start:start + 500])
            marks = ", ".join("?" for _ in chunk)
            for run_id, config, flat in self._read(
                    f"SELECT run_id, config_json, flat_json FROM run_data WHERE run_id IN ({marks})", chunk):
                out[run_id] = (orjson.loads(config), with_sustained(orjson.loads(flat)))  # an older index too
        return out

    def resolve(self, ref: str) -> StoredRun:
        """The run whose id is ``ref``, or starts with it when only one does (as git takes a commit)."""
        rows = self._read(f"SELECT {_COLUMNS} FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id LIMIT 6",
                          (ref, ref + "\U0010ffff"))
        runs = [self._stored(row) for row in rows]
        exact = [run for run in runs if run.run_id == ref]
        if exact:
            return exact[0]
        if not runs:
            raise StoreError(f"no run {ref!r} in the store {self.root}")
        if len(runs) > 1:
            ids = [run.run_id for run in runs]
            raise StoreError(f"{ref!r} names several runs in {self.root} ({', '.join(ids[:5])}"
                             f"{', ...' if len(ids) > 5 else ''}): give more of the id")
        return runs[0]

    def _stored(self, row: tuple[Any, ...]) -> StoredRun:
        return StoredRun(row[0], row[1], self._root_text)

    def count(self) -> int:
        return int(self._read("SELECT count(*) FROM runs", ())[0][0])

    @staticmethod
    def _where(**filters: Any) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        for column in ("label", "model", "variant"):
            pattern = filters.get(column)
            if pattern is not None:
                clauses.append(f"{column} GLOB ?")
                args.append(pattern)
        if filters.get("since") is not None:
            clauses.append("created_unix >= ?")
            args.append(filters["since"])
        if filters.get("until") is not None:
            clauses.append("created_unix < ?")
            args.append(filters["until"])
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), args

    def _read(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return self._db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.root / INDEX_NAME}: {exc}") from None


def histogram_log(doc: Mapping[str, Any]) -> str:
    """The result's HDR histograms in HdrHistogram's log format (version 1.3): one line per metric,
    tagged with its name, over the measured window; readable by HistogramLogProcessor and hdrh's
    HistogramLogReader. The interval's max is in the metric's unit (ms, or tok/s for rates)."""
    fb = doc.get("fastbench") or {}
    histograms = fb.get("histograms") or {}
    if not histograms:
        return ""
    duration = doc.get("duration")
    duration = float(duration) if isinstance(duration, (int, float)) else 0.0
    lines = ["#[Histogram log format version 1.3]",
             f"#[fastbench run of {fb.get('created_at', '?')}: one interval per metric over the measured window; "
             "values in ns, rates in mtok/s (tokens/s x 1000)]",
             '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"']
    distributions = fb.get("distributions") or {}
    for name, hist in histograms.items():
        if not isinstance(hist, dict) or not isinstance(hist.get("data"), str):
            continue
        dist = distributions.get(name) or {}
        top = dist.get("max_ms", dist.get("max_tok_s"))
        top = float(top) if isinstance(top, (int, float)) else 0.0
        lines.append(f"Tag={name},0.000,{duration:.3f},{top:.3f},{hist['data']}")
    return "\n".join(lines) + "\n"
