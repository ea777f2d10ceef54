"""Shared wording of deck problems (used by :mod:`relcp_mpi.config.deck` and :mod:`relcp_mpi.config.events`)."""


def unknown_keys(mapping, allowed, path, problems):
    """Append ``'<path>.<key>: unknown key (allowed: ...)'`` to ``problems`` for every key of ``mapping`` not
    in ``allowed`` (``path`` '' at the top level of a deck)."""
    for key in mapping:
        if key not in allowed:
            problems.append(f"{path + '.' if path else ''}{key}: unknown key (allowed: {', '.join(sorted(allowed))})")
