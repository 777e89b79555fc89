"""Run by a target interpreter (matrix/testtools.py): what its environment holds, to
decide which of the tests' requirements it lacks. Answers with one line
`KBUILD-INSTALLED <json object>`: {"python": "3.11", "markers": {PEP 508 marker values},
"dists": {name: version}} (the first of a name on sys.path, the one an import finds)."""

import json
import os
import platform
import sys
from importlib import metadata

MARKER = "KBUILD-INSTALLED "


def markers():
    """PEP 508's environment markers of this interpreter (as packaging computes them)."""
    info = sys.implementation.version
    version = "{0.major}.{0.minor}.{0.micro}".format(info)
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return {"implementation_name": sys.implementation.name, "implementation_version": version,
            "os_name": os.name, "platform_machine": platform.machine(),
            "platform_release": platform.release(), "platform_system": platform.system(),
            "platform_version": platform.version(),
            "python_full_version": platform.python_version(),
            "platform_python_implementation": platform.python_implementation(),
            "python_version": ".".join(platform.python_version_tuple()[:2]),
            "sys_platform": sys.platform}


dists = {}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if name and name not in dists:
        dists[name] = dist.version
print(MARKER + json.dumps({"python": "%d.%d" % sys.version_info[:2], "markers": markers(),
                           "dists": dists}), flush=True)
