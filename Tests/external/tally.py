"""The pass/fail tally shared by the outside-tool checks: one line per check, and the closing
'N passed, M failed' line CI reads."""
import sys

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok    " + name)
    else:
        failed += 1
        print("FAIL  " + name + (": " + detail if detail else ""))


def finish():
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(0 if failed == 0 else 1)
