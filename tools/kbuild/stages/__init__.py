"""The stages of one variant's build, in the order data flows through them.

The manifest comes first (`core/manifest/`, shared by every stage), then:

1. `torch_install` — the build environment: the target interpreter's torch (`TorchInstall`);
2. `toolchain` — the compilers of that environment: the C++ compiler, the CUDA toolkit (`Toolkit`);
3. `frameworks` — what a variant builds against (torch, torch's stable ABI) and its name;
4. `plan` — manifest + environment → `VariantPlan` (variant, id, kernels, capabilities);
5. `generate/` — the plan → the CMake project from templates (`schedule`: slowest sources
   first; `cutlass/`: the CUTLASS headers kernels include);
6. `compile/` — CMake + Ninja → the `.so` (`pch`, `configure_seed`: optional caches; `inputs`:
   content hashes; `dist`: distributed compiles; `compile_commands`: for editors);
7. `assemble` — the built products → a complete variant folder (`BuiltVariant`) in build/;
8. `check/` — a variant folder judged: metadata, digest, ELF/ABI (`binary`), the real load
   (`loadcheck`: a new extension, `probe_memo`: a load remembered), Python op names (`pyops/`);
9. `devtest/` — the project's tests run against a build (`testdeps`: what they need).

`pipeline` runs stages 1–8 for each variant of a build, one after another. A stage imports only
`core/` and the stages before it (`ORDER`; tools/tests/unit/test_import_graph.py holds it to that).
Publishing the checked variants is `publish/`; the environments a build runs in, `matrix/`.
"""

ORDER = ("torch_install", "toolchain", "frameworks", "plan", "generate", "compile", "assemble",
         "check", "devtest", "pipeline")
