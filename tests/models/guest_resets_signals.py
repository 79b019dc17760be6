"""A builder module that puts SIGTERM, SIGINT and SIGUSR1 back to their defaults when imported, as some libraries do
(tests/test_user_code_guest.py)."""
import signal

from guest_nets import plain

for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
    signal.signal(_sig, signal.SIG_DFL)


def build(genes, sample_shape, outputs):
    return plain(genes, sample_shape, outputs)
