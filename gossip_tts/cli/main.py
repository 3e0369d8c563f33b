"""The `gossip-tts` command line. Callbacks only build configs and call `run()`."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any, Callable

import click

from gossip_tts.audio.registry import codec_names
from gossip_tts.cli.errors import OneLineGroup, SettingError, fail_cleanly as _fail_cleanly
from gossip_tts.cli.options import Flags, given
from gossip_tts.cli.peer import peer_options, run_peer
from gossip_tts.device import DEVICE_CHOICES  # plain strings: importing this costs no torch
from gossip_tts.model.guidance import GUIDANCE_MODES
from gossip_tts.train.weights import WEIGHTS

PACK = Flags("gossip_tts.audio.pack_config:PackConfig")
SYNTH = Flags("gossip_tts.apps.synth_config:SynthConfig")
EVAL = Flags("gossip_tts.apps.eval_config:EvalConfig")
IMPORT = Flags("gossip_tts.apps.echo_import:ImportConfig")
JUDGE = Flags("gossip_tts.judge.config:JudgeConfig")
SIMNET = Flags("simnet.runs.cli_app:SimnetAppConfig")
STATUS = Flags("gossip_tts.cli.status:StatusConfig")
COMMAND = Flags(None)
"""The flags of each command, bound to its config (a module that imports no torch where its
command's `--help` must answer at once); COMMAND's are flags of a command without a config."""
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_FOLDER = click.Path(exists=True, file_okay=False, path_type=Path)


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gossip-tts")
def main() -> None:
    """Peer-to-peer text-to-speech training."""
    if isinstance(sys.stdout, io.TextIOWrapper):  # a pipe (file, service manager) gets each line as it is printed
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
@click.argument("src_dir", type=_FOLDER)
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@PACK.option("--codec", type=click.Choice(codec_names()))
@PACK.option("--codec-weights", type=click.Path(exists=True), help="DAC weights file, or echo weights folder.")
@PACK.option("--shard-size", type=int, help="Samples per tar.")
@PACK.option("--speaker", help="Speaker name (default: the folder name).")
@PACK.option("--device", type=click.Choice(DEVICE_CHOICES))
@PACK.option("--overwrite", is_flag=True, help="Replace shards of the same name already in OUT_DIR.")
@click.pass_context
def pack(ctx: click.Context, src_dir: Path, out_dir: Path, **_flags: Any) -> None:
    """Turn an LJSpeech-style folder (wavs/ + metadata.csv) into latent tars."""
    from gossip_tts.audio.pack import PackConfig, run

    _fail_cleanly(run, _fail_cleanly(PackConfig, src_dir=src_dir, out_dir=out_dir, **given(ctx)))


@main.command()
@click.argument("directory", type=_FOLDER)
@COMMAND.option("--sign", "key_file", field=None, type=_FILE,
                help="Also write swarm-manifest.signed.json, signed by this key file (gossip-tts keygen); peers take "
                     "--data swarm-key:PUBKEY and follow the newest version this key signs.")
@COMMAND.option("--version", "version", field=None, type=int,
                help="With --sign: the version peers rank it by (default: the Unix time, or one more than the signed "
                     "manifest already in DIRECTORY).")
def manifest(directory: Path, key_file: Path | None, version: int | None) -> None:
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


def weights_option(flags: Flags) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """synthesize's and eval's choice of weights (`gossip_tts.train.weights.WEIGHTS`)."""
    return flags.option("--weights", type=click.Choice(WEIGHTS),
                        help="The peer's averaged weights (where the checkpoint has them) or the live ones.")


@main.command()
@SYNTH.option("--checkpoint", required=True, type=click.Path(exists=True, path_type=Path))
@SYNTH.option("--text", required=True)
@SYNTH.option("--reference", type=_FILE, help="Voice to imitate (wav).")
@SYNTH.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path))
@SYNTH.option("--seconds", type=float, help="Output length (default: estimated from the text).")
@SYNTH.option("--steps", type=int)
@SYNTH.option("--cfg-text", type=float, help="Text guidance scale.")
@SYNTH.option("--cfg-speaker", type=float, help="Speaker guidance scale.")
@SYNTH.option("--truncation", type=float, help="Scale of the start noise (Echo's 0.8 gives flatter, safer output; default: 1).")
@SYNTH.option("--seed", type=int)
@SYNTH.option("--device", type=click.Choice(DEVICE_CHOICES))
@SYNTH.option("--codec-weights", type=click.Path(exists=True))
@SYNTH.option("--guidance", type=click.Choice(GUIDANCE_MODES))
@weights_option(SYNTH)
@click.pass_context
def synthesize(ctx: click.Context, **_flags: Any) -> None:
    """Speak TEXT with a trained checkpoint and write a wav."""
    from gossip_tts.apps.synth_app import SynthConfig, run

    _fail_cleanly(run, _fail_cleanly(SynthConfig, **given(ctx)))


@main.command("import-echo")
@click.argument("src", type=_FILE)
@IMPORT.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Checkpoint folder to write.")
@click.pass_context
def import_echo(ctx: click.Context, src: Path, **_flags: Any) -> None:
    """Convert Echo TTS's weights (SRC, safetensors) into a checkpoint for --init-from and synthesize."""
    from gossip_tts.apps.echo_import import ImportConfig, run

    _fail_cleanly(run, _fail_cleanly(ImportConfig, src=src, **given(ctx)))


@main.command("eval")
@EVAL.option("--checkpoint", required=True, type=click.Path(exists=True, path_type=Path))
@EVAL.option("--data", field="sources", multiple=True, required=True, help="Folder of latent tars or URL (repeatable).")
@EVAL.option("--device", type=click.Choice(DEVICE_CHOICES))
@EVAL.option("--max-samples", type=int)
@weights_option(EVAL)
@click.pass_context
def eval_cmd(ctx: click.Context, **_flags: Any) -> None:
    """Print the deterministic flow-matching loss of CHECKPOINT on some tars (last line: eval_loss=...)."""
    from gossip_tts.apps.eval_app import EvalConfig, run

    values = given(ctx)
    _fail_cleanly(run, _fail_cleanly(EvalConfig, **{**values, "sources": list(values["sources"])}))


@main.command()
@click.argument("folder", type=_FOLDER)
@JUDGE.option("--reference", field="references", multiple=True, type=_FILE,
              help="A clip of the target voice (repeatable); speaker similarity is the cosine to their mean embedding.")
@JUDGE.option("--real", type=_FOLDER,
              help="LJSpeech-style folder of the real recordings of the same ids: adds the real and codec controls.")
@JUDGE.option("--codec", type=click.Choice(codec_names()), help="Codec of the round-trip control.")
@JUDGE.option("--codec-weights", type=click.Path(exists=True), help="DAC weights file, or echo weights folder.")
@JUDGE.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Plot file (default: FOLDER/judge.png).")
@JUDGE.option("--no-plot", field=None, is_flag=True, help="Skip the plot.")
@JUDGE.option("--remember/--no-remember",
              help="Keep the answers on the control clips (beside the built-in corpus) and recall them next time.")
@click.pass_context
def judge(ctx: click.Context, folder: Path, no_plot: bool | None, **_flags: Any) -> None:
    """Word and character error rates, speaker similarity and DNSMOS of an LJSpeech-style FOLDER of
    clips, beside controls (real recordings, their codec round trip, noise); last line judge: {json}.
    Needs the [judge] extra (its packages and their licences: docs/judge.md)."""
    from gossip_tts.judge.app import run
    from gossip_tts.judge.config import JudgeConfig

    values = {**given(ctx), **({"plot_enabled": False} if no_plot else {})}
    if "references" in values:
        values["references"] = list(values["references"])
    _fail_cleanly(run, _fail_cleanly(JudgeConfig, folder=folder, **values))


def _builtin_scenarios() -> str:
    """The names of simnet's built-in scenarios, read from its folder without importing it (no torch)."""
    import importlib.util

    spec = importlib.util.find_spec("simnet")
    folders = list(spec.submodule_search_locations or []) if spec else []
    names = sorted(p.stem for folder in folders for p in (Path(folder) / "scenarios").glob("*.toml"))
    return ", ".join(names) or "none found"


@main.command()
@SIMNET.option("--scenario", help=f"Built-in name ({_builtin_scenarios()}) or a TOML file.")
@SIMNET.option("--seed", type=int)
@SIMNET.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Folder for metrics.jsonl, summary.json and plots.")
@SIMNET.option("--plots/--no-plots", help="Draw the PNG plots.")
@SIMNET.option("--max-real-seconds", field="max_real_s", type=float, help="Cut each run short after this much real time.")
@click.pass_context
def simnet(ctx: click.Context, **_flags: Any) -> None:
    """Simulate a swarm of real peers over simulated links (deterministic from --seed)."""
    import gossip_tts.apps.simnet_models  # noqa: F401  (registers the tts-tiny model)
    from simnet.runs.cli_app import SimnetAppConfig, run

    summary = _fail_cleanly(run, _fail_cleanly(SimnetAppConfig, **given(ctx)))
    if summary.get("interrupted"):
        sys.exit(130)


@main.command()
@COMMAND.option("--out", field=None, required=True, type=click.Path(dir_okay=False, path_type=Path),
                help="Key file to write (mode 0600).")
def keygen(out: Path) -> None:
    """Make an Ed25519 identity; its public key is the peer id."""
    from gossip_tts.cli.keygen import write_key_file

    if out.exists():
        raise click.ClickException(f"{out} already exists; refusing to overwrite a key (pass another --out)")
    click.echo(f"peer_id={_fail_cleanly(write_key_file, out)}")


@main.command()
@click.argument("address", metavar="HOST:PORT")
@STATUS.option("--timeout", field="timeout_s", type=float, help="Seconds to wait for the peer.")
@STATUS.option("--json", field="as_json", is_flag=True, help="Print the peer's /v1/status JSON as it came.")
@click.pass_context
def status(ctx: click.Context, address: str, **_flags: Any) -> None:
    """Show a running peer's status (what its page at http://HOST:PORT/ shows): step, loss,
    rates, loss curve, neighbours, bytes, refusals."""
    import json

    from gossip_tts.cli.status import StatusConfig, StatusError, fetch_status, render

    cfg = _fail_cleanly(StatusConfig, address=address, **given(ctx))
    try:
        data = fetch_status(cfg.address, timeout_s=cfg.timeout_s)
    except StatusError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(data, indent=2) if cfg.as_json else render(data))


if __name__ == "__main__":
    sys.exit(main())
