"""The one exception type for mistakes a user can fix (bad file, bad config, missing model...).

The CLI prints its message on one line and exits with status 2; the app shows it in place.
Anything else is a bug and keeps its traceback.
"""


class OpsdError(Exception):
    """A user-fixable problem; the message names the problem and the fix."""
