"""The one exception type the CLI turns into a clean message and a non-zero exit."""


class SparkserveError(Exception):
    """A failure the user can act on; its message says what went wrong and what to do."""
