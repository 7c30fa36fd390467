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


def test_summary_lists_every_scalar_estimator_with_its_interval(tiny_data):
    metrics = json.loads((tiny_data / "metrics.json").read_text())
    temperature = json.loads((tiny_data / "temperature.json").read_text())
    text = summary(metrics, temperature, "other")
    results = metrics["estimators"]["results"]
    ks = results["ks"]
    assert f"ks              {ks['raw']['value']:.4f} -> {ks['calibrated']['value']:.4f}" in text
    assert f"[{ks['difference']['lower']:+.4f}, {ks['difference']['upper']:+.4f}]" in text
    assert "smooth-ece" in text and "bin-intervals" not in text
    assert "estimators" not in summary({k: v for k, v in metrics.items() if k != "estimators"}, temperature, "other")
