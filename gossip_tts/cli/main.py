"""The `gossip-tts` command line. Callbacks only build configs and call `run()`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from gossip_tts.audio.registry import codec_names
from gossip_tts.cli.errors import OneLineGroup, SettingError, fail_cleanly as _fail_cleanly
from gossip_tts.cli.options import field_option, given
from gossip_tts.cli.peer import peer_options, run_peer
from gossip_tts.device import DEVICE_CHOICES  # plain strings: importing this costs no torch

PACK, SYNTH, EVAL = ("gossip_tts.audio.pack_config:PackConfig", "gossip_tts.apps.synth_config:SynthConfig",
                     "gossip_tts.apps.eval_config:EvalConfig")
"""The configs of pack, synthesize and eval, whose defaults their flags show (modules without torch)."""


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gossip-tts")
def main() -> None:
    """Peer-to-peer text-to-speech training."""
    if hasattr(sys.stdout, "reconfigure"):  # a pipe (file, service manager) gets each line as it is printed
        sys.stdout.reconfigure(line_buffering=True)


@main.command()
@peer_options
@click.pass_context
def peer(ctx: click.Context, config_file, print_config, quiet, log_json, overwrite, **_settings) -> None:
    """Train a TTS model on a stream of latent tars, gossiping with other peers.

    Every setting can also come from GOSSIP_TTS_<SECTION>_<FIELD> env vars or a --config
    TOML file; a flag beats an env var, which beats the file. --print-config shows the result.
    """
    _fail_cleanly(run_peer, ctx, config_file, print_config, quiet, log_json, overwrite)


@main.command()
@click.argument("src_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@field_option("--codec", config=PACK, type=click.Choice(codec_names()))
@field_option("--codec-weights", config=PACK, type=click.Path(exists=True), help="DAC weights file, or echo weights folder.")
@field_option("--shard-size", config=PACK, type=int, help="Samples per tar.")
@field_option("--speaker", config=PACK, help="Speaker name (default: the folder name).")
@field_option("--device", config=PACK, type=click.Choice(DEVICE_CHOICES))
@click.option("--overwrite", is_flag=True, help="Replace shards of the same name already in OUT_DIR.")
def pack(src_dir, out_dir, codec, codec_weights, shard_size, speaker, device, overwrite) -> None:
    """Turn an LJSpeech-style folder (wavs/ + metadata.csv) into latent tars."""
    from gossip_tts.audio.pack import PackConfig, run

    cfg = _fail_cleanly(
        PackConfig, src_dir=src_dir, out_dir=out_dir, overwrite=overwrite,
        **given(codec=codec, codec_weights=codec_weights, shard_size=shard_size, speaker=speaker, device=device),
    )
    _fail_cleanly(run, cfg)


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--sign", "key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Also write swarm-manifest.signed.json, signed by this key file (gossip-tts keygen); peers take "
                   "--data swarm-key:PUBKEY and follow the newest version this key signs.")
@click.option("--version", "version", type=int, default=None,
              help="With --sign: the version peers rank it by (default: the Unix time, or one more than the signed "
                   "manifest already in DIRECTORY).")
def manifest(directory, key_file, version) -> None:
    """(Re)write DIRECTORY/swarm-manifest.json for the latent tars in it and print its swarm id,
    which peers take as --data swarm:HASH to fetch the tars from each other (with --sign, also
    the signed manifest and the key's swarm-key:PUBKEY)."""
    from gossip_tts.data.swarm_manifest import write_manifest, write_signed_manifest
    from protocol import Identity

    signed = None
    if key_file is None:
        if version is not None:
            raise SettingError("--version needs --sign KEYFILE (it versions a signed manifest)")
        written = _fail_cleanly(write_manifest, directory)
    else:
        signed = _fail_cleanly(write_signed_manifest, directory, _fail_cleanly(Identity.load, key_file), version)
        written = signed.manifest
    click.echo(f"{len(written.shards)} shard(s), {written.total_bytes} bytes, "
               f"{sum(s.audio_seconds for s in written.shards) / 60:.1f} min of audio")
    if signed is not None:
        click.echo(f"signed: version {signed.version}, document {signed.hash}; peers trusting the key take:")
        click.echo(f"swarm-key:{signed.signer}")
    else:
        click.echo(written.swarm_id)


def weights_option(config: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """synthesize's and eval's choice (gossip_tts.train.load.WEIGHTS; not imported here: it pulls in torch)."""
    return field_option("--weights", config=config, type=click.Choice(["average", "live"]),
                        help="The peer's averaged weights (where the checkpoint has them) or the live ones.")


@main.command()
@click.option("--checkpoint", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--text", required=True)
@click.option("--reference", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="Voice to imitate (wav).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path))
@field_option("--seconds", config=SYNTH, type=float, help="Output length (default: estimated from the text).")
@field_option("--steps", config=SYNTH, type=int)
@field_option("--cfg-text", config=SYNTH, type=float, help="Text guidance scale.")
@field_option("--cfg-speaker", config=SYNTH, type=float, help="Speaker guidance scale.")
@field_option("--seed", config=SYNTH, type=int)
@field_option("--device", config=SYNTH, type=click.Choice(DEVICE_CHOICES))
@field_option("--codec-weights", config=SYNTH, type=click.Path(exists=True))
@field_option("--guidance", config=SYNTH, type=click.Choice(["independent", "nested"]))
@weights_option(SYNTH)
def synthesize(checkpoint, text, reference, out, seconds, steps, cfg_text, cfg_speaker, seed, device, codec_weights, guidance,
               weights) -> None:
    """Speak TEXT with a trained checkpoint and write a wav."""
    from gossip_tts.apps.synth_app import SynthConfig, run

    cfg = _fail_cleanly(
        SynthConfig, checkpoint=checkpoint, text=text, out=out, reference=reference,
        **given(seconds=seconds, steps=steps, cfg_text=cfg_text, cfg_speaker=cfg_speaker, seed=seed, device=device,
                codec_weights=codec_weights, guidance=guidance, weights=weights),
    )
    _fail_cleanly(run, cfg)


@main.command("import-echo")
@click.argument("src", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Checkpoint folder to write.")
def import_echo(src, out) -> None:
    """Convert Echo TTS's weights (SRC, safetensors) into a checkpoint for --init-from and synthesize."""
    from gossip_tts.apps.echo_import import ImportConfig, run

    _fail_cleanly(run, _fail_cleanly(ImportConfig, src=src, out=out))


@main.command("eval")
@click.option("--checkpoint", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--data", "data", multiple=True, required=True, help="Folder of latent tars or URL (repeatable).")
@field_option("--device", config=EVAL, type=click.Choice(DEVICE_CHOICES))
@field_option("--max-samples", config=EVAL, type=int)
@weights_option(EVAL)
def eval_cmd(checkpoint, data, device, max_samples, weights) -> None:
    """Print the deterministic flow-matching loss of CHECKPOINT on some tars (last line: eval_loss=...)."""
    from gossip_tts.apps.eval_app import EvalConfig, run

    cfg = _fail_cleanly(EvalConfig, checkpoint=checkpoint, sources=list(data),
                        **given(device=device, max_samples=max_samples, weights=weights))
    _fail_cleanly(run, cfg)


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--reference", "references", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A clip of the target voice (repeatable); speaker similarity is the cosine to their mean embedding.")
@click.option("--real", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="LJSpeech-style folder of the real recordings of the same ids: adds the real and codec controls.")
@click.option("--codec", type=click.Choice(codec_names()), default="mel", show_default=True,
              help="Codec of the round-trip control.")
@click.option("--codec-weights", type=click.Path(exists=True), default=None, help="DAC weights file, or echo weights folder.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Plot file (default: FOLDER/judge.png).")
@click.option("--no-plot", is_flag=True, help="Skip the plot.")
def judge(folder, references, real, codec, codec_weights, plot, no_plot) -> None:
    """Word and character error rates, speaker similarity and DNSMOS of an LJSpeech-style FOLDER of
    clips, beside controls (real recordings, their codec round trip, noise); last line judge: {json}.
    Needs the [judge] extra (its packages and their licences: docs/judge.md)."""
    from gossip_tts.judge import JudgeConfig, run

    cfg = _fail_cleanly(JudgeConfig, folder=folder, references=list(references), real=real, codec=codec,
                        codec_weights=codec_weights, plot=plot, plot_enabled=not no_plot)
    _fail_cleanly(run, cfg)


def _builtin_scenarios() -> str:
    """The names of simnet's built-in scenarios, read from its folder without importing it (no torch)."""
    import importlib.util

    spec = importlib.util.find_spec("simnet")
    folders = list(spec.submodule_search_locations or []) if spec else []
    names = sorted(p.stem for folder in folders for p in (Path(folder) / "scenarios").glob("*.toml"))
    return ", ".join(names) or "none found"


@main.command()
@click.option("--scenario", default="stragglers", show_default=True, help=f"Built-in name ({_builtin_scenarios()}) or a TOML file.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Folder for metrics.jsonl, summary.json and plots.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--max-real-seconds", type=float, default=None, help="Cut each run short after this much real time.")
def simnet(scenario, seed, out, no_plots, max_real_seconds) -> None:
    """Simulate a swarm of real peers over simulated links (deterministic from --seed)."""
    import gossip_tts.apps.simnet_models  # noqa: F401  (registers the tts-tiny model)
    from simnet.runs.cli_app import SimnetAppConfig, run

    cfg = _fail_cleanly(SimnetAppConfig, scenario=scenario, seed=seed, out=out, plots=not no_plots,
                        max_real_s=max_real_seconds)
    summary = _fail_cleanly(run, cfg)
    if summary.get("interrupted"):
        sys.exit(130)


@main.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Key file to write (mode 0600).")
def keygen(out) -> None:
    """Make an Ed25519 identity; its public key is the peer id."""
    from gossip_tts.cli.keygen import write_key_file

    if out.exists():
        raise click.ClickException(f"{out} already exists; refusing to overwrite a key (pass another --out)")
    click.echo(f"peer_id={_fail_cleanly(write_key_file, out)}")


@main.command()
@click.argument("address", metavar="HOST:PORT")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds to wait for the peer.")
@click.option("--json", "as_json", is_flag=True, help="Print the peer's /v1/status JSON as it came.")
def status(address, timeout, as_json) -> None:
    """Show a running peer's status (what its page at http://HOST:PORT/ shows): step, loss,
    rates, loss curve, neighbours, bytes, refusals."""
    import json

    from gossip_tts.cli.status import StatusError, fetch_status, render

    try:
        data = fetch_status(address, timeout_s=timeout)
    except StatusError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(data, indent=2) if as_json else render(data))


if __name__ == "__main__":
    sys.exit(main())
