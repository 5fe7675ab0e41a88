"""The bounded readers, YAML limits, redaction and the campaign lock, each on its hostile case."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.errors import BadInput
from harness.io.lock import CampaignLock
from harness.io.redact import REDACTED, find_secrets, redact_argv, redact_obj, redact_text
from harness.io.safeio import read_text
from harness.io.safeyaml import compose

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWx12"


def test_read_text_refuses_special_files_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    for path, word in [(fifo, "FIFO"), ("/dev/zero", "character device"), (tmp_path, "directory")]:
        with pytest.raises(BadInput, match=word):
            read_text(path, max_bytes=1024)
    assert time.monotonic() - start < 30         # a hang guard, not a speed target


def test_read_text_caps_size_and_never_quotes_content(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("secret-line\n" * 200)
    with pytest.raises(BadInput, match="too large") as err:
        read_text(big, max_bytes=100)
    assert "secret-line" not in str(err.value)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"shadowline:x:0:0\n\xff\xfe")
    with pytest.raises(BadInput, match="offset 17") as err:
        read_text(bad, max_bytes=100)
    assert "shadowline" not in str(err.value)
    assert read_text(tmp_path / "big.yaml", max_bytes=10_000).startswith("secret-line")


def test_missing_and_unreadable_files_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="file not found"):
        read_text(tmp_path / "nope", max_bytes=10)


def _laughs(levels: int) -> str:
    doc = 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        doc += f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n"
    return doc


@pytest.mark.parametrize("doc, message", [
    (_laughs(9), "more than"),
    ("&a [*a]", "recursive"),
    ("[" * 1100 + "]" * 1100, "deeper"),
    ("k:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 80)), "deeper"),
])
def test_compose_refuses_expansion_recursion_and_depth_quickly(doc, message):
    start = time.monotonic()
    with pytest.raises(BadInput, match=message):
        compose(doc, "r.yaml")
    assert time.monotonic() - start < 30         # a hang guard, not a speed target


def test_compose_accepts_small_aliases():
    node = compose("a: &x [1, 2]\nb: *x\n", "r.yaml")
    assert node is not None


def test_redaction_covers_values_options_assignments_and_token_shapes():
    env_secret = "s3cr3t-value-123"
    argv = ["run", "--hf-token", TOKEN, "--api-key=abc", "--moe-min-tokens-per-replica", "1024",
            f"--data=/x/{env_secret}"]
    out = redact_argv(argv, [env_secret])
    assert out == ["run", "--hf-token", REDACTED, f"--api-key={REDACTED}",
                   "--moe-min-tokens-per-replica", "1024", f"--data=/x/{REDACTED}"]
    line = f"AssertionError: flag --token {TOKEN} bad; HF_TOKEN={env_secret}; got {TOKEN}"
    clean = redact_text(line, [])
    assert TOKEN not in clean and env_secret not in clean and "AssertionError" in clean
    nested = redact_obj({"failure": {"line": line, "argv": [TOKEN]}}, [])
    assert TOKEN not in repr(nested)


def test_find_secrets_sees_a_token_without_its_variable():
    assert find_secrets(f"provenance: {TOKEN}\n".encode(), []) == ["token-pattern"]
    assert find_secrets(b"s3cr3t-value-123", ["s3cr3t-value-123"]) == ["env-value"]
    assert find_secrets(b"tokens=1024 key: value", []) == []


def test_lock_refuses_a_second_holder_and_frees_on_death(tmp_path):
    code = ("import sys,time; from harness.io.lock import CampaignLock; "
            "l=CampaignLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(BadInput, match=f"pid {proc.pid} on host"):
            CampaignLock(tmp_path).acquire()
    finally:
        proc.kill()
        proc.wait()
    with CampaignLock(tmp_path) as lock:         # the OS released it with the process
        assert lock.fd is not None
