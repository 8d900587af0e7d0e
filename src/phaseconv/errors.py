"""Errors a user can act on: the command prints their message on one line and exits with status 2."""


class PhaseconvError(Exception):
    """Bad input or an unusable model, named in words the user understands."""
