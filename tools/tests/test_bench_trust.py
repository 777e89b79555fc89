"""`kbuild bench --variant-dir` takes what `kbuild build` makes: a built variant, or the folder
of variants, passes the check bench runs first (issue 21, item 7; the refusals are in
unit/test_cli_bench_trust.py)."""

from __future__ import annotations

from kbuild_testing import built_img2gray

from kbuild.bench import check_variants


def test_built_variants_pass_the_check_bench_makes(tmp_path_factory):
    project = built_img2gray(lambda: tmp_path_factory.mktemp("build-base"))
    variants = sorted(p for p in (project / "build").iterdir() if p.is_dir())
    assert variants and all(check_variants(v) == [v] for v in variants)
    assert check_variants(project / "build") == variants
