"""The one exception type for mistakes a user can fix (bad file, bad config, missing model...).

The CLI prints its message on one line and exits with status 2; the app shows it in place.
Anything else is a bug and keeps its traceback.
"""


class OpsdError(Exception):
    """A user-fixable problem; the message names the problem and the fix."""


class NonFiniteLogits(OpsdError):
    """A model produced NaN or inf logits while sampling: at completion ``position`` of batch ``row``.

    Raised where the model's name is not known; the caller re-raises it as one OpsdError naming the model.
    """

    def __init__(self, row: int, position: int):
        super().__init__(f"non-finite logits (NaN or inf) at completion position {position} of sampled row {row}")
        self.row, self.position = row, position
