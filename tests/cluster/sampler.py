"""Sampling the cluster in the background while something else (an operator, a playbook) acts on it."""

import threading
import time


class Sampler(threading.Thread):
    """Calls read() every `interval` seconds until the with-block ends; keeps (seconds since start, value).

    A failed read is kept too (as the exception), so that a test sees it instead of a silent gap.
    """

    def __init__(self, read, interval=1.0):
        super().__init__(daemon=True)
        self.read = read
        self.interval = interval
        self.samples = []
        self.errors = []
        self._halt = threading.Event()

    def run(self):
        started = time.monotonic()
        while not self._halt.is_set():
            try:
                self.samples.append((time.monotonic() - started, self.read()))
            except Exception as error:  # a test must see it, whatever it is
                self.errors.append(error)
            self._halt.wait(self.interval)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self._halt.set()
        self.join()

    @property
    def values(self):
        return [value for _seconds, value in self.samples]


def at_one_revision(first, *more):
    """The items of several list calls as the cluster was at one moment: first() lists, and each of `more` lists at
    exactly that list's resourceVersion (etcd's revision counts every write of every resource, so a read at it is a
    snapshot). Read one after the other, a node could show its state before a step and the pods after it: a sample
    that no moment of the cluster ever showed."""
    head = first()
    revision = head.metadata.resource_version
    return [head.items] + [read(resource_version=revision, resource_version_match="Exact").items for read in more]
