"""On/off switches read from the environment (KBUILD_PROBE_MEMO, KBUILD_PCH,
KBUILD_CONFIGURE_SEED): the usual spellings of on and off; anything else is refused, so a typo
never leaves a cache on that its user meant to turn off."""

from __future__ import annotations

import os

from .errors import BuildError

OFF = ("0", "false", "no", "off", "none", "disabled")
ON = ("", "1", "true", "yes", "on", "enabled")


def switch(name: str) -> bool:
    """Whether $`name` is on (unset or empty: on); a BuildError for a value of neither kind."""
    value = os.environ.get(name, "")
    spelled = value.strip().lower()
    if spelled in OFF:
        return False
    if spelled in ON:
        return True
    raise BuildError(f"{name}={value!r} is neither on nor off",
                     hint=f"unset {name}, or set it to one of {', '.join(OFF)} (off) or "
                          f"{', '.join(v for v in ON if v)} (on)")
