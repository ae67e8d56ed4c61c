"""Step 2 of the overlay build: PyTorch's own generators, restricted to the stack's new ops.

Run as a script with the venv's Python and the fork as working directory, so that the
fork's `torchgen` and `tools` are the ones imported:

    python codegen_main.py --ops attn --aten-out A --aoti-out C --autograd-out B \
        --empty-deprecated E

Why this way and not `--op-selection-yaml-path`: selective build only trims the
`m.def`/`m.impl` lines; it still emits wrappers, Operators, TraceType, autograd Functions
and Python bindings for every op, which would duplicate what libtorch already exports.
Instead the generators run unchanged on a parse result that holds only the new ops:

- the full yaml files are parsed first (torchgen caches the result per path), and the
  derivatives are loaded against that full parse (derivatives.yaml names every op);
- the two caches are then replaced by their restriction to the new ops, so every generator
  that calls `parse_native_yaml` / `load_derivatives` sees only those ops;
- deprecated signatures come from an empty file (deprecated.yaml names only old ops).

Each `*Everything.cpp` then holds only the new ops' code. `torchgen.gen.main` is called
with its usual command line, so the aten side is generated exactly as a full build does.
"""

import argparse
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", required=True, help="comma-separated operator names")
    parser.add_argument("--aten-out", required=True)
    parser.add_argument("--aoti-out", required=True)
    parser.add_argument("--autograd-out", required=True)
    parser.add_argument("--empty-deprecated", required=True)
    args = parser.parse_args()
    ops = set(args.ops.split(","))

    sys.path.insert(0, os.getcwd())  # the fork's torchgen and tools
    from tools.autograd import gen_python_functions, load_derivatives
    from tools.autograd.gen_autograd import gen_autograd
    from tools.autograd.gen_autograd_functions import gen_autograd_functions_python
    from torchgen import gen as tg
    from torchgen.model import DispatchKey
    from torchgen.selective_build.selector import SelectiveBuilder

    def keep(f) -> bool:
        return str(f.func.name) in ops

    tags = "aten/src/ATen/native/tags.yaml"
    # torchgen.gen.main parses this exact path string, ignoring MPS and XPU (its defaults).
    aten_yaml = "aten/src/ATen/native/native_functions.yaml"
    parsed = tg.parse_native_yaml(aten_yaml, tags, {DispatchKey.MPS, DispatchKey.XPU})
    new_functions = [f for f in parsed.native_functions if keep(f)]
    tg._GLOBAL_PARSE_NATIVE_YAML_CACHE[aten_yaml] = parsed._replace(native_functions=new_functions)
    missing = ops - {str(f.func.name) for f in new_functions}
    if missing:
        sys.exit(f"overlay codegen: {sorted(missing)} not found in {aten_yaml}")

    # tools/setup_helpers/generate_code.py parses without ignore_keys: use another path
    # string for the same file so that the two parses stay apart, as in a full build.
    autograd_yaml = os.path.abspath(aten_yaml)
    autograd_dir = os.path.abspath("tools/autograd")
    derivatives = os.path.join(autograd_dir, "derivatives.yaml")
    infos, used_keys = load_derivatives.load_derivatives(derivatives, autograd_yaml, tags)
    new_infos = {schema: info for schema, info in infos.items() if str(schema.name) in ops}
    load_derivatives._GLOBAL_LOAD_DERIVATIVE_CACHE[(derivatives, autograd_yaml)] = (
        new_infos,
        used_keys,
    )
    full = tg.parse_native_yaml(autograd_yaml, tags)
    tg._GLOBAL_PARSE_NATIVE_YAML_CACHE[autograd_yaml] = full._replace(
        native_functions=[f for f in full.native_functions if keep(f)]
    )

    sys.argv = [
        "torchgen.gen", "--source-path", "aten/src/ATen", "--install_dir", args.aten_out,
        "--per-operator-headers", "--aoti-install-dir", args.aoti_out, "--update-aoti-c-shim",
    ]  # fmt: skip
    tg.main()

    # What generate_code() does (gen_autograd_python, gen_autograd), with deprecated.yaml
    # replaced by an empty list. gen_annotated is not needed: the full run made it.
    out = args.autograd_out
    os.makedirs(out, exist_ok=True)
    templates = os.path.join(autograd_dir, "templates")
    gen_autograd_functions_python(out, new_infos, templates)
    gen_python_functions.gen(out, autograd_yaml, tags, args.empty_deprecated, templates)
    gen_autograd(autograd_yaml, tags, out, autograd_dir, SelectiveBuilder.get_nop_selector())


if __name__ == "__main__":
    main()
