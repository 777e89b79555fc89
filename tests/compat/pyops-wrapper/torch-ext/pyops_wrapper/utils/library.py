"""A `triton_op`-like decorator: a custom op whose (traceable) implementation is also its fake."""

from typing import Callable, Iterable, Optional, Union

from torch.library import CustomOpDef, custom_op


def python_op(
    name: str,
    fn: Optional[Callable] = None,
    /,
    *,
    mutates_args: Union[str, Iterable[str]],
    schema: Optional[str] = None,
) -> Callable:
    def dec(fn: Callable[..., object]) -> CustomOpDef:
        def backend_fn(*args, **kwargs):
            return fn(*args, **kwargs)

        result = custom_op(name, backend_fn, mutates_args=mutates_args, schema=schema)
        result.register_fake(fn)
        return result

    if fn is None:
        return dec
    return dec(fn)
