class StackError(Exception):
    """A failure the user can act on; the message says what failed and where."""
