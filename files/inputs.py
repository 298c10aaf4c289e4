"""The files a command reads, so that it never writes over one.

While a command runs (`command_inputs`, entered by the CLI's main), the
readers note each file they read (files/reading.py's bounded reads and
torch and safetensors loads, the image and video decoders) and each folder
they list for images or videos; `check_output`, and so every write, refuses
them as targets, even with --force: --force replaces an earlier output,
never a file the same command reads. The module also remembers the targets
a command has checked, until they are written, so that a reader meeting one
refuses it at once, before the work (`evaluate hr/ --json hr/a.png` checks
its --json before it lists hr/).

A resumed run reads its own checkpoint, config and logs and replaces them as
it goes: `own` marks its folder, and no file in it counts as an input.
Outside a command (srgan used as a library, tests calling its functions)
nothing is noted: the callers' explicit `inputs=` still hold."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from srgan.files.errors import SrganError


@dataclass
class _Inputs:
    files: dict[str, str] = field(default_factory=dict)  # a read file's names (as given, resolved) -> what it is
    identities: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)  # (dev, inode) -> (what, name)
    folders: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)  # listed: (resolved, suffixes, what)
    owned: list[str] = field(default_factory=list)  # resolved folders whose files are the command's own state
    planned: dict[str, str] = field(default_factory=dict)  # a checked target's names -> the name it was given


_noted: _Inputs | None = None


@contextlib.contextmanager
def command_inputs() -> Iterator[None]:
    """Note the files read from here to the end of the block: one command."""
    global _noted
    previous, _noted = _noted, _Inputs()
    try:
        yield
    finally:
        _noted = previous


def note_read(path: Path | str, what: str = "a file") -> None:
    """Note that this command reads `path` (`what`: "the checkpoint", "an
    image"). Raises SrganError at once if the command has already checked
    it as an output."""
    if _noted is None:
        return
    names = _names(Path(path))
    if _under(names[-1], _noted.owned):
        return
    for name in names:
        if name in _noted.planned:
            raise SrganError(f"{_noted.planned[name]}: is {what} this command reads; refusing to write over it")
    # a listed folder covers it: no entry for each of a training set's images
    if all(_listed(Path(name)) is not None for name in names):
        return
    for name in names:
        _noted.files.setdefault(name, what)
    with contextlib.suppress(OSError):
        info = os.stat(path)
        _noted.identities.setdefault((info.st_dev, info.st_ino), (what, names[-1]))


def note_listed(folder: Path | str, suffixes: Iterable[str], what: str = "an image") -> None:
    """Note that this command reads the files below `folder` whose names end
    in `suffixes` (a folder of images, searched recursively): check_output
    refuses each as a target, decoded yet or not. Raises SrganError if a
    target the command has already checked is among them."""
    if _noted is None:
        return
    resolved = os.path.realpath(folder)
    if _under(resolved, _noted.owned):
        return
    kept = tuple(s.lower() for s in suffixes)
    for name, given in _noted.planned.items():
        if _under(os.path.dirname(name), [resolved]) and name.lower().endswith(kept) and os.path.lexists(name):
            raise SrganError(f"{given}: is {what} of {folder}, which this command reads; refusing to write over it")
    _noted.folders.append((resolved, kept, f"{what} of {folder}"))


def own(folder: Path | str) -> None:
    """Mark the files in `folder` as this command's own state (a resumed
    run's checkpoint, config and logs), which it reads to continue and
    replaces as it goes: none of them counts as an input."""
    if _noted is None:
        return
    resolved = os.path.realpath(folder)
    _noted.owned.append(resolved)
    _noted.files = {name: what for name, what in _noted.files.items() if not _under(name, [resolved])}
    _noted.identities = {k: v for k, v in _noted.identities.items() if not _under(v[1], [resolved])}


def check_not_read(final: Path, given: Path) -> None:
    """Raise SrganError if this command reads `final` (its folder resolved);
    else remember it as a target (see note_read)."""
    if _noted is None:
        return
    names = _names(final)
    if _under(names[-1], _noted.owned) or _under(names[0], _noted.owned):
        return
    what = next((_noted.files[name] for name in names if name in _noted.files), None)
    if what is None and os.path.lexists(final):
        with contextlib.suppress(OSError):
            info = os.stat(final)
            what = _noted.identities.get((info.st_dev, info.st_ino), (None, ""))[0]
        what = what or _listed(final)
    if what is not None:
        raise SrganError(f"{given}: is {what} this command reads; refusing to write over it")
    for name in names:
        _noted.planned[name] = str(given)


def written(final: Path) -> None:
    """Forget `final` as a target once it is written: a reader may read it now."""
    if _noted is not None:
        for name in _names(final):
            _noted.planned.pop(name, None)


def _listed(path: Path) -> str | None:
    """What `path` (its folder resolved) is as a file of a listed folder, if it is one."""
    assert _noted is not None
    for folder, suffixes, what in _noted.folders:
        if _under(str(path.parent), [folder]) and path.name.lower().endswith(suffixes):
            return what
    return None


def _names(path: Path) -> tuple[str, str]:
    """(the name with its folder resolved, the name with every link resolved)."""
    absolute = os.path.abspath(path)
    named = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
    return named, os.path.realpath(absolute)


def _under(name: str, folders: list[str]) -> bool:
    return any(name == folder or name.startswith(folder.rstrip(os.sep) + os.sep) for folder in folders)
