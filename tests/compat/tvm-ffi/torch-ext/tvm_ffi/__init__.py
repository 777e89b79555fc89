"""tvm-ffi projects are refused."""
