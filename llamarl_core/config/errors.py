"""The one error type a user sees for bad configuration (CLI exit code 2, no traceback)."""


class ConfigError(ValueError):
    """A recipe or override the user must fix; the message names the key and the numbers."""
