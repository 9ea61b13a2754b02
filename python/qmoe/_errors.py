"""qmoe's Python exceptions. Every failure inside qmoe arrives as one of these, carrying qmoe's own
one-line message (which names the file / tensor / layer and what was expected). Each also derives
from the matching built-in, so ``except ValueError`` keeps working for callers that do not know qmoe.
"""


class Error(Exception):
    """Base class of every error qmoe raises."""


class BadInputError(Error, ValueError):
    """Malformed file, wrong shape / dtype / device, or a bad argument."""


class UnsupportedError(Error, NotImplementedError):
    """A valid request that qmoe, or the chosen backend, does not run."""


class VerifyFailedError(Error, AssertionError):
    """A numeric verification failed."""


class InternalError(Error, RuntimeError):
    """A bug in qmoe, out of memory, or a CUDA runtime failure."""


_BY_STATUS = {1: BadInputError, 2: UnsupportedError, 3: VerifyFailedError, 4: InternalError}


def from_status(status, message):
    """The exception for a qmoe_status_t code (called by the extension module)."""
    return _BY_STATUS.get(int(status), InternalError)(message)
