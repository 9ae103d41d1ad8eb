"""The modules plumbum imports but gpudoc never uses stay unloaded, and load for real the moment
anything touches them, whichever way it imports them."""

from __future__ import annotations

import subprocess
import sys

from gpudoc.cli.lazy import DEFERRED
from tests.conftest import REPO

CODE = """
import sys
import gpudoc.cli.base  # imports plumbum, after the deferral
loaded = sorted(m for m in ("_socket", "_pickle", "http.client", "email.parser", "ssl") if m in sys.modules)
print("unloaded" if not loaded else loaded)
import socket, pickle
from socket import gethostname
from pickle import dumps
from urllib.request import Request
import urllib.request
assert gethostname() == socket.gethostname() and socket.socket.__name__ == "socket"
assert pickle.loads(dumps({"a": [1, 2]})) == {"a": [1, 2]}
assert Request("http://example.invalid/").host == "example.invalid"
assert urllib.request.Request is Request and sys.modules["urllib.request"].Request is Request
real = [name for name in ("socket", "pickle", "urllib.request") if hasattr(sys.modules[name], "__file__")]
print(real)
"""


def test_deferred_modules_load_on_first_use():
    assert {"urllib.request", "socket", "pickle"} <= set(DEFERRED)
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["unloaded", "['socket', 'pickle', 'urllib.request']"]
