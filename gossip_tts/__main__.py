"""`python -m gossip_tts`: the CLI, as torchrun starts each rank of a multi-process peer."""

from gossip_tts.cli.main import main

if __name__ == "__main__":
    main()
