"""PR 5's AVX512 float tanh checked on any x86 CPU: stacktool/tanh_model.c models the body
lane by lane (each vector instruction one IEEE operation per lane), compiled with the table
and constants read from the tree's vec512_float.h, and run over every float input.

The gate runs it at level 5 where the CPU has no AVX-512 (where it has, the exhaustive
check runs the kernel itself). With PR 5's earlier body the model gave the count measured
on an AVX-512 Xeon, 27,154,144 inputs not correctly rounded, exactly.
`python -m stacktool.tanh_model FORK` prints its JSON.
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from stacktool import tanh_table
from stacktool.config import Layout
from stacktool.suites import Processes, Result, Task

KERNEL = "aten/src/ATen/cpu/vec/vec512/vec512_float.h"  # Vectorized<float>::tanh
SOURCE = Path(__file__).with_name("tanh_model.c")
NAME = "tanh float32 AVX512 body, all 2^32 inputs, modelled lane by lane"
SATURATION = re.compile(r"kTanhSaturation = (0x[0-9a-f.]+p[-+]\d+)f")
PART_BITS = re.compile(r"kTanhPartBits = (\d+);")


def header(kernel_source: str) -> str:
    """The model's table.h: the kernel's table and constants."""
    rows = tanh_table.in_source(kernel_source)
    saturation, bits = SATURATION.search(kernel_source), PART_BITS.search(kernel_source)
    if saturation is None or bits is None or len(rows) != 8:
        raise ValueError(f"{KERNEL}: no AVX512 tanh table and constants of the modelled form")
    part_bits = int(bits.group(1))
    table = ",\n".join("{" + ", ".join(v.hex() + "f" for v in row) + "}" for row in rows)
    return (
        f"static const float kTanhIntervals[8][32] = {{\n{table}}};\n"
        f"#define SATURATION {saturation.group(1)}f\n"
        f"#define SHIFT {23 - part_bits}\n"
        f"#define FIRST_INDEX {((127 + tanh_table.FIRST_BINADE) << part_bits) - 1}\n"
    )


def build(fork: Path, out: Path) -> Path:
    """Compile the model for the fork's kernel into `out`; the executable."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.h").write_text(header((fork / KERNEL).read_text()))
    binary = out / "tanh_model"
    compiler = shutil.which("gcc") or shutil.which("cc")
    flags = ["-O2", "-fopenmp", "-mfma", "-ffp-contract=off", f"-DTABLE_H=\"{out / 'table.h'}\""]
    subprocess.run([compiler, *flags, str(SOURCE), "-o", str(binary), "-lm"], check=True)
    return binary


def verdict(found: dict) -> bool:
    return (
        found["max_ulp"] <= 1
        and found["nan_or_sign_broken"] == 0
        and found["not_one_from_saturation"] == 0
    )


def task(layout: Layout) -> Task:
    """The gate's check (one thread, beside the level's other checks)."""

    def check(processes: Processes) -> tuple[Result, str]:
        started = time.monotonic()
        try:
            binary = build(layout.fork, layout.build / "tanh-model")
        except (ValueError, subprocess.CalledProcessError) as error:
            return Result(NAME, failed=1, note="the model was not built"), str(error)
        proc = processes.run([str(binary)], env={"OMP_NUM_THREADS": "1"})
        if proc.returncode != 0:
            return Result(NAME, failed=1, note="the model failed"), proc.stdout + proc.stderr
        found = json.loads(proc.stdout)
        ok = verdict(found)
        note = (
            f"max {found['max_ulp']} ULP, {found['not_rounded']:,} not correctly rounded, "
            f"{found['not_one_from_saturation']} not 1 from 9.0109129, "
            f"{found['nan_or_sign_broken']} NaN or sign broken; {time.monotonic() - started:.0f} s"
        )
        return Result(NAME, int(ok), int(not ok), note=note), ""

    return Task(NAME, check, seconds=40)  # 40 s in the gate (Zen 3)


if __name__ == "__main__":
    fork = Path(sys.argv[1])
    print(subprocess.run([str(build(fork, Path("build/tanh-model")))], check=True,
                         capture_output=True, text=True).stdout, end="")  # fmt: skip
