"""The ``topology`` command line (private): ``main.py`` dispatches to one module per command."""
