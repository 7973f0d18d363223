"""The study: runs kept and compared. ``runfile`` reads one run's files, ``store`` keeps runs in folders
with a SQLite index beside them, ``compare`` sets runs side by side and says what is beyond noise.

Everything here reads the files a run writes (docs/result-schema.md): nothing a study reports could
not be recomputed from its runs' files.
"""
