"""The one error type a user of the job sees."""


class JobError(Exception):
    """A problem the user can act on; the message is one sentence: what is wrong and what to do."""
