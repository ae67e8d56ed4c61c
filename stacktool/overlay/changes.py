"""What changed: the stack's files, new ops and macro-list entries, refused if not overlayable.

What the stack changes, in the working tree against `BASE` (the pristine upstream commit):
its changed files (`changed_files`), the lines it adds to upstream files (`added_lines`),
the operators it adds to native_functions.yaml (`new_ops`), and the entries it adds to
macro lists of the upstream headers it changes (`list_additions`).

An overlay cannot change what the wheel has compiled, so these refuse, with a StackError
that names what and where: a change to PyTorch's code generators
(`refuse_generator_changes`), an existing op changed or removed (`new_ops`) or its
derivative changed, a new op the overlay's Python glue cannot install
(`check_new_ops_overlayable`), upstream code lines changed or removed (`added_lines`; a
CPU kernel's DispatchStub registration replaced by the added lines is the exception), and
any change to an existing macro but entries added to a list (`added_list_entries`).
"""

import re
from collections import Counter
from pathlib import Path

from stacktool.errors import StackError
from stacktool.git import git

BASE = "attn/0"
NATIVE_YAML = "aten/src/ATen/native/native_functions.yaml"
TAGS_YAML = "aten/src/ATen/native/tags.yaml"
DERIVATIVES_YAML = "tools/autograd/derivatives.yaml"

# Inputs of the code generators. The stack may change the yaml files (checked op by op);
# a change anywhere else here would change the generated code of every op, which an
# overlay cannot do.
GENERATOR_INPUTS = ("torchgen/", "tools/autograd/", "aten/src/ATen/templates/",
                    "tools/setup_helpers/generate_code.py", TAGS_YAML)  # fmt: skip
YAML_INPUTS = (NATIVE_YAML, DERIVATIVES_YAML)

# Where headers of the source tree live under torch/include.
HEADER_ROOTS = {"aten/src/ATen/": "ATen/", "c10/": "c10/", "torch/csrc/": "torch/csrc/"}
HEADERS = (".h", ".hpp", ".cuh")


# --------------------------------------------------------------------------- changed files


def changed_files(fork: Path, base: str) -> dict[str, str]:
    """{path: status} of what the working tree changes relative to `base` (A, M, D, ...).

    The working tree, not HEAD: an overlay build is for what is checked out and edited,
    committed or not. Untracked files that git does not ignore count as added.
    """
    found: dict[str, str] = {}
    for line in git(fork, "diff", "--name-status", "--no-renames", base).splitlines():
        status, path = line.split("\t", 1)
        found[path] = status[0]
    for path in git(fork, "ls-files", "--others", "--exclude-standard").splitlines():
        found.setdefault(path, "A")
    return found


def refuse_generator_changes(changes: dict[str, str]) -> None:
    """StackError if the stack changes GENERATOR_INPUTS other than the yaml files."""
    for path in changes:
        if path.startswith(GENERATOR_INPUTS) and path not in YAML_INPUTS:
            raise StackError(f"{path}: the stack changes PyTorch's code generators; the "
                             "generated code of every op would change, which an overlay "
                             "cannot do (full from-source build needed)")  # fmt: skip


def parse_unified_diff(diff: str) -> tuple[list[int], list[tuple[int, str]]]:
    """(added line numbers in the new file, [(old line number, text)] of removed lines).

    Expects `git diff -U0` output for one file.
    """
    added: list[int] = []
    removed: list[tuple[int, str]] = []
    old = new = 0
    for line in diff.splitlines():
        m = re.match(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)
        if m:
            old, new = int(m.group(1)), int(m.group(2))
            continue
        if line.startswith(("+++", "---", "diff ", "index ", "new file", "deleted file")):
            continue
        if line.startswith("+"):
            added.append(new)
            new += 1
        elif line.startswith("-"):
            removed.append((old, line[1:]))
            old += 1
        elif line.startswith(" "):
            old += 1
            new += 1
    return added, removed


def added_lines(fork: Path, base: str, path: str) -> list[int]:
    """Line numbers the stack adds to upstream file `path`; StackError if it removes code.

    In a CPU kernel file (CPU_KERNELS) a removed registration of a DispatchStub is allowed
    when the added lines register that stub again: the stack replaces the stub's kernel,
    and the overlay re-points the stub to the added one (see repointed_stubs).
    """
    added, removed = parse_unified_diff(git(fork, "diff", "-U0", base, "--", path))
    replaced: set[str] = set()
    old_macros: dict[str, list[tuple[str | None, str]]] = {}
    if path.startswith(CPU_KERNELS) and removed:
        replaced = repointed_stubs((fork / path).read_text(), added)
        old_macros = macro_definitions(git(fork, "show", f"{base}:{path}"))
    for number, text in removed:
        stripped = text.strip()
        stubs = registered_stubs(code_lines(stripped)[0], old_macros) if replaced else set()
        if stubs and stubs <= replaced:
            continue  # a kernel the added lines register again
        if stripped and not stripped.startswith("//"):
            raise StackError(
                f"{path}:{number} (in {base}): the stack changes or removes upstream code "
                f"({stripped[:60]!r}); this cannot be overlaid on the wheel, which keeps it. "
                "Add code instead of changing it, or do a full from-source build."
            )
    return added


# DispatchStub kernels (cmake/Codegen.cmake compiles each file here once per CPU capability).
CPU_KERNELS = "aten/src/ATen/native/cpu/"
_STUB_REGISTRATION = re.compile(r"\b(?:ALSO_)?REGISTER_\w*DISPATCH\s*\(\s*(\w+)\s*,")
_CALL = re.compile(r"\b(\w+)\s*\(([^()]*)\)")


def registered_stubs(code: str, macros: dict[str, list[tuple[str | None, str]]],
                     depth: int = 0) -> set[str]:  # fmt: skip
    """The DispatchStubs that `code` registers (`REGISTER_DISPATCH(tanh_stub, ...)`), also
    through the file's function-like `macros` (`STATIC_IMPLEMENT_COMPLEX_KERNEL(tanh)`)."""
    found = set(_STUB_REGISTRATION.findall(code))
    for m in _CALL.finditer(code):
        definitions = macros.get(m.group(1), [])
        if depth > 8 or not definitions or definitions[0][0] is None:
            continue
        params, body = definitions[0]
        for param, arg in zip(params.split(","), m.group(2).split(","), strict=False):
            body = re.sub(rf"\b{re.escape(param)}\b", arg.strip(), body)
        found |= registered_stubs(re.sub(r"\s*##\s*", "", body), macros, depth + 1)
    return found


def repointed_stubs(text: str, added: list[int]) -> set[str]:
    """The DispatchStubs registered on the `added` lines of CPU kernel file `text`.

    The wheel's libtorch_cpu already defines each stub's per-capability kernel pointers
    (DispatchStub<...>::DEFAULT, ::AVX2, ::AVX512, exported): the overlay compiles the
    added lines once per capability and re-points those pointers when it loads.
    """
    lines = code_lines(text)
    macros = macro_definitions(text)
    return set().union(*(registered_stubs(lines[k - 1], macros) for k in added
                         if 0 < k <= len(lines)))  # fmt: skip


# --------------------------------------------------------------------------- new ops


def _strip_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line).rstrip()


def yaml_entries(text: str, key: str = "func", where: str = NATIVE_YAML) -> dict[str, list[str]]:
    """Entries of native_functions.yaml (key "func") or derivatives.yaml (key "name").

    {operator name (name.overload): the entry's lines without comments or blank lines}.
    Plain text, no YAML library: these files are lists of `- func: ...` blocks, and two
    entries mean the same iff their lines do (a reordered field counts as a change, which
    only makes the check stricter). Keeps the tool free of third-party imports.
    """
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        m = re.match(rf"^- {key}:\s*(.*)$", line)
        if m:
            name = _op_name(m.group(1))
            if name in found:
                raise StackError(f"{where}:{number}: operator {name} is declared twice")
            current = found[name] = [line]
        elif current is not None and line.startswith((" ", "\t")):
            current.append(line)
        else:
            raise StackError(f"{where}:{number}: expected '- {key}: ...' or an indented "
                             f"field, got {line.strip()[:60]!r}")  # fmt: skip
    return found


def _fields(lines: list[str]) -> dict[str, str]:
    """Top-level fields of one entry: {"func": ..., "variants": ..., "dispatch": "<block>"}."""
    fields: dict[str, str] = {}
    last = None
    for line in lines:
        m = re.match(r"^(?:- |  )(\w+):\s*(.*)$", line)
        if m and not line.startswith("   "):
            last = m.group(1)
            fields[last] = m.group(2).strip()
        elif last is not None:
            fields[last] += "\n" + line.strip()
    return fields


def _op_name(func: str) -> str:
    return func.split("(", 1)[0].strip()


def diff_ops(pristine: str, patched: str, where: str = NATIVE_YAML) -> list[str]:
    """New operators of `patched` relative to `pristine` (native_functions.yaml texts).

    Includes the overloads that `autogen:` of a new entry asks for. StackError when the
    patched file changes or removes an existing entry (schema, dispatch or any field):
    the wheel has that op compiled, so it cannot be overlaid.
    """
    old = yaml_entries(pristine, where=f"{where} (pristine)")
    new = yaml_entries(patched, where=where)
    for name, lines in old.items():
        if name not in new:
            raise StackError(f"{where}: the stack removes the existing operator {name}; "
                             "an existing op cannot be overlaid")  # fmt: skip
        if new[name] != lines:
            before, after = _fields(lines), _fields(new[name])
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            what = "schema" if "func" in changed else ", ".join(changed) or "entry"
            raise StackError(
                f"{where}: the stack changes the {what} of the existing operator {name} "
                f"({after.get('func', name)}); an existing op cannot be overlaid (the wheel "
                "has it compiled): add a new op instead, or do a full from-source build"
            )
    ops: list[str] = []
    for name, lines in new.items():
        if name in old:
            continue
        ops.append(name)
        ops += [x.strip() for x in _fields(lines).get("autogen", "").split(",") if x.strip()]
    return ops


def new_ops(fork: Path, base: str = BASE) -> list[str]:
    """The operators the stack adds to native_functions.yaml (working tree vs `base`).

    StackError, naming the op, if the stack changes an existing op's schema or dispatch.
    """
    pristine = git(fork, "show", f"{base}:{NATIVE_YAML}")
    return diff_ops(pristine, (fork / NATIVE_YAML).read_text())


def check_new_ops_overlayable(fork: Path, base: str, ops: list[str]) -> None:
    """StackError unless the overlay can build these ops: `torch.*` functions only (the
    Python glue installs no Tensor methods or torch.nn/linalg/fft/special functions), and
    derivatives.yaml entries changed for new ops only."""
    entries = yaml_entries((fork / NATIVE_YAML).read_text())
    for name in ops:
        if name not in entries:
            continue  # made by autogen:
        fields = _fields(entries[name])
        variants = {v.strip() for v in fields.get("variants", "function").split(",")}
        if "method" in variants or "python_module" in fields:
            raise StackError(
                f"{NATIVE_YAML}: {name}: Tensor methods and torch.nn/linalg/fft/special "
                "functions are not supported by the overlay's Python glue (only "
                "`variants: function` in the torch namespace)"
            )
    before = yaml_entries(git(fork, "show", f"{base}:{DERIVATIVES_YAML}"),
                          "name", f"{DERIVATIVES_YAML} (pristine)")  # fmt: skip
    after = yaml_entries((fork / DERIVATIVES_YAML).read_text(), "name", DERIVATIVES_YAML)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name) and name not in ops:
            raise StackError(
                f"{DERIVATIVES_YAML}: the stack changes the derivative of the existing "
                f"operator {name}; this cannot be overlaid (libtorch has it compiled)"
            )


# --------------------------------------------------------------------------- macro lists


_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_DEFINE = re.compile(r"#\s*define\s+(\w+)(?:\(([^()]*)\))?(.*)", re.S)


def code_lines(text: str, keep_literals: bool = False) -> list[str]:
    """The lines of `text` with comments (and string/char literals, unless `keep_literals`)
    blanked out, columns and line numbers unchanged: a name in a comment is not a use."""

    def blank(m: re.Match) -> str:
        if keep_literals and m.group()[0] in "\"'":
            return m.group()
        return re.sub(r"[^\n]", " ", m.group())

    return _NOISE.sub(blank, text).split("\n")


def macro_definitions(text: str) -> dict[str, list[tuple[str | None, str]]]:
    """{name: [(parameters or None, body)]} of the `#define`s of `text`, in file order (a
    macro defined in several #if branches has several), without comments, continuation
    lines joined and whitespace collapsed, so that re-aligned backslashes compare equal."""
    found: dict[str, list[tuple[str | None, str]]] = {}
    lines = code_lines(text, keep_literals=True)
    n = 0
    while n < len(lines):
        start = n
        while lines[start].lstrip().startswith("#") and lines[n].rstrip().endswith("\\"):
            if n + 1 == len(lines):
                break
            n += 1
        joined = " ".join(line.rstrip().removesuffix("\\") for line in lines[start : n + 1])
        n += 1
        m = _DEFINE.fullmatch(joined.strip())
        if m:
            params = None if m.group(2) is None else "".join(m.group(2).split())
            found.setdefault(m.group(1), []).append((params, " ".join(m.group(3).split())))
    return found


def _list_entries(params: str | None, body: str) -> list[str] | None:
    """The entries of a macro list `#define NAME(P) P(a) P(b, c) ...` (as "P(a)", "P(b,c)":
    spaces around parentheses and commas dropped), or None if the macro is not one."""
    if params is None or not re.fullmatch(r"\w+", params):
        return None
    entries: list[str] = []
    start = re.compile(rf"\s*{params}\s*\(")
    i = 0
    while body[i:].strip():
        m = start.match(body, i)
        if not m:
            return None
        depth, j = 1, m.end()
        while depth and j < len(body):
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            j += 1
        if depth:
            return None
        entries.append(re.sub(r"\s*([(),])\s*", r"\1", body[m.start() : j].strip()))
        i = j
    return entries


def added_list_entries(old: str, new: str, path: str) -> dict[str, tuple[str, list[str]]]:
    """{macro: (its parameter, the entries the stack adds)} for the macro lists of header
    `path` that gain entries from `old` (upstream) to `new` (the stack).

    StackError for any other change to an existing macro (an entry removed or changed, a
    macro that is not a list changed or removed, a list defined in several #if branches):
    the wheel's code was compiled with the old definition, which an overlay cannot undo.
    New macros need nothing: only new code can use them.
    """
    before, after = macro_definitions(old), macro_definitions(new)
    found: dict[str, tuple[str, list[str]]] = {}
    for name, defs in before.items():
        now = after.get(name, [])
        if now == defs:
            continue
        where = f"{path}: the stack changes the existing macro {name}"
        if len(defs) != 1 or len(now) != 1:
            raise StackError(f"{where}, which is defined {len(defs)} time(s) upstream and "
                             f"{len(now)} time(s) by the stack; cannot be overlaid")  # fmt: skip
        (p0, b0), (p1, b1) = defs[0], now[0]
        e0, e1 = _list_entries(p0, b0), _list_entries(p1, b1)
        if e0 is None or e1 is None or p0 != p1:
            raise StackError(f"{where}; only entries added to a list `#define {name}(_) "
                             "_(a) _(b) ...` can be overlaid (the wheel keeps the code "
                             "compiled with the old definition)")  # fmt: skip
        removed, added = Counter(e0) - Counter(e1), Counter(e1) - Counter(e0)
        if removed:
            raise StackError(f"{where}: it removes or changes the entries "
                             f"{', '.join(sorted(removed))}; the wheel keeps the code compiled "
                             "with them, so only added entries can be overlaid")  # fmt: skip
        new_entries = []
        for entry in e1:
            if added[entry]:
                added[entry] -= 1
                new_entries.append(entry)
        if new_entries:  # a reordered list registers the same kernels
            found[name] = (p1, new_entries)
    return found


def list_additions(fork: Path, base: str, changes: dict[str, str]
                   ) -> dict[str, tuple[str, str, list[str]]]:  # fmt: skip
    """{macro: (header, parameter, added entries)}: the entries the stack adds to macro
    lists of the upstream headers it changes (`_(attn)` in AT_FORALL_LOWER_PRECISION_FP).

    Upstream files compiled into the wheel expand these lists: laying the header over
    torch/include changes nothing there, so generate.stack_sources expands them again with
    the added entries alone. StackError for other changes to existing macros.
    """
    found: dict[str, tuple[str, str, list[str]]] = {}
    for path, status in sorted(changes.items()):
        if status != "M" or not path.endswith(HEADERS) or not path.startswith(tuple(HEADER_ROOTS)):
            continue
        old = git(fork, "show", f"{base}:{path}")
        new = (fork / path).read_text()
        for name, (param, entries) in added_list_entries(old, new, path).items():
            found[name] = (path, param, entries)
    return found
