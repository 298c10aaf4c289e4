"""The one exception type for mistakes a user can make (a bad key, a missing
file, a corrupt checkpoint). The CLI prints its message on one line and exits
with status 2; anything else is a programming error and keeps its traceback."""


class SrganError(Exception):
    """A problem with the user's input, explained by the message."""


def first_line(error: BaseException, limit: int = 200) -> str:
    """An exception as one short line, for a message that quotes it: its
    type and the first line of its text."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return error.__class__.__name__
    text = lines[0] if len(lines[0]) <= limit else lines[0][: limit - 3] + "..."
    return f"{error.__class__.__name__}: {text}"
