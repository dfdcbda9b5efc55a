"""The examples run headless and write their pictures (at small sizes here)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    "script, arguments",
    [
        ("diffusion_map.py", ["--n", "800", "--k", "12"]),
        ("tsne_digits.py", ["--n", "300", "--perplexity", "10", "--max-iter", "250"]),
    ],
)
def test_example_writes_its_png(tmp_path, backend, script, arguments):
    out = tmp_path / "picture.png"
    env = dict(os.environ, MPLBACKEND="Agg")
    env.pop("DISPLAY", None)
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *arguments, "--backend", backend, "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert f"wrote {out}" in run.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000  # a picture, not an empty canvas
