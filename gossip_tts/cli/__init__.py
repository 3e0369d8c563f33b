"""The `gossip-tts` command line: the commands (`main`), their flags, each bound to a field of a
config dataclass (`options`), the settings of `peer` (`settings`), errors as one line (`errors`)
and the reference they generate (`docs`). Importing any of it loads no torch: `--help` answers
at once; what a command runs lives in `gossip_tts.apps` and the subpackages, imported when it runs."""
