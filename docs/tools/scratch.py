"""What the tests of the docs tools share: a scratch tree to write files into and read them back."""

import os


class ScratchFiles:
    """A mixin for a unittest.TestCase whose setUp sets self.root (a temporary folder): write() and read() take
    paths relative to it, and write() makes the folders a path needs."""

    root = ""

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)

    def read(self, path):
        with open(os.path.join(self.root, path), encoding="utf-8") as f:
            return f.read()
