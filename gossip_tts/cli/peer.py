"""`gossip-tts peer`: its flags (each bound to a config field) and the steps before training.

Nothing here imports torch at module level: `--help` must answer at once.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from gossip_tts.cli.options import Flags, config_options
from gossip_tts.cli.settings import APP_CONFIG, Key, key_of
from gossip_tts.device import DEVICE_CHOICES
from gossip_tts.train.config import PRESET_CHOICES
from gossip_tts.train.parallel import STRATEGIES
from async_opt.staleness import grammar as staleness_grammar
from protocol.codec_table import grammar

_PATH = click.Path(path_type=Path)
PEER = Flags(APP_CONFIG)
"""peer's flags: each `field` is a `section.field` of the settings (a field of the app config
itself, such as `solo`, has no section)."""
_OPTIONS = [
    PEER.option("--data", field="train.sources", multiple=True, help="Folder of latent tars or http(s) URL (repeatable), or a "
            "corpus fetched from other peers: swarm:HASH (its manifest's hash) or swarm-key:PUBKEY (the newest manifest "
            "signed by that key, from `gossip-tts manifest --sign`). Default: a built-in corpus."),
    PEER.option("--manifest", field="swarm_data.manifest", help="With --data swarm:HASH or swarm-key:PUBKEY: the manifest "
            "(path or URL; signed with swarm-key); the tars beside a local one are this peer's own. Default: fetched "
            "from the --peer addresses."),
    PEER.option("--data-cache", field="swarm_data.cache_dir", help="With --data swarm:…: where fetched shards are kept "
            "(default: <checkpoint-dir>/shards)."),
    PEER.option("--data-cache-size", field="swarm_data.cache_gb", type=float, help="With --data swarm:…: GB of fetched "
            "shards kept; the least recently used go first."),
    PEER.option("--preset", field="train.preset", type=click.Choice(PRESET_CHOICES), help="Model size."),
    PEER.option("--device", field="train.device", type=click.Choice(DEVICE_CHOICES), help="auto: CUDA, then Apple MPS, then CPU."),
    PEER.option("--max-steps", field="loop.max_steps", type=int, help="Stop at this step, counting the steps of a resumed or adopted state (default: run until Ctrl+C)."),
    PEER.option("--checkpoint-dir", field="loop.checkpoint_dir", help="Where checkpoints and peer.key go (default: runs/<swarm>; 'none': save nothing)."),
    PEER.option("--checkpoint-every", field="loop.checkpoint_every_s", type=float, help="Seconds between checkpoints."),
    PEER.option("--resume", field="loop.resume", is_flag=True, help="Continue from the checkpoint in the checkpoint dir."),
    PEER.option("--batch-size", field="train.batch_size", type=int),
    PEER.option("--lr", field="train.lr", type=float, help="Peak learning rate."),
    PEER.option("--offload", field="train.offload", is_flag=True, help="Keep fp32 master weights and optimizer state in CPU memory (ZeRO-Offload)."),
    PEER.option("--compile", field="train.compile", is_flag=True, help="Wrap the model in torch.compile (falls back to eager, saying why)."),
    PEER.option("--peak-tflops", field="train.peak_tflops", type=float, help="The device's dense bf16 peak, for MFU (default: a table by GPU name)."),
    PEER.option("--nproc", field="parallel.nproc", type=int, help="Processes of this peer, one per GPU (starts itself under torchrun)."),
    PEER.option("--parallel", field="parallel.strategy", type=click.Choice(STRATEGIES), help="How a multi-process peer trains: ddp or fsdp2."),
    PEER.option("--init-from", field="train.init_from", type=click.Path(exists=True), help="Start from this checkpoint's weights (fine-tuning)."),
    PEER.option("--max-frames", field="train.max_frames", type=int, help="Longest clip, in latent frames."),
    PEER.option("--threads", field="train.threads", type=int, help="CPU threads for torch (default: torch's choice)."),
    PEER.option("--seed", field="train.seed", type=int, help="Mixed with the peer id into this peer's data order, noise and dropout."),
    PEER.option("--log-every", field="loop.log_every_s", type=float, help="Seconds between progress lines."),
    PEER.option("--listen", field="net.listen", help="HOST:PORT to serve on; port 0 picks a free port."),
    PEER.option("--advertise-host", field="net.advertise_host", help="Address other peers should dial (default: the listen host or this machine's LAN IP)."),
    PEER.option("--peer", field="net.peers", multiple=True, help="Bootstrap peer HOST:PORT (repeatable); the rest is learned by peer exchange."),
    PEER.option("--mdns/--no-mdns", field="net.mdns", help="Find peers on the LAN by mDNS."),
    PEER.option("--mdns-interface", field="net.mdns_interfaces", multiple=True, help="IP of an interface for mDNS (repeatable; default: all)."),
    PEER.option("--swarm", field="gossip.swarm", help="Only peers of the same swarm train together."),
    PEER.option("--trusted-keys", field="net.trusted_keys", type=click.Path(exists=True, dir_okay=False),
            help="Private swarm: a file of peer ids (hex public keys, one per line); everyone else is refused."),
    PEER.option("--key", field="key_file", type=click.Path(dir_okay=False, path_type=Path), help="Identity file (gossip-tts keygen; default: <checkpoint-dir>/peer.key)."),
    PEER.option("--gossip-every", field="gossip.gossip_every", type=int,
                help="Pins the local steps between publishes (unset: [gossip] publish_budget sets them from what the protocol costs)."),
    PEER.option("--compression", field="gossip.compression", help=f"Update codec: {grammar()}; F a fraction in (0, 1], V a dense codec for the kept "
            "values (docs/wire.md#tensor-codecs)."),
    PEER.option("--staleness", field="gossip.staleness", help=f"Staleness weight: {staleness_grammar()}."),
    PEER.option("--solo", field="solo", is_flag=True, help="Train alone: no server, no discovery, no gossip."),
    PEER.option("--config", "config_file", field=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="TOML file of settings, one [section] table per component (see docs/cli.md); flags and GOSSIP_TTS_<SECTION>_<FIELD> env vars override it."),
    PEER.option("--overwrite", field=None, is_flag=True, help="Start a new run in a --checkpoint-dir that holds one "
                 "(its checkpoints are replaced as this run saves); without it or --resume such a folder is refused. "
                 "A flag only, never read from a config file or env var."),
    PEER.option("--print-config", field=None, is_flag=True, help="Print the resolved configuration as TOML and exit."),
    PEER.option("--quiet", "-q", field=None, is_flag=True, help="Only warnings and errors on stderr."),
    PEER.option("--log-json", field=None, type=_PATH, help="Also append every log line to this file as one JSON object per line."),
]


def peer_options(fn: Any) -> Any:
    """`fn` with every flag of `peer`."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def user_flags(ctx: click.Context) -> dict[Key, tuple[Any, str]]:
    """{(section, field): (value, flag)} for every setting flag of the invoked command."""
    out: dict[Key, tuple[Any, str]] = {}
    for param in config_options(ctx.command):
        value = ctx.params.get(str(param.name))
        flag = param.opts[0] if value is not False or not param.secondary_opts else param.secondary_opts[0]
        out[key_of(str(param.field))] = (value, flag)
    return out


def flag_names(command: click.Command) -> dict[Key, str]:
    """{(section, field): "--flag"}: how errors name a field that has a flag."""
    return {key_of(str(p.field)): p.opts[0] for p in config_options(command)}


def run_peer(ctx: click.Context, config_file: Path | None, print_config: bool, quiet: bool, log_json: Path | None,
             overwrite: bool = False) -> None:
    """Resolve settings, check what can be checked at once, then train (see `gossip-tts peer --help`)."""
    from gossip_tts.cli import logs, preflight, settings

    logs.configure(quiet=quiet, json_file=log_json)
    emit = logs.emitter()
    names = flag_names(ctx.command)
    resolved = preflight.with_checkpoint_dir(settings.resolve(user_flags(ctx), config_file, os.environ))
    cfg = settings.build(resolved, names)
    if print_config:
        click.echo(settings.to_toml(cfg, resolved), nl=False)
        return
    from gossip_tts.train.parallel import is_follower, torchrun_env

    if is_follower():  # the one dispatch on the rank: rank 0 checks, locks, logs and gossips, the others follow
        from gossip_tts.apps.group_app import leave, run_follower

        logs.configure(quiet=True)  # its warnings still show
        run_follower(cfg)
        leave(0)
    if cfg.parallel.nproc > 1 and torchrun_env() is None:
        preflight.check_device(cfg.train.device)
        from gossip_tts.apps.group_app import launch

        launch(cfg.parallel.nproc, sys.argv[1:], emit)
    directory = cfg.loop.checkpoint_dir
    emit(f"gossip-tts peer starting: preset {cfg.train.preset}, device {cfg.train.device}, swarm {cfg.gossip.swarm}, "
         + (f"checkpoints in {directory}" if directory else "checkpoints OFF"))
    preflight.check_device(cfg.train.device)
    if not cfg.solo:
        preflight.check_listen(cfg.net.listen)
    starting_over = preflight.check_checkpoint(directory, cfg.loop.resume, cfg.train.preset, overwrite)
    if starting_over:
        logging.getLogger("gossip_tts").warning(starting_over)
    lock = preflight.DirectoryLock(directory) if directory else None
    if lock:
        lock.acquire()
    else:
        _nothing_saved()
    try:
        cfg = preflight.prepare_data(cfg, emit)
        emit("opening the data and reading its first batch…")
        from gossip_tts.apps.peer_app import run

        run(cfg, emit=emit)
    finally:
        if lock:
            lock.release()
        else:
            _nothing_saved()
    if torchrun_env() is not None:  # rank 0 of a group: ended like the other ranks (group_app.leave says why)
        from gossip_tts.apps.group_app import leave

        leave(0)


def _nothing_saved() -> None:
    logging.getLogger("gossip_tts").warning("checkpoints are off (--checkpoint-dir none): nothing of this run is saved")
