"""The data's one error type. It has a module of its own so that every module of data/ can raise it."""

from ..core.errors import UserError


class DataError(UserError):
    """The corpus cannot be read or is unusable."""
