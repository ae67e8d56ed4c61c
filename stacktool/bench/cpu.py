"""The CPU the bench ran on (and the gate: gate.machine), from /proc/cpuinfo: vendor, family,
model, model name, stepping and flags. A VM's model name may be only "AMD EPYC", which Zen 3
and Zen 4 both report, and torch's get_cpu_capability does not tell the vendor (one tanh
target applies on Intel only)."""

from pathlib import Path

# /proc/cpuinfo's field: its name in bench.json
FIELDS = {"vendor_id": "vendor", "cpu family": "family", "model": "model",
          "model name": "model name", "stepping": "stepping", "flags": "flags"}  # fmt: skip
# The flags bench.md's Summary names, where the CPU has them (bench.json keeps every flag)
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile")


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The first processor's FIELDS (family, model and stepping as numbers, flags a list);
    None for each one cpuinfo lacks (aarch64's has no vendor_id, family or model)."""
    facts = dict.fromkeys(FIELDS.values())
    try:
        first = cpuinfo.read_text().split("\n\n")[0]
    except OSError:
        return facts
    for line in first.splitlines():
        name, _, value = line.partition(":")
        key, value = FIELDS.get(name.strip()), value.strip()
        if key == "flags":
            facts[key] = value.split()
        elif key:
            facts[key] = int(value) if value.isdigit() else value
    return facts


def describe(facts: dict) -> str:
    """What bench.md names: "AuthenticAMD family 25 model 1 stepping 1 (AMD EPYC)"."""
    if not any(facts.get(key) is not None for key in ("vendor", "family", "model")):
        return facts.get("model name") or "unknown CPU"
    vendor = facts.get("vendor") or "unknown vendor"
    found = f"{vendor} family {facts.get('family')} model {facts.get('model')}"
    found += f" stepping {facts.get('stepping')}"
    return found + (f" ({facts['model name']})" if facts.get("model name") else "")


def simd_flags(facts: dict) -> str:
    """Which of SIMD_FLAGS this CPU has ("avx2 fma"), or "none of ..." ."""
    found = [flag for flag in SIMD_FLAGS if flag in (facts.get("flags") or ())]
    return " ".join(found) or f"none of {' '.join(SIMD_FLAGS)}"
