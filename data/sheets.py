"""Pictures laid side by side with a white gap: the one layout of
`srgan compare`, `srgan degrade`'s contact sheet and a run's sample
pictures."""

from __future__ import annotations

import numpy as np

GAP = 8  # white pixels between the panels


def side_by_side(panels: list[np.ndarray]) -> np.ndarray:
    """HxWx3 uint8 panels of one height -> one HxW'x3 uint8 row, GAP white
    pixels between neighbours."""
    height = panels[0].shape[0]
    gap = np.full((height, GAP, 3), 255, dtype=np.uint8)
    row: list[np.ndarray] = []
    for panel in panels:
        row += [panel, gap]
    return np.concatenate(row[:-1], axis=1)
