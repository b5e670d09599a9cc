"""Issue 12, the input half, where the harness on the real OpenCL device is the one refusing: an include of a system
file is refused before compiling, and an #if 0 decoy does not pass the signature check (the refusals at the door:
tests/unit/test_confinement.py)."""

from __future__ import annotations

import pytest

from kernelcast.tools.core.candidate import SignatureError, check_signature
from kernelcast.tools.core.confinement import ConfinementError, check_candidate
from kernelcast.tools.core.measurement import MeasureConfig, Status
from kernelcast.tools.core.task import Task, resolve_task
from kernelcast.tools.hardware.worker import MeasurementWorker

from support.saxpy_sources import SAXPY_BODY, SAXPY_SIG, saxpy_candidate

SMALL = MeasureConfig(sizes="small", max_reps=5, target_seconds=0.01, timeout_s=60)


@pytest.fixture(scope="module")
def saxpy() -> Task:
    return resolve_task("saxpy")


# ---- 5. confinement --------------------------------------------------------------------------------------
def test_include_of_a_system_file_is_refused_before_compiling(saxpy: Task, worker: MeasurementWorker) -> None:
    for source in (f'#include "/etc/passwd"\n{SAXPY_SIG} {SAXPY_BODY}',
                   f'# /* hidden */ include </etc/passwd>\n{SAXPY_SIG} {SAXPY_BODY}',
                   f'#inc\\\nlude "/etc/passwd"\n{SAXPY_SIG} {SAXPY_BODY}',
                   f'%:include "/etc/passwd"\n{SAXPY_SIG} {SAXPY_BODY}',
                   f'#import "/etc/passwd"\n{SAXPY_SIG} {SAXPY_BODY}',
                   f'#if __has_include("/etc/shadow")\n#endif\n{SAXPY_SIG} {SAXPY_BODY}'):
        cand = saxpy_candidate(saxpy, source)
        with pytest.raises(ConfinementError, match="self-contained|probe for files"):
            check_candidate(saxpy, cand)
        m = worker.measure(saxpy, cand, SMALL)
        assert m.status is Status.invalid, (source, m.status, m.reason)
        assert "root:" not in m.reason and "/bin/" not in m.reason
        assert m.compile_ms is None, "refused before compiling"


# ---- 9. files with several kernels: the signature check reads preprocessed code ------------------------
def test_if0_decoy_does_not_defeat_the_signature_check(saxpy: Task, worker: MeasurementWorker) -> None:
    decoy = (f"#if 0\n{SAXPY_SIG} {SAXPY_BODY}\n#endif\n"
             "__kernel void saxpy(__global const float *x, __global float *y, const int n) { }\n")
    with pytest.raises(SignatureError, match="takes 3 arguments"):
        check_signature(decoy, saxpy.source, "saxpy")
    m = worker.measure(saxpy, saxpy_candidate(saxpy, decoy), SMALL)
    assert m.status is Status.invalid and "takes 3 arguments" in m.reason
    in_string = (f'__constant char note[] = "{SAXPY_SIG}";\n'
                 "__kernel void saxpy(__global const float *x, __global float *y, const int n) { }\n")
    with pytest.raises(SignatureError):
        check_signature(in_string, saxpy.source, "saxpy")
    inconsistent = f"{SAXPY_SIG};\n__kernel void saxpy(__global float *x, __global float *y, const int n) {{ }}\n"
    with pytest.raises(SignatureError, match="more than once"):
        check_signature(inconsistent, saxpy.source, "saxpy")
