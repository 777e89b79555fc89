// A tvm-ffi binding (never compiled here).
