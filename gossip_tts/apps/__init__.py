"""What each command runs, beside its config: a `*_config` module holds a command's settings
and imports no torch (`--help` reads its defaults), its `*_app` module does the work."""
