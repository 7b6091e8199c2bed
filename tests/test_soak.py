"""The soak, short: ``bench/soak.py`` for two minutes, every fault kind several times (kill -9
of the relay, the sync and the downstream, upstream restarts clean and killed, connections
cut mid-stream on both sides), then its verification: relay files byte-identical, GTIDs
without gaps or repeats, CHECKSUM TABLE equal, the checkpoint consistent at the upstream's
end, no process exited by itself.  Real servers, the real CLI.  No times are asserted: how
fast the pipeline recovers is the benchmark's business (BENCHMARKS.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server  # the soak starts its own servers, relay and sync

REPO_ROOT = Path(__file__).resolve().parents[1]
KINDS = ("relay-kill", "sync-kill", "downstream-kill", "upstream-restart", "upstream-kill",
         "relay-cut", "sync-cut")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_minutes_of_faults_lose_nothing(tmp_path: Path) -> None:
    out_path = tmp_path / "soak.out"
    with out_path.open("wb") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.soak", "--minutes", "2", "--interval", "4",
             "--seed", "12", "--no-report"],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            timeout=1400, check=False)
    output = out_path.read_text(errors="replace")
    assert proc.returncode == 0, output[-6000:]
    assert "Traceback" not in output, output[-6000:]
    m = re.search(r"^- faults: (\d+) \(([^)]*)\)$", output, re.MULTILINE)
    assert m, output[-3000:]
    counts = {kind: int(n) for kind, n in re.findall(r"([a-z-]+) (\d+)", m[2])}
    assert set(counts) == set(KINDS), counts
    # Two minutes at one fault every 4 s: 30 faults, each kind at least 4 times.
    assert all(n >= 4 for n in counts.values()), counts
    assert re.search(r"^- events lost or duplicated: 0$", output, re.MULTILINE), output[-3000:]
    assert re.search(r"^- rows different: 0$", output, re.MULTILINE), output[-3000:]
