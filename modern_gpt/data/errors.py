"""The data's one error type, apart so that every module of data/ raises it."""

from ..core.errors import UserError


class DataError(UserError):
    """The corpus cannot be read or is unusable."""
