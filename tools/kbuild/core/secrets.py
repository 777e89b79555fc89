"""What a program that runs a kernel's own code is not given: the environment's secrets.

A variant's package runs when it is loaded (`import`), so the load check runs it in an
environment without the Hub token, the CI's OIDC request credentials (which mint the signing
identity) and anything else named like a secret, and with huggingface_hub pointed away from the
token file `hf auth login` writes.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

# Names of variables that hold credentials: HF_TOKEN, ACTIONS_ID_TOKEN_REQUEST_TOKEN/_URL,
# ACTIONS_RUNTIME_TOKEN, GITHUB_TOKEN, SIGSTORE_ID_TOKEN, AWS_SECRET_ACCESS_KEY, *_PASSWORD, ...
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|AUTH"
                         r"|^ACTIONS_ID_TOKEN_REQUEST_|^ACTIONS_RUNTIME_|^SSH_AUTH_SOCK$"
                         r"|^AWS_|^AZURE_|^GOOGLE_APPLICATION_CREDENTIALS$", re.IGNORECASE)
# huggingface_hub reads the token from this file when HF_TOKEN is unset.
NO_TOKEN_FILE = {"HF_TOKEN_PATH": os.devnull, "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}


def without_secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without any variable named like a secret, and with
    huggingface_hub's token file out of reach."""
    env = os.environ if env is None else env
    kept = {k: v for k, v in env.items() if not SECRET_NAME.search(k)}
    return {**kept, **NO_TOKEN_FILE}
