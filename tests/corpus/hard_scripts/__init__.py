"""The scripted agents of the hard cases; importing this package registers every hard trace."""

from tests.corpus.hard_scripts import shapes, variants, waiting, work

__all__ = ["shapes", "variants", "waiting", "work"]
