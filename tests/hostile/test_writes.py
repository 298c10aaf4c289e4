"""Writes that could destroy data: every command's outputs refuse inputs and
existing files (without --force), stay in the folder asked for, and are
never half written."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from PIL import Image

from conftest import assert_refused, no_temporary_files, skimage_photo


def tree(folder) -> dict[str, object]:
    """Everything below `folder`: each path (relative), with a file's bytes,
    a link's target or "folder". Unlike conftest's snapshot it also sees
    paths that were not there before: a file or folder a refused command
    made is a difference."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_dir():
            found[name] = "folder"
        else:
            found[name] = path.read_bytes()
    return found


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "in" / "coffee.png"
    path.parent.mkdir()
    Image.fromarray(skimage_photo("coffee")[:64, :64]).save(path)
    return path


def test_every_refused_write_leaves_the_folder_as_it_was(srgan, tiny_run, photo, tmp_path):
    folder = photo.parent
    (folder / "existing.png").write_bytes(b"precious")
    (folder / "scores.json").write_text('{"mine": 1}')
    (folder / "notes.txt").write_text("mine")
    (folder / "coffee_x4.png").write_bytes(b"an earlier result")
    os.link(photo, folder / "hardlink_x4.png")  # the input under another name
    cases = [
        # (args, culprit)
        (["compare", tiny_run, photo, "-o", folder / "existing.png"], "existing.png: exists (use --force"),
        (["compare", tiny_run, photo, "-o", photo, "--force"], "is an input"),
        (["compare", tiny_run, photo, "-o", folder / "cmp.jpg"], "expected a file name ending in .png"),
        (["evaluate", folder, "-k", tiny_run, "--json", folder / "scores.json"], "scores.json: exists"),
        (["upscale", photo, "-k", tiny_run], "coffee_x4.png: exists (use --force"),
        (["upscale", photo, "-k", tiny_run, "--suffix", "/../../escaped", "-o", tmp_path / "out"], "--suffix"),
        (["upscale", photo, "-k", tiny_run, "--suffix", "_x4/../../notes"], "--suffix"),
        (["upscale", photo, "-k", tiny_run, "-o", folder / "notes.txt"], "not an image srgan writes"),
        (["upscale", photo, "-k", tiny_run, "-o", folder / "result.gif"], "cannot write .gif files"),
        (["upscale", photo, "-k", tiny_run, "--suffix", "", "--ext", "png", "--force"], "would overwrite an input"),
        (["upscale", photo, "-k", tiny_run, "-o", folder / "hardlink_x4.png", "--force"], "would overwrite an input"),
        (["samples", folder.parent / "samples_here"], "exists (use --force"),
        (["plot", tiny_run, "-o", folder / "existing.png"], "existing.png: exists"),
    ]
    (folder.parent / "samples_here" / "val").mkdir(parents=True)
    (folder.parent / "samples_here" / "val" / "immunohistochemistry.png").write_bytes(b"mine")
    # Escapes land in tmp_path (the inputs' parent: `_x4/../../notes` names
    # tmp_path/notes.png) or beside the run; both trees are compared whole.
    watched = (tmp_path, tiny_run.parent)
    before = [tree(folder) for folder in watched]
    for args, culprit in cases:
        assert_refused(srgan(*args), culprit)
        for folder, was in zip(watched, before, strict=True):
            now = tree(folder)
            assert set(now) == set(was), (args, sorted(set(now) ^ set(was)))
            assert [name for name in was if now[name] != was[name]] == [], args


def test_force_replaces_a_planted_symlink_not_its_target(srgan, tiny_run, photo, tmp_path):
    """An output name that is a symlink to another file: --force replaces the
    link itself; the file it pointed to is untouched."""
    precious = tmp_path / "precious.txt"
    precious.write_text("do not touch")
    out = tmp_path / "out"
    out.mkdir()
    (out / "coffee_x4.png").symlink_to(precious)
    assert srgan("upscale", photo, "-k", tiny_run, "-o", out).returncode == 2  # exists
    result = srgan("upscale", photo, "-k", tiny_run, "-o", out, "--force")
    assert result.returncode == 0, result
    assert precious.read_text() == "do not touch"
    assert not (out / "coffee_x4.png").is_symlink() and Image.open(out / "coffee_x4.png").size == (256, 256)


def test_force_overwrites_and_outputs_are_whole(srgan, tiny_run, photo, tmp_path):
    cmp = tmp_path / "cmp.png"
    cmp.write_bytes(b"old")
    assert srgan("compare", tiny_run, photo, "-o", cmp, "--force").returncode == 0
    assert Image.open(cmp).size == (3 * 64 + 16, 64)
    scores = tmp_path / "scores.json"
    scores.write_text("old")
    assert srgan("evaluate", photo.parent, "-k", tiny_run, "--json", scores, "--force").returncode == 0
    assert json.loads(scores.read_text())["scale"] == 4
    assert not no_temporary_files(tmp_path)


def test_usage_errors_are_one_plain_line(srgan):
    for args, culprit in (
        (["upscale"], "Missing argument"),
        (["upscale", "x.png", "-k", "y", "--tile-pad", "abc"], "--tile-pad"),
        (["train", "--no-such-option"], "--no-such-option"),
        (["nosuchcommand"], "nosuchcommand"),
    ):
        result = srgan(*args)
        assert_refused(result, culprit)
        assert len(result.stderr.strip().splitlines()) == 1, result


def test_a_full_disk_keeps_the_old_json_whole(tmp_path, photo, tiny_run):
    """evaluate --json --force onto a tmpfs with no room: the old file stays
    whole, no temporary file is left, the message says disk full."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs")
    import subprocess
    import sys

    mount = tmp_path / "small"
    mount.mkdir()
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {mount} && "
        f"printf '%s' '{{\"old\": true}}' > {mount}/scores.json && "
        f"head -c 60000 /dev/zero > {mount}/filler; "
        f"{sys.executable} -m srgan.cli evaluate {photo.parent} -k {tiny_run} --json {mount}/scores.json --force; "
        f"echo rc=$?; cat {mount}/scores.json; echo; ls -a {mount}"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    if "mount" in done.stderr and "rc=" not in done.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    assert "rc=2" in done.stdout, done
    assert '{"old": true}' in done.stdout and ".tmp" not in done.stdout, done
    assert "disk full at" in done.stderr and "scores.json" in done.stderr and "Traceback" not in done.stderr, done


def test_an_output_folder_that_cannot_be_made(srgan, tiny_run, photo, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("mine")
    assert_refused(srgan("compare", tiny_run, photo, "-o", blocker / "cmp.png"), "cannot be made a folder")
    assert_refused(srgan("samples", blocker / "x"), "cannot be made a folder")
    result = srgan("upscale", photo, "-k", tiny_run, "-o", blocker / "out")
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result
    assert blocker.read_text() == "mine"


def test_a_killed_writers_temporary_file_goes_with_the_next_write_into_its_folder(tmp_path):
    """kill -9 runs no cleanup: what a killed `srgan upscale` of a video left
    (gigabytes, hidden) is removed by the next write into its folder, and
    nothing else: not a live writer's, not a dead writer's still being
    written on another machine (touched in the last minute), not a file of
    another pattern, not a folder (prepare's, which prepare sweeps)."""
    import subprocess
    import sys
    import time

    from srgan.files import write_bytes

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    old = time.time() - 3600
    left = [tmp_path / f".out.mp4.{dead}.0badcafe.tmp", tmp_path / f".other.png.{dead}.12345678.tmp"]
    fresh = tmp_path / f".out.mp4.{dead}.00c0ffee.tmp"
    live = tmp_path / f".out.mp4.{os.getpid()}.deadbeef.tmp"
    unlike = tmp_path / f".out.mp4.{dead}.tmp"
    folder = tmp_path / f".data.prepared.{dead}.0badcafe.tmp"
    folder.mkdir()
    for path in (*left, fresh, live, unlike):
        path.write_bytes(b"partial")
    for path in (*left, live, unlike, folder):
        os.utime(path, (old, old))
    write_bytes(tmp_path / "out.mp4", b"whole")
    assert (tmp_path / "out.mp4").read_bytes() == b"whole"
    assert not any(path.exists() for path in left)
    assert fresh.exists() and live.exists() and unlike.exists() and folder.is_dir()
