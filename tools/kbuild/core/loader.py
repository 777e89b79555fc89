"""What kbuild takes from the `kernels` loader, from one place, so that a new loader moves one file.

- `loader_data()`: the loader's data classes (`Metadata`, `Digest`, `DigestValidationError`), the
  ones it parses metadata.json and re-hashes a variant with: `kernels_data` in upstream's next
  loader, `kernels._rust` in the pinned one (0.17). An ImportError means neither is installed;
  another error is the loader failing to import (e.g. a malformed HF_ENDPOINT) and is raised.
- `workflow_policy()`: the loader's `GitHubWorkflowPolicy`, the one signer identity policy
  (a GitHub repository and its signing workflows) that `kbuild verify` and `kbuild sign` use.

Imported lazily by every caller: the loader is not needed to build.
"""

from __future__ import annotations

from types import ModuleType


def loader_data() -> ModuleType:
    try:
        import kernels_data
    except ImportError:
        from kernels import _rust
        return _rust
    return kernels_data


def workflow_policy(repository: str, workflows: list[str] | tuple[str, ...]):
    """Accepts a signature made by one of `workflows` (full URIs, `…/FILE@REF`) of the GitHub
    `repository` (OWNER/NAME), as the loader verifies it."""
    from kernels.verify import GitHubWorkflowPolicy
    return GitHubWorkflowPolicy(repo_id=repository, signer_uris=list(workflows))
