"""The workbench for the torch.attn patch stack: materialize, build, export, test.

Imported before anything else (by ./stack and `python -m stacktool`), so the version check
here must parse and run on any Python 3: the rest of the package needs 3.11.
"""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 (ruff assumes 3.11; this runs on any)
    sys.stderr.write(
        "stack: python3.11 is required (torch==2.6.0's wheel is cp311; this is Python %d.%d)\n"
        % sys.version_info[:2]
    )
    raise SystemExit(2)
