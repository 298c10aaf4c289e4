"""srgan's own caches of what it measured (the tile pad per model, the
precision per machine and work): small JSON files under $XDG_CACHE_HOME/srgan,
each a header and one table of entries by key. A cache is never trusted:
a damaged one is ignored with a warning and replaced by the next write,
and one that cannot be written costs a measurement next time, not the
command."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from srgan.files.atomic import write_text
from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import own
from srgan.files.reading import parse_json, read_regular_text

log = logging.getLogger("srgan")

CACHE_BYTES = 1 << 20  # a cache file read at most: a larger one is not srgan's


def cache_file(name: str) -> Path:
    """$XDG_CACHE_HOME/srgan/`name` (~/.cache when unset or not an absolute
    path, as the XDG specification says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    folder = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return folder / "srgan" / name


def read_entries(path: Path, table: str, what: str) -> dict[str, dict]:
    """The entries of the cache at `path` (the mapping under `table`) by key;
    {} for a missing file, and also for one that is not such a cache
    (damaged, foreign, too large): that one gets a warning naming `what`,
    never an error, and the next write replaces it."""
    own(path.parent)  # the command's own state, read and then replaced: not an input it must not write over
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        data = parse_json(read_regular_text(path, CACHE_BYTES, what))
        if not isinstance(data, dict) or not isinstance(data.get(table), dict):
            raise ValueError("not the layout srgan writes")
        return {key: value for key, value in data[table].items() if isinstance(value, dict)}
    except (SrganError, OSError, ValueError) as error:
        log.warning("%s: ignoring the %s (%s); it is measured again", path, what, first_line(error))
        return {}


def write_entries(path: Path, header: dict, table: str, entries: dict[str, dict], keep: int, what: str) -> None:
    """Write `header` and the newest `keep` entries under `table`. When the
    cache cannot be written, it logs a warning ("cannot cache the measured
    `what`") and the command goes on: it measures again next time."""
    kept = dict(list(entries.items())[-keep:])
    text = json.dumps({**header, table: kept}, indent=1) + "\n"
    try:
        write_text(path, text, overwrite=True)
    except (SrganError, OSError) as error:
        log.warning("cannot cache the measured %s: %s", what, first_line(error))
