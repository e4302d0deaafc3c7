"""The `hearth` command line."""
