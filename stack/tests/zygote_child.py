"""A module the zygote's tests fork: it says what it was given, then exits or waits."""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    print(json.dumps({"argv": argv, "sys.argv": sys.argv, "value": os.environ.get("ZYGOTE_TEST_VALUE")}))
    if argv[0] == "exit":
        return int(argv[1])
    if argv[0] == "raise":
        raise SystemExit(int(argv[1]))
    time.sleep(600)
    return 0
