"""agent/examples/codec_ratios.py end to end at a small size: a model trained
a few steps, two consecutive steps written as safetensors, measured by
ckpt-bench --codecs --codec-files. The figures it prints are real ratios
(stored bytes under each codec, every chunk decoded back and compared), so
trained bf16 weights must shrink under grouped-zstd and deltas."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.environ.get("CKPT_BENCH", os.path.join(HERE, "../../build/tools/bench/ckpt-bench"))


@pytest.mark.skipif(not os.path.exists(BENCH), reason=f"no ckpt-bench at {BENCH}")
def test_codec_ratios_of_a_trained_model():
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "../examples/codec_ratios.py"), "--bench", BENCH,
         "--steps", "30", "--dim", "64", "--layers", "2", "--vocab", "128"],
        capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    figures = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    assert figures["mode"] == "codec_files"
    for key in ("grouped_zstd_ratio_bf16", "zstd_ratio_bf16", "grouped_zstd_ratio_fp32",
                "zstd_ratio_fp32", "delta_ratio_bf16", "delta_ratio_fp32"):
        assert figures[key] > 0, key
    # Every byte of both steps was measured: bf16 weights are half the fp32 ones.
    assert figures["grouped_zstd_ratio_fp32_mib"] > 2 * figures["grouped_zstd_ratio_bf16_mib"]
    assert figures["grouped_zstd_ratio_bf16"] > figures["zstd_ratio_bf16"] > 1.0
    assert figures["delta_ratio_bf16"] > figures["grouped_zstd_ratio_bf16"]
