"""``python -m llamarl_core.rewards.custom_check VALUE``: exit 0 when a custom ``data.reward``
imports and names a callable, else print why on the last line of stderr and exit 1.

Run by ``custom.check_importable`` in a short-lived subprocess before launch, so the user's
module is never imported into the controller.
"""
import sys

from llamarl_core.rewards.custom import OK_MARK, load_function

if __name__ == "__main__":
    try:
        load_function(sys.argv[1])
    except BaseException as exc:  # noqa: BLE001 - whatever the import raised is the reason
        print(f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}",
              file=sys.stderr)
        sys.exit(1)
    print(OK_MARK, flush=True)  # an import that calls os._exit(0) is not a success
