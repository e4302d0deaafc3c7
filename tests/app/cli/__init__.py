"""Tests of the `hearth` command line (app.cli)."""
