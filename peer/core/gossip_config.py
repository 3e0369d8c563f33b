"""Configuration of the gossip layer of one peer."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

COPY_DTYPES = ("bfloat16", "float32")
"""What `GossipConfig.copy_dtype` and `handover_dtype` may name."""
OUTBOX_FLOOR_BYTES = 2**20
"""The least `outbox_copies` bounds the outbox to: below a few million parameters a frame's header
and signature are a large part of it, and a share of the model would keep only the newest two."""
AVERAGE_DTYPES = ("bfloat16+int8", "float32")
"""What `GossipConfig.average_dtype` may name."""

if TYPE_CHECKING:
    import torch

    from async_opt import NeighbourRadius, SwarmStepScale
    from peer.core.cadence import PublishCadence


@dataclass
class GossipConfig:
    swarm: str = "default"
    """Peers only talk to peers of the same swarm (and the same model fingerprint)."""
    gossip_every: int | None = None
    """Pins the local steps between publishing an update and starting exchanges. None (the
    default): `publish_budget` sets them from what the protocol measurably costs. 1 publishes
    every step, which mixes best where a publish is cheap (docs/mixing.md). Either way a publish
    slower than a step does not hold training up: a copy is taken only at a boundary where the
    node worker is free to publish it (`peer.boundary.PendingPublish.ready`)."""
    publish_budget: float = 0.05
    """With `gossip_every` unset: the most of its training time a peer spends on the protocol
    (its training thread's mixing and parameter copies, its node worker's CPU), in (0, 1). The
    steps per publish are the fewest, a power of two, at which the measured protocol seconds
    per publish stay within this share of those steps' seconds (peer.core.publish_budget): every
    step or every few where a step is long next to a publish, thousands on a GPU at the large
    presets. The cadence and its reason are on the progress line, /metrics and the status page."""
    publish_catch_up: float = 1.5
    """Also publish (and exchange) once this many times the median neighbour's publish period
    has passed since our last publish, however few steps we took: a peer much slower than the
    swarm then mixes at the swarm's pace instead of falling behind (peer.core.cadence). Peers of
    about equal speed never wait that long. 0 counts steps only."""
    compression: str = "topk:0.1+int8"
    """Tensor codec spec for published updates (see protocol.parse_codec). Top-10% + int8
    rather than top-1%: top-1% forces the consensus step down so far that peers barely agree
    (docs/benchmarks/peer.md#the-default-codec-and-its-mixing-rate)."""
    copy_dtype: str = "bfloat16"
    """Precision of our public copy x̂, and so of the copy every neighbour holds of it (they follow
    the snapshot we send them): "bfloat16" halves what each copy costs a node, which at the sizes
    people train is gigabytes a neighbour. The default codec sends 8-bit values already; sender
    and receivers round each update alike, and error feedback sends the rounding later
    (async_opt.PublicCopy). "float32" holds exact copies, and keeps the exact parameters of the
    last publish for /v1/state (with bfloat16 a joiner gets the public copy)."""
    handover_dtype: str = "bfloat16"
    """Precision of the parameter copy the step boundary hands a publish where the node keeps no
    parameters (`keeps_parameters` false: x̂ in bfloat16, no partner steps): "bfloat16",
    stochastically rounded (`peer.trainer.Trainer.flat_params_bf16`), is half a float32 copy of
    CPU memory and, on a GPU peer, of the device-to-host transfer; what it rounds away is below
    x̂'s own precision and zero on average, and error feedback sends x − x̂ afresh at every
    publish, so it never accumulates. "float32" hands the exact parameters. A node that keeps
    them is always handed float32."""
    staleness: str = "pipemare:K=2000,p_min=0,tau_max=64"
    """Staleness schedule spec (see async_opt.parse_staleness). Without `gamma=`, the mixing
    rate is chosen from the compression (see `default_gamma`)."""
    staleness_relative: bool = True
    """Measure a copy's staleness from our own last publish rather than from now. The mixing step
    pulls by x̂_j − x̂_i, a difference of two public copies, so what biases it is how much older
    x̂_j is than x̂_i; a copy published after ours is not stale at all. False measures from now
    (x̂_i's own age counted against every neighbour: a copy one publish period old, which every
    copy is by construction, weighed ~(1 + gossip_every)^-1); it is kept as the control."""
    per_period: bool = True
    """Count a copy's staleness in our publish periods rather than in steps, take a partner's
    steps at `partner_steps` per period rather than per step, and let the step-size rule count
    the steps of the periods we actually publish. A period is our measured steps per publish
    (`peer.core.cadence.PublishPeriod`): what the cadence aims at (`gossip_every`, or what
    `publish_budget` picks), more where the node worker takes longer. A partner's copy
    published a few steps before ours belongs to the same round however long the round is, and
    a partner's steps of a long period already reach us in its copy, which the consensus step
    averages in. At a publish every step nothing changes (docs/mixing.md#a-long-publish-period). False: staleness and
    partner steps per step, the step-size rule per the cadence's aim (the control)."""
    pull_only: bool = True
    """Only the copies of partners this peer chose itself (the answers to exchanges it started)
    move its parameters; a copy pushed at us waits for our own turn with its sender, and still
    feeds the averaged weights and joining. A neighbour that exchanges with everyone every
    period then pulls each peer as often as any partner does, not once per exchange it forces.
    False lets every copy with news pull (the control)."""
    step_scale_max: float = 4.0
    """With `partner_steps` off: the most the step size is multiplied by for the swarm this peer mixes with
    (async_opt.step_scale): the multiplier follows (1 + (n_eff − 1) / H) ** `step_scale_power`,
    where n_eff is how many models one publish period's mixing averages (1 alone, m + 1 for an
    exact mean of m pulled copies) and H its steps per publish. Averaging replicas' steps moves
    the model less than one step on their averaged gradient, so without it gossip peers descend
    no faster than one process. 1 turns it off: every peer trains at its own step size, as alone."""
    step_scale_power: float = 1.0
    """See `step_scale_max`: 1 is the linear scaling rule of data parallelism."""
    step_scale_warmup_periods: int = 25
    """Publish periods over which the multiplier may rise from 1 to `step_scale_max` (it falls at once)."""
    step_scale_decay_steps: int = 0
    """Steps over which the multiplier's part above 1 halves, and goes on shrinking as K / (K + step)
    (async_opt.step_scale): larger early, 1 late. 0: no decay."""
    step_scale: float = 0.0
    """A fixed step-size multiplier instead of the measured one (0: measured)."""
    partner_steps: float = 0.7
    """Weight of a pulled partner's own training steps in ours (async_opt.partner_steps): each
    update frame also carries its sender's steps, and a peer adds this share of its partners'
    to its parameters, as if it had also stepped on their batches. It takes the place of the
    measured step-size multiplier (`step_scale_max`), which stays 1 while this is on: both at once
    overshoot. 0.7 rather than 1: as fast, and a liar's steps pull less (docs/mixing.md#partner-steps).
    Only for trainers whose steps add (`Capabilities.additive_steps`; `for_trainer`): with Adam
    they multiply the step size. 0 sends and takes none."""
    partner_step_clip: float = 1.0
    """What one partner's steps may add per publish period of ours, as a multiple of the median
    norm of our own steps per publish (over `clip_own_window` publishes): a bound no partner sets;
    past it a sum is shortened by `clip_power`. 1 rather than 2: as fast in simnet `single`, and
    ALIE-type liars cost half as much (docs/simnet/single.md#partner-steps)."""
    max_neighbours: int = 8
    """Neighbour copies kept in memory. When full, a copy only ever pushed at us is dropped before
    one we pulled (least recently heard first within each): in a swarm larger than this, the
    neighbours that choose us would otherwise evict our own partners' copies, and every pull
    would need a fresh snapshot."""
    device_budget_gib: float = 0.0
    """GPU memory (GiB) the node may take beside a trainer whose parameters live on a GPU, to hold
    its public copy, the hand-over, the averaged weights and its neighbour copies there, and so run
    its arithmetic there instead of on the CPU (peer.core.placement): the budget also caps
    `max_neighbours`. 0 (the default) keeps the node in CPU memory, where training's own GPU
    memory is never at risk; a CPU peer ignores it."""
    outbox_bytes: int = 256 * 2**20
    """Recent update frames kept to fill a neighbour's gap without a full snapshot, at most (and
    at most `outbox_copies` of the model)."""
    outbox_copies: float = 0.25
    """The outbox's bound as a share of a float32 copy of the model: what it holds counts in a
    node's memory as its copies do (a quarter of a copy is several updates of the default codec).
    Below `outbox_bytes` from ~270M parameters down: a fixed bound held over two copies' worth
    at 30M. Never below `OUTBOX_FLOOR_BYTES`."""
    outbox_min_frames: int = 2
    """Update frames kept whatever `outbox_bytes` and `outbox_copies` say: a partner one or two publishes behind
    (an exchange under way while we publish) is sent them, not a snapshot. One update of the
    800m preset at the default codec is over 100 MB, of echo-2.4b hundreds of MB: past the
    byte bound alone, every such partner would need the whole model."""
    clip_quantile: float = 0.5
    """Self-centred clipping radius = clip_multiplier × this quantile (an order statistic, taken
    low) of the neighbours' latest distances, one per neighbour: fewer than 1 − q of the
    neighbours cannot move it (async_opt.NeighbourRadius)."""
    clip_multiplier: float = 1.0
    """1 rather than ClippedGossip-style 2: the median honest neighbour still pulls unshortened,
    and no liar pulls farther than it; at 2, radius steering and ALIE do several times the harm
    (docs/simnet.md#figures-behind-the-codes-defaults)."""
    clip_power: float = 2.0
    """A copy farther than the radius ρ pulls ρ·(ρ/‖d‖)^(power − 1) (async_opt.mixing): 1 is plain
    clipping, where a copy ten radii away pulls as hard as one at the radius; 2 lets the pull
    fall off with distance, as a redescending M-estimator's influence does, so a vector far out of
    range barely moves us. The most any copy can pull is still ρ."""
    clip_min_neighbours: int = 3
    """Neighbours with a known distance before their quantile is used; until then only the cap holds."""
    clip_max_relative: float = 0.5
    """The radius never exceeds this fraction of our own public copy's norm, from the first mix on:
    a bound no neighbour sets."""
    clip_own_multiplier: float = 4.0
    """With fewer than `clip_min_neighbours` neighbours the radius is at most this many times the
    median distance our own public copy moved per publish over its last `clip_own_window`
    publishes: what an honest copy trained alike moves in a period, which no neighbour sets
    (async_opt.NeighbourRadius); the cap alone would let one hostile neighbour of two pull a share
    of our norm at every publish. Not smaller: two honest peers with different data settle a few
    moves apart once mixed (each one's steps and pull cancel), so a tighter bound shortens honest
    pulls and costs a pair its gain over training alone (docs/mixing.md)."""
    clip_own_window: int = 16
    """Publishes whose moves `clip_own_multiplier` takes the median of."""
    clip: bool = True
    """Self-centred clipping of neighbour differences (off only as a control in experiments)."""
    error_feedback: bool = True
    """Keep the public copy x̂ (CHOCO-SGD). False drops what compression left out: the
    naive compressed gossip that experiments use as a control."""
    average_sigma_rel: float = 0.1
    """Width of the averaged weights' time window, as a fraction of training so far (EDM2's
    σ_rel; peer.core.average): checkpoints carry this average of the swarm estimate as
    `average.*`, and synthesis uses it. 0 keeps no average (saves one parameter-sized pass per
    publish)."""
    average_dtype: str = "bfloat16+int8"
    """How the averaged weights are held: "bfloat16+int8", three bytes a parameter (a 16-bit
    significand, the low byte rounded stochastically: async_opt.packed_float says why that holds a
    long EMA where bfloat16 alone stops moving), updated in place with no parameter-sized
    temporary after its first sample; "float32", four bytes and a whole new copy at each sample."""
    max_clock_skew_s: float = 300.0
    answer_snapshot_every_s: float = 10.0
    """An asking address gets our snapshot in an answer at most once per this many seconds: an
    honest neighbour needs one when it pairs with us or falls past our outbox, not every exchange,
    while each costs the model's size for a request of a few hundred bytes (peer.core.snapshots)."""
    answer_snapshots_per_min: float = 12.0
    """Snapshots in answers to all askers together, per minute (up to `max_neighbours` at once):
    however many addresses ask, strangers cannot turn our uplink into theirs."""
    allowed_keys: frozenset[bytes] | None = None
    """When set, frames from any other key are refused."""

    def __post_init__(self) -> None:
        if not self.swarm or len(self.swarm) > 64:
            raise ValueError(f"swarm name must be 1..64 characters, got {self.swarm!r}")
        if self.gossip_every is not None and self.gossip_every < 1:
            raise ValueError(f"gossip_every must be >= 1, or unset to let publish_budget set it; "
                             f"got {self.gossip_every}")
        if not 0 < self.publish_budget < 1:
            raise ValueError(f"publish_budget must be a share of training time in (0, 1), e.g. 0.05; "
                             f"got {self.publish_budget!r}")
        if not 0 <= self.publish_catch_up < float("inf"):
            raise ValueError(f"publish_catch_up must be finite and >= 0 (0: off), got {self.publish_catch_up!r}")
        if self.max_neighbours < 1:
            raise ValueError(f"max_neighbours must be >= 1, got {self.max_neighbours}")
        if not 0 <= self.device_budget_gib < float("inf"):
            raise ValueError(f"device_budget_gib must be finite and >= 0 (0: the node stays on the CPU), "
                             f"got {self.device_budget_gib!r}")
        if self.outbox_bytes < 0 or self.outbox_min_frames < 0 or not self.outbox_copies >= 0:
            raise ValueError(f"outbox_bytes, outbox_copies and outbox_min_frames must be >= 0, got {self.outbox_bytes}, "
                             f"{self.outbox_copies} and {self.outbox_min_frames}")
        if not 0.0 < self.clip_quantile <= 1.0 or self.clip_multiplier <= 0:
            raise ValueError("clip_quantile must be in (0, 1] and clip_multiplier > 0")
        if self.clip_min_neighbours < 1 or not self.clip_max_relative > 0:
            raise ValueError("clip_min_neighbours must be >= 1 and clip_max_relative > 0")
        if not 0 < self.clip_own_multiplier < float("inf") or self.clip_own_window < 1:
            raise ValueError("clip_own_multiplier must be finite and > 0, clip_own_window >= 1")
        if not (0.0 <= self.partner_steps <= 1.0) or not (0 < self.partner_step_clip < float("inf")):
            raise ValueError(f"partner_steps must be in [0, 1] (0: off) and partner_step_clip finite and > 0, "
                             f"got {self.partner_steps!r}, {self.partner_step_clip!r}")
        self.step_scale_rule()  # refuses a bad bound, power, warm-up or pinned value with its own message
        if self.max_clock_skew_s <= 0:
            raise ValueError("max_clock_skew_s must be > 0")
        if not (self.answer_snapshot_every_s > 0 and self.answer_snapshots_per_min > 0):
            raise ValueError("answer_snapshot_every_s and answer_snapshots_per_min must be > 0")
        if self.average_sigma_rel != 0:
            from async_opt.averaging import power_ema_exponent

            try:
                power_ema_exponent(self.average_sigma_rel)
            except ValueError as err:
                raise ValueError(f"average_sigma_rel: {err} (or 0 for no average)") from None
        # Parse now so a bad spec fails at start-up with its own message, not mid-run.
        from async_opt import parse_staleness
        from async_opt.mixing import check_power
        from protocol import parse_codec

        try:
            check_power(self.clip_power)
        except ValueError as err:
            raise ValueError(f"clip_power: {err}") from None

        parse_codec(self.compression)
        parse_staleness(self.resolved_staleness)
        if self.copy_dtype not in COPY_DTYPES:
            raise ValueError(f"copy_dtype must be one of {', '.join(COPY_DTYPES)}, got {self.copy_dtype!r}")
        if self.handover_dtype not in COPY_DTYPES:
            raise ValueError(f"handover_dtype must be one of {', '.join(COPY_DTYPES)}, got {self.handover_dtype!r}")
        if self.average_dtype not in AVERAGE_DTYPES:
            raise ValueError(f"average_dtype must be one of {', '.join(AVERAGE_DTYPES)}, got {self.average_dtype!r}")

    @property
    def keeps_parameters(self) -> bool:
        """Whether a node keeps the exact parameters of its last publish: partner steps need them,
        and with float32 copies /v1/state serves them (with bfloat16 it serves x̂, held anyway)."""
        return self.copy_dtype == "float32" or self.partner_steps > 0

    @property
    def handover_bfloat16(self) -> bool:
        """Whether a publish is handed a stochastically rounded bfloat16 parameter copy (`handover_dtype`)."""
        return self.handover_dtype == "bfloat16" and not self.keeps_parameters and self.error_feedback

    @property
    def copy_torch_dtype(self) -> "torch.dtype":
        """`copy_dtype` as a torch dtype."""
        import torch

        return torch.bfloat16 if self.copy_dtype == "bfloat16" else torch.float32

    def for_trainer(self, additive_steps: bool) -> "GossipConfig":
        """These settings for a trainer whose steps can (or cannot) be added to another's
        (`peer.trainer.Capabilities.additive_steps`): partner steps only where they can."""
        if additive_steps or self.partner_steps == 0:
            return self
        return dataclasses.replace(self, partner_steps=0.0)

    def clip_radius(self) -> "NeighbourRadius":
        """A fresh clipping radius with these settings: the mixer's and the averaged weights' each
        own one (on different threads), built by this one rule."""
        from async_opt import NeighbourRadius

        return NeighbourRadius(q=self.clip_quantile, multiplier=self.clip_multiplier,
                               min_neighbours=self.clip_min_neighbours, max_relative=self.clip_max_relative,
                               own_multiplier=self.clip_own_multiplier)

    def step_scale_rule(self) -> "SwarmStepScale":
        """A fresh step-size rule with these settings (the step-boundary hook owns one)."""
        from async_opt import SwarmStepScale

        def rule(maximum: float) -> "SwarmStepScale":
            return SwarmStepScale(maximum, self.step_scale_power, warmup_periods=self.step_scale_warmup_periods,
                                  steps_per_period=self.period_floor, decay_steps=self.step_scale_decay_steps,
                                  pinned=self.step_scale if self.step_scale else None)

        try:
            measured = rule(self.step_scale_max)  # checks every setting, whether or not it is used
        except ValueError as err:
            raise ValueError(f"step_scale settings: {err}") from None
        return rule(1.0) if self.partner_steps > 0 else measured  # partner steps are the larger step

    @property
    def period_floor(self) -> int:
        """The fewest steps per publish: a pinned `gossip_every`, else 1."""
        return self.gossip_every or 1

    def publish_cadence(self) -> "PublishCadence":
        """A fresh publish cadence with these settings (`gossip_every` or `publish_budget`,
        `publish_catch_up`): the one rule both drivers' step-boundary hooks use."""
        from peer.core.cadence import PublishCadence

        return PublishCadence(self.gossip_every, self.publish_catch_up, self.publish_budget)

    def outbox_bound(self, numel: int) -> int:
        """Bytes of update frames the outbox keeps for a model of `numel` parameters (past its
        newest `outbox_min_frames`)."""
        return int(min(self.outbox_bytes, max(OUTBOX_FLOOR_BYTES, self.outbox_copies * 4 * numel)))

    @property
    def max_period_frame_bytes(self) -> float:
        """The largest update frame a longer period's denser codec may make: a quarter of
        `outbox_bytes` (not of `outbox_bound`: below ~270M parameters a model's outbox keeps fewer
        such frames, never fewer than `outbox_min_frames`)."""
        return self.outbox_bytes / 4

    def rate_at_period(self, period_steps: int, numel: int = 0) -> float:
        """What the mixing rate is multiplied by at a period of `period_steps` for a model of
        `numel` parameters: where `staleness` names no `gamma`, the rate follows the codec a
        publish is then sent with (`peer.core.period_codec`, `per_period`); 1 otherwise."""
        if not self.per_period or "gamma=" in self.staleness or period_steps <= 1:
            return 1.0
        from peer.core.period_codec import codec_for_period

        spec = codec_for_period(self.compression, period_steps, numel, self.max_period_frame_bytes)
        return default_gamma(spec) / default_gamma(self.compression)

    @property
    def resolved_staleness(self) -> str:
        """The staleness spec with `gamma` filled in from the compression when it was left out."""
        if "gamma=" in self.staleness:
            return self.staleness
        sep = "," if ":" in self.staleness or "," in self.staleness else ":"
        return f"{self.staleness}{sep}gamma={default_gamma(self.compression):g}"


def default_gamma(compression: str) -> float:
    """A consensus step that stays stable under this compression.

    CHOCO-SGD's consensus step must shrink with the compression quality δ (the kept
    fraction of a sparse codec), else compressed gossip with error feedback diverges: γ = 2δ,
    within [0.02, 0.5]. Dense codecs (fp16, bf16, int8) keep δ≈1, so γ=0.5 is safe
    (docs/benchmarks/peer.md#the-default-codec-and-its-mixing-rate). δ is the codec table's
    `kept_fraction`.
    """
    from protocol.codec_table import kept_fraction

    return max(0.02, min(0.5, 2.0 * float(kept_fraction(compression))))
