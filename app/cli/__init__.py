"""The `hearth` command line: `main` dispatches to one module per noun (`hearth models …` is `models.py`)."""
