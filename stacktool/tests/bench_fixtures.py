"""Synthetic benchmark results, as the workers write them, for the bench tests (no torch)."""

from stacktool.bench.common import FWD_BWD
from stacktool.bench.memory import MEMORY_SIZE
from stacktool.bench.tanh import VECTORIZED

# cpu.cpu_facts of a Zen 3 VM (its model name alone does not tell Zen 3 from Zen 4)
CPU = {"vendor": "AuthenticAMD", "family": 25, "model": 1, "model name": "AMD EPYC",
       "stepping": 1, "flags": ["fpu", "sse4_2", "fma", "avx2"]}  # fmt: skip
# runner.run's record of PR 4's tree (pr4.py), where it ran
PR4_RAN = {"note": "built at 0123456789ab", "tree": "build/gate/level-4/pytorch",
           "load": [0.5, 0.75]}  # fmt: skip


def timing(rows, has_native=True):
    return {
        "torch": "2.6.0",
        "torch_file": "/p/pytorch/torch/__init__.py",
        "threads": [1, 2],
        "has_native": has_native,
        "load": [0.04, 1.96],
        "rows": rows,
    }


def row(size, native, composite, compile, floor=None, function=1.0, gemms=None, threads=2,
        pr4=None):  # fmt: skip
    ms = {"composite": composite, "function": function, "compile": compile, "floor": floor,
          "gemms": gemms, "pr4": pr4}  # fmt: skip
    if native is not None:
        ms["native"] = native
    return {"size": list(size), "threads": threads, "pass": FWD_BWD, "ms": ms}


def memory(native, composite=67.0, unfused=60.0, pr4=None):
    mb = {"composite": composite, "function": 116.0, "compile": 40.0, "unfused": unfused}
    if native is not None:
        mb["native"] = native
    if pr4 is not None:
        mb["pr4"] = pr4
    return {"size": list(MEMORY_SIZE), "mb": mb}


def results(rows, mb, has_native=True, pr4=PR4_RAN, **more):
    return {"cpu": CPU, "pr4": pr4, "timing": timing(rows, has_native), "memory": mb, **more}


def contended_row(size, condition, native, floor, threads=2):
    return {"size": list(size), "threads": threads, "pass": FWD_BWD, "condition": condition,
            "ms": {"native": native, "floor": floor},
            "rounds_ms": {"native": [native], "floor": [floor]}}  # fmt: skip


def contended(rows, load=(0.52, 1.04, 1.61), throughout=True):
    return {"threads": 2, "load": list(load), "busy_loop_s": 95.0,
            "busy_loop_throughout": throughout, "rows": rows}  # fmt: skip


def tanh_row(capability, case, threads, old, new, sleef=None, vectorized=None, copy=None):
    ms = {"v2.6.0": old, "this stack": new}
    for name, value in (("Sleef u10", sleef), (VECTORIZED, vectorized), ("copy", copy)):
        if value is not None:
            ms[name] = value
    return {"capability": capability, "case": case, "threads": threads, "ms": ms}


def tanh_table(rows, capabilities=("default", "avx2", "avx512"), reads_float_tanh=True,
               cpu_vendor="AuthenticAMD"):  # fmt: skip
    return {"capabilities": list(capabilities), "reads_float_tanh": reads_float_tanh,
            "cpu_vendor": cpu_vendor, "rows": rows}  # fmt: skip


def per_element(ns):
    """ms per call of the in-cache case (16384 floats) that takes `ns` per element."""
    return None if ns is None else ns * 16384 / 1e6


def verdicts(found):
    return [(c.text, c.where, c.verdict) for c in found]
