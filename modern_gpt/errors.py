"""The one exception type for mistakes a user can fix: the CLI prints its message and exits with code 2."""


class UserError(Exception):
    """A mistake in the user's input. The message is one sentence that names what is wrong and how to fix it."""
