import json

from job.summary import summary


def test_summary_shows_t_the_table_the_boundary_flag_and_the_intervals(tiny_data):
    metrics = json.loads((tiny_data / "metrics.json").read_text())
    temperature = json.loads((tiny_data / "temperature.json").read_text())
    boot = json.loads((tiny_data / "bootstrap.json").read_text())
    text = summary(metrics, temperature, "other", boot)
    assert f"T = {temperature['temperature']:.6f}" in text
    raw = metrics["pools"]["audit"]["raw"]
    assert f"{raw['nll']:.4f}" in text and f"n = {raw['n']}" in text
    assert "BOUNDARY" not in text or temperature["boundary"]
    for key in ("nll", "brier", "ece"):
        assert boot["differences"][key]["verdict"] in text
    flagged = summary(metrics, {**temperature, "boundary": True, "boundary_side": "t_max"}, "other")
    assert "BOUNDARY: t_max" in flagged and "bootstrap" not in flagged
