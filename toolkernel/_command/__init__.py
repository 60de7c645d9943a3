"""The `tools` command: argv, stdin and cwd in; the call's route through the catalog out."""
