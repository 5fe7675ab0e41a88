"""`epcap classify` prints what the taxonomy found through the redaction pass: a token, a
secret option or NAME=value in a deciding or survived log line never reaches the terminal."""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .conftest import run_cli
from .test_mech_publish_secrets import SECRET_FORMS

# lines the library-independent signatures decide on (the secret rides on the deciding line)
LINES = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {s}",
         "[rank0]: torch.OutOfMemoryError: CUDA out of memory. {s} more"]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=SECRET_FORMS, line=st.sampled_from(LINES), as_json=st.booleans())
@example(secret="--api-key=abcdefgh1234", line=LINES[1], as_json=False)
def test_classify_prints_no_secret(tmp_path, secret, line, as_json):
    cell = tmp_path / "M__b__measure__cap2p00__a1"
    cell.mkdir(exist_ok=True)
    (cell / "cell.json").write_text(json.dumps(
        {"launcher": {"state": "failed", "exit_code": 1}, "cell": {"backend": "b"}}))
    (cell / "rank0.log").write_text(line.format(s=secret) + "\n")
    res = run_cli("classify", cell, *(["--json"] if as_json else []))
    assert res.code == 0, res.text
    assert "does_not_fit" in res.text and "rank0.log" in res.text, res.text   # not vacuous
    value = re.split(r"[ =]", secret, maxsplit=1)[-1].strip("'")
    assert value not in res.text, res.text
