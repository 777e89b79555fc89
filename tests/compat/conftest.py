"""The corpus projects' own tests need their build: tools/tests/test_compat.py (and run_gpu.sh)
build each project in a copy and run them there, never from this folder."""

collect_ignore_glob = ["*/tests/*"]
