"""Sub-commands of the gpufleet CLI (see gpufleet.cli.COMMANDS)."""
