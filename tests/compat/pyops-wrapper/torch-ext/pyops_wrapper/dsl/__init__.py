from .torch_library_op import mutating_op

__all__ = ["mutating_op"]
