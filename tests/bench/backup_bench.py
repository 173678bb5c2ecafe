#!/usr/bin/python3
"""Export/import figures for docs/backup.md: 100,000 valid tunnels imported into, then exported
from, SQLite and (with a MariaDB URL) MariaDB by the offline `controld import` / `controld
export` commands. Prints one line per backend:
    <backend> 100000 tunnels: export X s (N MB), import Y s
Usage: OT_BUILD_DIR=build tests/bench/backup_bench.py [mysql://user:pass@host:port/emptydb]"""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import backup_records as br  # noqa: E402

COUNT = 100_000


def main():
    controld = br.controld_binary()
    work = Path(tempfile.mkdtemp(prefix="ot-backup-bench-"))
    source = work / "source.json"
    br.write_file(source, br.many(COUNT))
    backends = [("sqlite", "sqlite:" + str(work / "bench.db"))]
    if len(sys.argv) > 1:
        backends.append(("mariadb", sys.argv[1]))
    for name, url in backends:
        t_import, _ = br.offline(controld, "import", url, source)
        out = work / f"{name}.json"
        t_export, _ = br.offline(controld, "export", url, out)
        assert out.read_bytes() == source.read_bytes(), "the export differs from what was imported"
        print(f"{name} {COUNT} tunnels: export {t_export:.1f} s ({br.size_mb(out):.0f} MB), "
              f"import {t_import:.1f} s", flush=True)


if __name__ == "__main__":
    main()
