"""Upgrading a Citus cluster initialised by an older pgmemory: `pgmemory init` of this version.

Starts a coordinator + 2 workers (tests/citus_cluster.py) and runs the upgrade check of
tests/citus_upgrade.py on it (the older commit's init and 3 episodes, this version's init,
distribution, doctor, the old group updated and searched), printing each step's wall time with
the 1-minute load average; exits non-zero on a failed check. The suite runs the same check
(tests/test_citus.py, in a second database of its cluster).

    /work/main/.venv/bin/python -m bench.citus_upgrade --from f419940
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.citus_cluster import start_cluster
from tests.citus_upgrade import OLD_COMMIT, load_avg, old_tree, upgrade


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="commit", default=OLD_COMMIT, help="the older pgmemory commit")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pgmemory-citus-upgrade-"))
    old = old_tree(args.commit, root / "old")
    (root / "cluster").mkdir()
    started = time.perf_counter()
    cluster = start_cluster(root / "cluster")
    print(f"cluster started: {time.perf_counter() - started:.1f} s; {load_avg()}", flush=True)
    try:
        upgrade(cluster.coordinator_dsn, old, say=lambda line: print(line, flush=True))
    except AssertionError as exc:
        print(f"FAILED: {exc}", flush=True)
        sys.exit(1)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
