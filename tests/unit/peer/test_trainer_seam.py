"""The Trainer seam declares every capability: each trainer states what it offers in
`Capabilities`, and no code looks for a trainer's methods by name."""

from __future__ import annotations

import importlib
import re
import sys

import pytest
import torch

from peer.trainer import Capabilities, StepStats, Trainer, WrappedTrainer
from tests.paths import REPO

ROOT = REPO
OPTIONAL = {"probe": "probe_better", "add_in_place": "add_to_flat_params", "scale_lr": "scale_lr"}
"""Each optional capability and the method it licenses."""
SOURCES = ("peer", "gossip_tts", "simnet", "benchmarks")
TRAINER_MODULES = ("peer.local.toy_trainer", "peer.local.group", "simnet.world.mlp_trainer", "simnet.attacks.trainer", "gossip_tts.train.trainer",
                   "step_boundary", "vs_gossip_peer", "gossip_overhead")
LOOKUP = re.compile(r"\b(getattr|hasattr)\(\s*(self\.)?(trainer|inner|tr)\b")


def _all_trainer_classes() -> list[type]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        for name in TRAINER_MODULES:
            importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    found, todo = [], [Trainer]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("tests."):
                continue
            found.append(sub)
            todo.append(sub)
    return found


def _overrides(cls: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(Trainer, method)


def test_no_source_file_looks_for_a_trainer_capability_by_name() -> None:
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for package in SOURCES for path in sorted((ROOT / package).rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if LOOKUP.search(line)]
    assert hits == []


def test_the_lookup_pattern_finds_what_the_seam_replaced() -> None:
    """Control: the scan above would see each form the seam replaced."""
    for line in ('probe=getattr(self.trainer, "probe_better", None)', 'getattr(inner, "collective_reads", True)',
                 'add = getattr(trainer, "add_to_flat_params", None)', 'hasattr(self.inner, "scale_lr")'):
        assert LOOKUP.search(line), line


def test_every_trainer_declares_exactly_the_optional_methods_it_implements() -> None:
    classes = {cls.__name__: cls for cls in _all_trainer_classes()}
    assert {"TTSTrainer", "LeastSquaresTrainer", "MLPTrainer", "GroupTrainer", "AttackTrainer", "WrappedTrainer",
            "FlatTrainer", "WorkloadTrainer", "IdleTrainer", "ReplayTrainer"} <= set(classes)
    for name, cls in classes.items():
        assert "__getattr__" not in vars(cls), f"{name} forwards unknown attributes"
        declared = cls.__dict__.get("capabilities")
        if isinstance(declared, Capabilities):  # a fixed declaration: a flag for each method, no more, no less
            for flag, method in OPTIONAL.items():
                assert getattr(declared, flag) == _overrides(cls, method), (name, flag)
    assert classes["TTSTrainer"].add_to_flat_params is not Trainer.add_to_flat_params


def _owner(cls: type, method: str) -> type:
    return next(base for base in cls.__mro__ if method in vars(base))


def test_every_bfloat16_copy_rounds_the_parameters_get_flat_params_shows() -> None:
    """`flat_params_bf16` is `Trainer`'s default (which rounds `get_flat_params()`) or defined with
    or below the `get_flat_params` it stands for: a subclass or wrapper that shows other parameters
    (an attacker's lie) cannot inherit a fast path that rounds the ones underneath."""
    for cls in _all_trainer_classes():
        rounds, reads = _owner(cls, "flat_params_bf16"), _owner(cls, "get_flat_params")
        assert rounds is Trainer or issubclass(rounds, reads), cls.__name__


class _Quadratic(Trainer):
    """The smallest trainer: every required method, no optional one."""

    capabilities = Capabilities(collective_reads=False)

    def __init__(self) -> None:
        self.x, self._steps = torch.ones(3), 0

    @property
    def step_count(self) -> int:
        return self._steps

    def step(self) -> StepStats:
        self.x = self.x * 0.9
        self._steps += 1
        return StepStats(self._steps, float(self.x.pow(2).sum()), 1)

    def param_spec(self):
        return {"x": ((3,), "float32")}

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()

    def set_flat_params(self, flat: torch.Tensor) -> None:
        self.x = flat.clone()

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        self.x, self._steps = flat.clone(), step

    def set_step_scale(self, scale: float) -> None:
        pass

    def state_tensors(self):
        return {"x": self.x.clone()}, {"step": self._steps}

    def load_state_tensors(self, tensors, meta) -> None:
        self.x, self._steps = tensors["x"].clone(), int(meta["step"])

    def close(self) -> None:
        pass


def test_a_trainer_that_does_not_state_its_capabilities_cannot_be_built() -> None:
    class Silent(_Quadratic):
        capabilities = Trainer.capabilities

    with pytest.raises(TypeError, match="capabilities"):
        Silent()
    assert _Quadratic().capabilities == Capabilities(collective_reads=False)  # control: stated, it builds


def test_an_undeclared_optional_method_refuses_naming_the_flag() -> None:
    for flag, method, arg in (("probe", "probe_better", torch.zeros(3)),
                              ("add_in_place", "add_to_flat_params", torch.zeros(3)), ("scale_lr", "scale_lr", 0.5)):
        with pytest.raises(NotImplementedError, match=f"{flag}=True"):
            getattr(_Quadratic(), method)(arg)


def test_a_wrapper_offers_what_it_wraps_and_an_attacker_never_mixes_in_place() -> None:
    from simnet.attacks.trainer import AttackConfig, AttackTrainer

    class InPlace(_Quadratic):
        capabilities = Capabilities(add_in_place=True, collective_reads=False)

        def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
            self.x[start:start + delta.numel()] += delta

    inner = InPlace()
    assert WrappedTrainer(inner).capabilities == inner.capabilities
    attacker = AttackTrainer(inner, AttackConfig(kind="scale"), seed=0)
    assert attacker.capabilities == Capabilities(add_in_place=False, collective_reads=False)
    with pytest.raises(NotImplementedError):
        attacker.add_to_flat_params(torch.zeros(3))  # a mix must pass through the attack's set_flat_params


def test_add_flat_into_adds_in_the_flat_layout_and_refuses_a_vector_of_another_size() -> None:
    from peer.trainer import add_flat_into, flatten

    tensors = [torch.ones(2, 3), torch.zeros(4)]
    storage = [t.data_ptr() for t in tensors]
    add_flat_into(torch.arange(10, dtype=torch.float32), tensors)
    assert torch.equal(flatten(tensors), torch.tensor([1, 2, 3, 4, 5, 6, 6, 7, 8, 9], dtype=torch.float32))
    assert [t.data_ptr() for t in tensors] == storage  # in place: the optimiser's tensors keep their memory
    with pytest.raises(ValueError, match="11 values at 0 does not span whole parameters of the 10"):
        add_flat_into(torch.zeros(11), tensors)
    assert torch.equal(flatten(tensors)[:3], torch.tensor([1.0, 2.0, 3.0]))  # nothing added on refusal
    add_flat_into(torch.full((4,), 10.0), tensors, start=6)  # a span of whole tensors: the second alone
    assert torch.equal(flatten(tensors), torch.tensor([1, 2, 3, 4, 5, 6, 16, 17, 18, 19], dtype=torch.float32))
    for start, n in ((0, 4), (3, 7), (6, 5)):  # part of a tensor, or past the end: refused, nothing added
        with pytest.raises(ValueError, match="does not span whole parameters"):
            add_flat_into(torch.ones(n), tensors, start=start)
    assert float(flatten(tensors).sum()) == 91.0
