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

from gossip_tts.cli.options import flag_names, setting, user_flags
from gossip_tts.device import DEVICE_CHOICES
from gossip_tts.train.config import PRESET_CHOICES
from gossip_tts.train.parallel import STRATEGIES
from protocol.codec_table import grammar

_PATH = click.Path(path_type=Path)
_OPTIONS = [
    setting("--data", setting="train.sources", multiple=True, help="Folder of latent tars or http(s) URL (repeatable), or a "
            "corpus fetched from other peers: swarm:HASH (its manifest's hash) or swarm-key:PUBKEY (the newest manifest "
            "signed by that key, from `gossip-tts manifest --sign`). Default: a built-in corpus."),
    setting("--manifest", setting="swarm_data.manifest", help="With --data swarm:HASH or swarm-key:PUBKEY: the manifest "
            "(path or URL; signed with swarm-key); the tars beside a local one are this peer's own. Default: fetched "
            "from the --peer addresses."),
    setting("--data-cache", setting="swarm_data.cache_dir", help="With --data swarm:…: where fetched shards are kept "
            "(default: <checkpoint-dir>/shards)."),
    setting("--data-cache-size", setting="swarm_data.cache_gb", type=float, help="With --data swarm:…: GB of fetched "
            "shards kept; the least recently used go first."),
    setting("--preset", setting="train.preset", type=click.Choice(PRESET_CHOICES), help="Model size."),
    setting("--device", setting="train.device", type=click.Choice(DEVICE_CHOICES), help="auto: CUDA, then Apple MPS, then CPU."),
    setting("--max-steps", setting="loop.max_steps", type=int, help="Stop at this step, counting the steps of a resumed or adopted state (default: run until Ctrl+C)."),
    setting("--checkpoint-dir", setting="loop.checkpoint_dir", help="Where checkpoints and peer.key go (default: runs/<swarm>; 'none': save nothing)."),
    setting("--checkpoint-every", setting="loop.checkpoint_every_s", type=float, help="Seconds between checkpoints."),
    setting("--resume", setting="loop.resume", is_flag=True, help="Continue from the checkpoint in the checkpoint dir."),
    setting("--batch-size", setting="train.batch_size", type=int),
    setting("--lr", setting="train.lr", type=float, help="Peak learning rate."),
    setting("--offload", setting="train.offload", is_flag=True, help="Keep fp32 master weights and optimizer state in CPU memory (ZeRO-Offload)."),
    setting("--compile", setting="train.compile", is_flag=True, help="Wrap the model in torch.compile (falls back to eager, saying why)."),
    setting("--peak-tflops", setting="train.peak_tflops", type=float, help="The device's dense bf16 peak, for MFU (default: a table by GPU name)."),
    setting("--nproc", setting="parallel.nproc", type=int, help="Processes of this peer, one per GPU (starts itself under torchrun)."),
    setting("--parallel", setting="parallel.strategy", type=click.Choice(STRATEGIES), help="How a multi-process peer trains: ddp or fsdp2."),
    setting("--init-from", setting="train.init_from", type=click.Path(exists=True), help="Start from this checkpoint's weights (fine-tuning)."),
    setting("--max-frames", setting="train.max_frames", type=int, help="Longest clip, in latent frames."),
    setting("--threads", setting="train.threads", type=int, help="CPU threads for torch (default: torch's choice)."),
    setting("--seed", setting="train.seed", type=int, help="Mixed with the peer id into this peer's data order, noise and dropout."),
    setting("--log-every", setting="loop.log_every_s", type=float, help="Seconds between progress lines."),
    setting("--listen", setting="net.listen", help="HOST:PORT to serve on; port 0 picks a free port."),
    setting("--advertise-host", setting="net.advertise_host", help="Address other peers should dial (default: the listen host or this machine's LAN IP)."),
    setting("--peer", setting="net.peers", multiple=True, help="Bootstrap peer HOST:PORT (repeatable); the rest is learned by peer exchange."),
    setting("--mdns/--no-mdns", setting="net.mdns", help="Find peers on the LAN by mDNS."),
    setting("--mdns-interface", setting="net.mdns_interfaces", multiple=True, help="IP of an interface for mDNS (repeatable; default: all)."),
    setting("--swarm", setting="gossip.swarm", help="Only peers of the same swarm train together."),
    setting("--trusted-keys", setting="net.trusted_keys", type=click.Path(exists=True, dir_okay=False),
            help="Private swarm: a file of peer ids (hex public keys, one per line); everyone else is refused."),
    setting("--key", setting="peer.key_file", type=click.Path(dir_okay=False, path_type=Path), help="Identity file (gossip-tts keygen; default: <checkpoint-dir>/peer.key)."),
    setting("--gossip-every", setting="gossip.gossip_every", type=int, help="Local steps between exchanges."),
    setting("--compression", setting="gossip.compression", help=f"Update codec: {grammar()}; F a fraction in (0, 1], V a dense codec for the kept "
            "values (docs/wire.md#tensor-codecs)."),
    setting("--staleness", setting="gossip.staleness", help="Staleness weight: constant, poly:a=A, hinge:a=A,b=B, exp:rate=R, pipemare:K=K,p_min=P (+gamma=G, tau_max=T)."),
    setting("--solo", setting="peer.solo", is_flag=True, help="Train alone: no server, no discovery, no gossip."),
    click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="TOML file of settings, one [section] table per component (see docs/cli.md); flags and GOSSIP_TTS_<SECTION>_<FIELD> env vars override it."),
    click.option("--overwrite", is_flag=True, help="Start a new run in a --checkpoint-dir that holds one "
                 "(its checkpoints are replaced as this run saves); without it or --resume such a folder is refused. "
                 "A flag only, never read from a config file or env var."),
    click.option("--print-config", is_flag=True, help="Print the resolved configuration as TOML and exit."),
    click.option("--quiet", "-q", is_flag=True, help="Only warnings and errors on stderr."),
    click.option("--log-json", type=_PATH, default=None, help="Also append every log line to this file as one JSON object per line."),
]


def peer_options(fn: Any) -> Any:
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


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

    if is_follower():  # a non-zero rank of a torchrun group: rank 0 checks, locks, logs and gossips
        from gossip_tts.apps.peer_app import run

        logs.configure(quiet=True)  # its warnings still show

        run(cfg, emit=emit)
        from gossip_tts.apps.group_app import leave

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
