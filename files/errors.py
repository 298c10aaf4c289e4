"""The one exception type for mistakes a user can make (a bad key, a missing
file, a corrupt checkpoint). The CLI prints its message on one line and exits
with status 2 (1 for a RunFailed); anything else is a programming error and
keeps its traceback."""


class SrganError(Exception):
    """A problem with the user's input, explained by the message."""

    exit_code = 2


class RunFailed(SrganError):
    """A run that started and could not go on (out of memory at the smallest
    micro-batch): one line as for bad input, but exit status 1, as any failed
    run, since nothing in the input was wrong."""

    exit_code = 1


def first_line(error: BaseException, limit: int = 200) -> str:
    """An exception as one short line, for a message that quotes it: its
    type and the first line of its text."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return error.__class__.__name__
    text = lines[0] if len(lines[0]) <= limit else lines[0][: limit - 3] + "..."
    return f"{error.__class__.__name__}: {text}"
