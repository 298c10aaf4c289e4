"""The one exception type for mistakes a user can make (a bad key, a missing
file, a corrupt checkpoint). The CLI prints its message on one line and exits
with status 2; anything else is a programming error and keeps its traceback."""


class SrganError(Exception):
    """A problem with the user's input, explained by the message."""
