"""The command-line interface (`srgan`, or `python -m srgan.cli`)."""
