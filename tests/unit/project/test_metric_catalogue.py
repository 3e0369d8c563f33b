"""One catalogue of metric names (`peer.metric_help.CATALOGUE`: name, kind, help, whether simnet sums
it): every name the code writes is in it with its kind, so a typo fails here instead of making a new
metric, and its help is written there only."""

from __future__ import annotations

import ast

from peer.boundary import TRAINER_GAUGES
from peer.metric_help import CATALOGUE, COUNTER, FROM_START, GAUGE, HISTOGRAM, SIMNET_TOTALS, SUMMED
from peer.metrics import Metrics

from tests.paths import REPO
from tests.source_ast import parse

ROOT = REPO
KIND = {"inc": COUNTER, "set": GAUGE, "observe": HISTOGRAM}


def written(tree: ast.AST, package: str = "peer") -> list[tuple[str, str, str]]:
    """(name, kind, help given there) of every metric write with a literal name: `metrics.inc/set/observe`,
    a session's `Count` action, the guard's `count` and the session's `_failed(..., counter)`."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f, first = node.func, node.args[0]
        literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
        helps = [ast.unparse(k.value) for k in node.keywords if k.arg == "help"]
        if isinstance(f, ast.Attribute) and f.attr in KIND and literal and "metrics" in ast.unparse(f.value):
            out.append((first.value, KIND[f.attr], helps[0] if helps else ""))
        elif isinstance(f, ast.Name) and f.id == "Count" and literal:
            out.append((first.value, COUNTER, ""))
        elif package == "peer" and isinstance(f, ast.Attribute) and f.attr == "count" and literal:
            out.append((first.value, COUNTER, ""))
        elif isinstance(f, ast.Attribute) and f.attr == "_failed" and len(node.args) == 4:
            last = node.args[3]
            if isinstance(last, ast.Constant) and isinstance(last.value, str):
                out.append((last.value, COUNTER, ""))
    return out


def _all_writes() -> dict[str, list[tuple[str, str, str]]]:
    writes: dict[str, list[tuple[str, str, str]]] = {}
    for package in ("peer", "simnet", "gossip_tts", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, kind, text in written(parse(path), package):
                writes.setdefault(name, []).append((f"{path.relative_to(ROOT)}", kind, text))
    return writes


def test_every_metric_written_is_catalogued_with_its_kind_and_help() -> None:
    writes = _all_writes()
    assert len(writes) >= 60
    for name, sites in writes.items():
        assert name in CATALOGUE, f"{name!r} (written in {sites[0][0]}) is not in peer.metric_help.CATALOGUE"
        kind = CATALOGUE[name][0]
        for path, used_as, given in sites:
            assert used_as == kind, f"{path} writes {name!r} as a {used_as}, the catalogue says {kind}"
            assert given == "", f"{path} writes help for {name!r}: it belongs in the catalogue alone"
    for name in (*TRAINER_GAUGES, *FROM_START):
        assert name in CATALOGUE, name
    unused = set(CATALOGUE) - set(writes) - set(TRAINER_GAUGES)
    assert unused == set(), f"catalogued but never written: {sorted(unused)}"


def test_no_write_gives_its_own_help() -> None:
    """Help lives in the catalogue alone: no metrics write passes `help=`, whatever its name."""
    given = [f"{path.relative_to(ROOT)}:{node.lineno}"
             for package in ("peer", "simnet", "gossip_tts", "benchmarks") for path in sorted((ROOT / package).rglob("*.py"))
             for node in ast.walk(parse(path)) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr in KIND and "metrics" in ast.unparse(node.func.value)
             and any(k.arg == "help" for k in node.keywords)]
    assert given == []


def test_the_scan_sees_a_misspelt_name() -> None:
    """Control: a write with a typo is found, and the catalogue lacks it."""
    snippet = 'self.metrics.inc("exchange_ok_total")\nout.append(Count("evictons_total"))\nmetrics.set("loss", 1.0)\n'
    names = sorted(name for name, _, _ in written(parse(snippet)))
    assert names == ["evictons_total", "exchange_ok_total", "loss"]
    assert [n for n in names if n not in CATALOGUE] == ["evictons_total", "exchange_ok_total"]


def test_a_write_without_help_shows_the_catalogues() -> None:
    metrics = Metrics()
    metrics.inc("evictions_total")
    metrics.set("step_scale", 0.5)
    text = metrics.render()
    assert f"# HELP gossip_tts_evictions_total {CATALOGUE['evictions_total'][1]}" in text
    assert f"# HELP gossip_tts_step_scale {CATALOGUE['step_scale'][1]}" in text


def test_simnet_sums_the_counters_the_catalogue_marks() -> None:
    """A counter marked SUMMED is in a simnet run's totals with no other list to change."""
    from simnet.runs.config import world_from_dict
    from simnet.runs.swarm import GossipSim

    assert all(CATALOGUE[name][0] == COUNTER for name in SIMNET_TOTALS) and len(SIMNET_TOTALS) >= 30
    assert {name for name, entry in CATALOGUE.items() if SUMMED in entry} == set(SIMNET_TOTALS)
    sim = GossipSim(world_from_dict({"n_peers": 3, "model": "lsq", "duration_s": 1.0, "topology": {"kind": "full"}}), 0)
    sim.sched.run_until(1.0)
    totals = sim.totals()
    assert {name.removesuffix("_total") for name in SIMNET_TOTALS} <= set(totals)
    assert totals["published"] == sum(m.total("published_total") for m in sim.all_metrics) > 0
    assert "exchanges" not in totals  # not marked: not summed
