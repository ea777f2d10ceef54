"""The input error type shared by the deck's validation (:mod:`relcp_mpi.config.deck`, which re-exports it: its
public name is ``relcp_mpi.config.deck.DeckError``) and the checks made while the bodies are built from a deck
(:mod:`relcp_mpi.bodies.builder`: a generator that cannot place its bodies).  It lives here, at the bottom of the
package, so that building bodies does not import the deck layer above it."""


class DeckError(ValueError):
    """Invalid input deck.  ``problems`` is a list of 'key: message' strings."""

    def __init__(self, problems, source="deck"):
        self.problems = list(problems)
        self.source = source
        lines = "\n  - ".join(self.problems)
        super().__init__(f"invalid input deck {source}:\n  - {lines}")
