"""The CI workflows the builder writes (`kbuild init`, `kbuild ci-workflow [--monorepo]`) and the
small steps they run through `kbuild` (`ci-plan` reads matrix/ci.py; `ci-digest` is
`artifacts.py`). Templates: resources/workflows/."""
