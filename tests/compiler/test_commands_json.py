"""`--json` output of `modelc check` and `modelc run`: valid JSON holding what the text output says."""
from __future__ import annotations

import json

import numpy as np

import modelc
from modelc.cli import main as cli_main
from modelc.runtime.histories import uniaxial_stress_history


def test_check_json(capsys):
    spec = str(modelc.library()["j2_linear_iso"].path)
    assert cli_main(["check", spec, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["specs"]
    comp = {c["name"]: c for c in s["compositions"]}["j2_linear_iso"]
    ins = {v["name"]: v for v in comp["inputs"]}
    assert ins["forces/E"]["size"] == 6 and "state/S" in [v["name"] for v in comp["outputs"]]
    assert comp["operations_after_cse"]["value"] and "value+tangent" in comp["operations_after_cse"]
    models = {m["name"]: m for m in s["models"]}
    assert models["j2_linear_iso_return_map"]["kind"] == "implicit"


def test_run_json(tmp_path, capsys):
    np.savez(tmp_path / "h.npz", **uniaxial_stress_history([0.003, 0.0003], 1.0, steps=20))
    rc = cli_main(["run", "j2_linear_iso", "--history", str(tmp_path / "h.npz"), "--out",
                   str(tmp_path / "r.npz"), "--json", "--no-progress"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["steps"] == 20 and doc["points"] == 2 and doc["failed"] == {}
    assert doc["table"][0]["final_ep"] > 0 and doc["table"][1]["final_ep"] == 0
    assert doc["out"].endswith("r.npz") and doc["summary"].startswith("all 2 point(s)")
