"""Candidate identity and the signature rule that keeps the harness ours."""

from __future__ import annotations

import pytest

from kernelcast.tools.core.candidate import Candidate, SignatureError, check_signature, normalize_source, signature

REF = "__kernel void k(__global const float *x, __global float *y, const float a, const int n) { y[0] = x[0]; }"


def cand(source: str, **kw) -> Candidate:
    return Candidate(task="t", source=source, **{"global_size": ["N"], **kw})


def test_hash_ignores_comments_and_whitespace() -> None:
    noisy = ("/* header */\n__kernel   void k(__global const float *x,\n __global float *y, const float a, "
             "const int n) {  // body\n y[0]   =  x[0]; }")
    assert cand(REF).hash == cand(noisy).hash
    assert cand(REF).hash != cand(REF.replace("x[0]", "x[1]")).hash
    assert cand(REF).hash != cand(REF, local_size=["64"]).hash
    assert cand(REF).hash != cand(REF, build_options=["-cl-mad-enable"]).hash


def test_normalize_keeps_preprocessor_lines() -> None:
    src = "#define A 1\n#define B 2\nint f() { return A + B; }"
    assert normalize_source(src).splitlines() == ["#define A 1", "#define B 2", "int f(){return A+B;}"]


def test_signature_accepts_vector_pointers_and_renamed_args() -> None:
    vec = REF.replace("const float *x", "const float4 *xs").replace("float *y", "float4 *ys")
    check_signature(vec, REF, "k")
    assert signature(REF, "k")[2] == ("private", "float", "value")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (REF.replace(", const int n", ""), "takes 3 arguments"),
        (REF.replace("const int n", "const long n"), "argument 3"),
        (REF.replace("__global float *y", "__local float *y"), "argument 1"),
        (REF.replace("void k(", "void other("), "not found"),
        (REF.replace("const float a", "__global float *a"), "argument 2"),
    ],
)
def test_signature_mismatch_is_named(source: str, message: str) -> None:
    with pytest.raises(SignatureError, match=message):
        check_signature(source, REF, "k")


def test_hash_is_of_the_preprocessed_source_and_the_task() -> None:
    dead = "#if 0\nint unused(int x) { return x; }\n#endif\n" + REF
    assert cand(dead).hash == cand(REF).hash, "code in an inactive branch is not part of the candidate"
    macro = "#define ZERO 0\n" + REF.replace("x[0]", "x[ZERO]")
    assert cand(macro).hash == cand(REF).hash, "a macro that expands to the same code is the same candidate"
    assert cand(REF).hash != Candidate(task="other", source=REF, global_size=["N"]).hash
    assert cand(REF, global_size=["N / (2 * 1)"]).hash == cand(REF, global_size=["N/2"]).hash
    assert cand(REF, global_size=["N / 1"]).hash == cand(REF).hash
    assert cand("#define U 2\n#pragma unroll U\n" + REF).hash != cand("#define U 4\n#pragma unroll U\n" + REF).hash


def test_signature_is_read_after_preprocessing() -> None:
    typed = "typedef float real;\n#define IDX int\n" + REF.replace("float *x", "real *x").replace("int n", "IDX n")
    check_signature(typed, REF, "k")
    decoy = f"#if 0\n{REF}\n#endif\n__kernel void k(__global float *y) {{ }}"
    with pytest.raises(SignatureError, match="takes 1 arguments"):
        check_signature(decoy, REF, "k")
    with pytest.raises(SignatureError, match="self-contained"):
        check_signature('#include "/etc/hostname"\n' + REF, REF, "k")
