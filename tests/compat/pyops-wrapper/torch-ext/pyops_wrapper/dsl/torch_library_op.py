"""A `cute_op`-like decorator: a custom op that only writes into its arguments (a no-op fake)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Union

import torch


def mutating_op(
    name: str,
    *,
    mutates_args: Union[str, Iterable[str]],
    device_types: Optional[Union[str, Iterable[str]]] = None,
) -> Callable:
    def dec(fn: Callable) -> Any:
        kwargs: dict[str, Any] = {"mutates_args": mutates_args}
        if device_types is not None:
            kwargs["device_types"] = device_types
        op = torch.library.custom_op(name, fn, **kwargs)

        @op.register_fake
        def _fake(*args, **kw):
            return None

        return op

    return dec
