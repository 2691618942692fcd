"""The `skyhub` command line (entry point: `skyhub.cli.main:main`)."""
