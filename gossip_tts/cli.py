"""The `gossip-tts` command line. Callbacks only build configs and call `run()`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gossip_tts.device import DEVICE_CHOICES
from gossip_tts.train.config import PRESET_CHOICES


def _fail_cleanly(fn, *args, **kwargs):
    """Turn a user-facing error (bad value, missing file, missing extra) into one clear line."""
    from peer.checkpoint import CheckpointError

    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:  # Ctrl+C outside the training loop (start-up, joining): no traceback
        click.echo("interrupted", err=True)
        sys.exit(130)
    except (ValueError, CheckpointError) as exc:
        raise click.UsageError(str(exc)) from exc
    except (OSError, ImportError) as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gossip-tts")
def main() -> None:
    """Peer-to-peer text-to-speech training."""


@main.command()
@click.option("--data", "data", multiple=True, help="Folder of latent tars or http(s) URL (repeatable). Default: a built-in corpus.")
@click.option("--preset", type=click.Choice(PRESET_CHOICES), default="small", show_default=True)
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default="auto", show_default=True)
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps (default: run until Ctrl+C).")
@click.option("--checkpoint-dir", type=click.Path(path_type=Path), default=None, help="Where checkpoints (and peer.key) go.")
@click.option("--checkpoint-every", type=float, default=300.0, show_default=True, help="Seconds between checkpoints.")
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in --checkpoint-dir.")
@click.option("--batch-size", type=int, default=16, show_default=True)
@click.option("--lr", type=float, default=3e-4, show_default=True)
@click.option("--offload", is_flag=True, help="Keep fp32 master weights and optimizer state in CPU memory (ZeRO-Offload).")
@click.option("--init-from", type=click.Path(exists=True, path_type=Path), default=None, help="Start from this checkpoint's weights (fine-tuning).")
@click.option("--max-frames", type=int, default=256, show_default=True, help="Latent frames per clip (longer clips are cropped).")
@click.option("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice).")
@click.option("--seed", type=int, default=0, show_default=True, help="Mixed with the peer id into this peer's data order, noise and dropout.")
@click.option("--log-every", type=float, default=5.0, show_default=True, help="Seconds between progress lines.")
@click.option("--listen", default="0.0.0.0:0", show_default=True, help="HOST:PORT to serve on; port 0 picks a free port.")
@click.option("--advertise-host", default=None, help="Address other peers should dial (default: the listen host or this machine's LAN IP).")
@click.option("--peer", "peers", multiple=True, help="Bootstrap peer HOST:PORT (repeatable); the rest is learned by peer exchange.")
@click.option("--mdns/--no-mdns", default=True, show_default=True, help="Find peers on the LAN by mDNS.")
@click.option("--mdns-interface", "mdns_interfaces", multiple=True, help="IP of an interface for mDNS (repeatable; default: all).")
@click.option("--swarm", default="default", show_default=True, help="Only peers of the same swarm train together.")
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Identity file (gossip-tts keygen).")
@click.option("--gossip-every", type=int, default=4, show_default=True, help="Local steps between exchanges.")
@click.option("--compression", default="topk:0.1+int8", show_default=True, help="Update codec: identity, fp16, bf16, int8, topk:F[+int8], randk:F[+int8].")
@click.option("--staleness", default="pipemare:K=2000,p_min=0,tau_max=64", show_default=True, help="Staleness weight: constant, poly:a=A, hinge:a=A,b=B, exp:rate=R, pipemare:K=K,p_min=P (+gamma=G, tau_max=T).")
@click.option("--solo", is_flag=True, help="Train alone: no server, no discovery, no gossip.")
def peer(data, preset, device, max_steps, checkpoint_dir, checkpoint_every, resume, batch_size, lr, offload, init_from, max_frames, threads, seed, log_every,
         listen, advertise_host, peers, mdns, mdns_interfaces, swarm, key_file, gossip_every, compression, staleness, solo) -> None:
    """Train a TTS model on a stream of latent tars, gossiping with other peers."""
    from gossip_tts.peer_app import PeerAppConfig, run
    from gossip_tts.train.config import TrainConfig
    from peer.gossip.config import GossipConfig
    from peer.loop import LoopConfig
    from peer.net_config import NetConfig

    cfg = _fail_cleanly(
        lambda: PeerAppConfig(
            train=TrainConfig(
                preset=preset, device=device, sources=list(data), batch_size=batch_size, lr=lr, seed=seed,
                max_frames=max_frames, threads=threads, offload=offload, init_from=str(init_from) if init_from else None,
            ),
            loop=LoopConfig(
                max_steps=max_steps, checkpoint_dir=checkpoint_dir, checkpoint_every_s=checkpoint_every,
                resume=resume, log_every_s=log_every,
            ),
            gossip=GossipConfig(swarm=swarm, gossip_every=gossip_every, compression=compression, staleness=staleness),
            net=NetConfig(
                listen=listen, advertise_host=advertise_host, peers=list(peers), mdns=mdns,
                mdns_interfaces=list(mdns_interfaces) or None,
            ),
            solo=solo,
            key_file=key_file,
        )
    )
    _fail_cleanly(run, cfg)


@main.command()
@click.argument("src_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--codec", type=click.Choice(["mel", "dac"]), default="mel", show_default=True)
@click.option("--codec-weights", type=click.Path(exists=True, dir_okay=False), default=None, help="DAC weights file.")
@click.option("--shard-size", type=int, default=256, show_default=True, help="Samples per tar.")
@click.option("--speaker", default=None, help="Speaker name (default: the folder name).")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default="cpu", show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace shards of the same name already in OUT_DIR.")
def pack(src_dir, out_dir, codec, codec_weights, shard_size, speaker, device, overwrite) -> None:
    """Turn an LJSpeech-style folder (wavs/ + metadata.csv) into latent tars."""
    from gossip_tts.audio.pack import PackConfig, run

    cfg = _fail_cleanly(
        PackConfig, src_dir=src_dir, out_dir=out_dir, codec=codec, codec_weights=codec_weights,
        shard_size=shard_size, speaker=speaker, device=device, overwrite=overwrite,
    )
    _fail_cleanly(run, cfg)


@main.command()
@click.option("--checkpoint", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--text", required=True)
@click.option("--reference", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="Voice to imitate (wav).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--seconds", type=float, default=None, help="Output length (default: estimated from the text).")
@click.option("--steps", type=int, default=32, show_default=True)
@click.option("--cfg-text", type=float, default=3.0, show_default=True, help="Text guidance scale.")
@click.option("--cfg-speaker", type=float, default=3.0, show_default=True, help="Speaker guidance scale.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default="cpu", show_default=True)
@click.option("--codec-weights", type=click.Path(exists=True, dir_okay=False), default=None)
def synthesize(checkpoint, text, reference, out, seconds, steps, cfg_text, cfg_speaker, seed, device, codec_weights) -> None:
    """Speak TEXT with a trained checkpoint and write a wav."""
    from gossip_tts.synth_app import SynthConfig, run

    cfg = _fail_cleanly(
        SynthConfig, checkpoint=checkpoint, text=text, out=out, reference=reference, seconds=seconds, steps=steps,
        cfg_text=cfg_text, cfg_speaker=cfg_speaker, seed=seed, device=device, codec_weights=codec_weights,
    )
    _fail_cleanly(run, cfg)


@main.command("eval")
@click.option("--checkpoint", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--data", "data", multiple=True, required=True, help="Folder of latent tars or URL (repeatable).")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default="cpu", show_default=True)
@click.option("--max-samples", type=int, default=256, show_default=True)
def eval_cmd(checkpoint, data, device, max_samples) -> None:
    """Print the deterministic flow-matching loss of CHECKPOINT on some tars (last line: eval_loss=...)."""
    from gossip_tts.eval_app import EvalConfig, run

    cfg = _fail_cleanly(EvalConfig, checkpoint=checkpoint, sources=list(data), device=device, max_samples=max_samples)
    _fail_cleanly(run, cfg)


@main.command()
@click.option("--scenario", default="stragglers", show_default=True, help="Built-in name (stragglers, wan, churn, byzantine, scale, tts) or a TOML file.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Folder for metrics.jsonl, summary.json and plots.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--max-real-seconds", type=float, default=None, help="Cut each run short after this much real time.")
def simnet(scenario, seed, out, no_plots, max_real_seconds) -> None:
    """Simulate a swarm of real peers over simulated links (deterministic from --seed)."""
    import gossip_tts.simnet_models  # noqa: F401  (registers the tts-tiny model)
    from simnet.cli_app import SimnetAppConfig, run

    cfg = _fail_cleanly(SimnetAppConfig, scenario=scenario, seed=seed, out=out, plots=not no_plots,
                        max_real_s=max_real_seconds)
    summary = _fail_cleanly(run, cfg)
    if summary.get("interrupted"):
        sys.exit(130)


@main.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Key file to write (mode 0600).")
def keygen(out) -> None:
    """Make an Ed25519 identity; its public key is the peer id."""
    from gossip_tts.cli_keygen import write_key_file

    if out.exists():
        raise click.UsageError(f"{out} already exists; refusing to overwrite a key")
    click.echo(f"peer_id={_fail_cleanly(write_key_file, out)}")


if __name__ == "__main__":
    sys.exit(main())
