"""Synthetic benchmark results, as the workers write them, for the bench tests (no torch)."""

from stacktool.bench.common import FWD_BWD
from stacktool.bench.memory import MEMORY_SIZE
from stacktool.bench.tanh import VECTORIZED


def timing(rows, has_native=True):
    return {
        "torch": "2.6.0",
        "cpu": "test CPU",
        "threads": [1, 2],
        "has_native": has_native,
        "load": [0.04, 1.96],
        "rows": rows,
    }


def row(size, native, composite, compile, floor=None, function=1.0, gemms=None, threads=2):
    ms = {"composite": composite, "function": function, "compile": compile, "floor": floor,
          "gemms": gemms}  # fmt: skip
    if native is not None:
        ms["native"] = native
    return {"size": list(size), "threads": threads, "pass": FWD_BWD, "ms": ms}


def memory(native, composite=67.0, unfused=60.0):
    mb = {"composite": composite, "function": 116.0, "compile": 40.0, "unfused": unfused}
    if native is not None:
        mb["native"] = native
    return {"size": list(MEMORY_SIZE), "mb": mb}


def results(rows, mb, has_native=True, **more):
    return {"timing": timing(rows, has_native), "memory": mb, **more}


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
