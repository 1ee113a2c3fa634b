"""The project's error type for user mistakes.

The CLI prints an `AttnlabError` as one line and exits with code 2; anything else is a bug and keeps its
traceback.
"""


class AttnlabError(ValueError):
    """A user mistake (bad input file, bad config key, missing checkpoint): shown as one line, exit code 2."""
