"""What to generate, in C++: translation units of the lines the stack adds to upstream files.

The overlay build compiles only what the stack adds. New source files are compiled whole.
An upstream file the stack edits (say, `OP_DECOMPOSE(attn);` in a functorch registration
block) cannot be compiled whole: the wheel already holds every kernel it registers, and
compiling it again re-registers them all ("Overriding a previously registered kernel").
So `added_lines_tu` writes a translation unit made of:

- the file's preprocessor directives at file/namespace scope (#include, #define, #if...),
  in file order, so that the added code sees the same headers, macros and conditions;
- its `using` declarations, typedefs and namespace aliases, inside the namespaces they
  belong to;
- each run of added lines, wrapped in the namespaces and the TORCH_LIBRARY_IMPL /
  TORCH_LIBRARY_FRAGMENT block that enclose it in the file (TORCH_LIBRARY becomes
  TORCH_LIBRARY_FRAGMENT: libtorch owns the library), with `#line` so that compiler
  errors point at the real file and line.

Limits (each one is reported as a StackError naming file and line, or shows up as a
compile error in the generated TU, which `#line` maps back to the real file):

- added lines must sit at file/namespace scope or directly inside a registration block;
  lines added inside an existing function or class body cannot be overlaid;
- removing or changing upstream code lines cannot be overlaid (the wheel keeps them;
  changes.added_lines refuses it), except a DispatchStub registration in a CPU kernel file
  that the added lines register again (changes.repointed_stubs); removed blank and `//`
  comment lines are ignored;
- added code may use the file's includes, macros and `using` declarations and anything
  declared in headers, but not the file's own static / anonymous-namespace helpers or
  other file-local definitions (they are not copied: copying would duplicate their
  static initializers); put such code in a new file instead;
- braces must balance the same way in every #if branch (the scanner reads all branches).

Macro lists. An entry the stack adds to a list in an upstream header (`_(attn)` in
`#define AT_FORALL_LOWER_PRECISION_FP(_) ...`) changes what every upstream file that
expands the list registers, and those files are compiled into the wheel.
`added_list_entries` (changes.py) reads which entries a header's lists gain (and refuses
any other change to an existing macro); `list_expansions` finds where an upstream file
expands such a list and gives the lines that expand it again, in its registration block,
with only the added entries: the block's helper `#define`s it names, then
`#pragma push_macro`, `#undef NAME`, `#define NAME(_) <added entries>`, the expansion,
`#pragma pop_macro`. added_lines_tu writes them into the file's translation unit (its
`inserts`). An expansion outside a registration block, inside a directive, or sharing its
lines with other code is refused: it cannot be redone without redoing the code around it.
A list defined in several #if branches, or used in another macro or header, is refused as
well.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from stacktool.errors import StackError
from stacktool.overlay.changes import code_lines

_LIBRARY = re.compile(r"\bTORCH_LIBRARY(_IMPL|_FRAGMENT)?\s*\(([^()]*)\)\s*$")
_NAMESPACE = re.compile(r"(?:\binline\s+)?\bnamespace\b[\w:\s]*$|\bextern\s+\"C\"\s*$")
_USING = re.compile(r"^(using\b|typedef\b|namespace\s+\w+\s*=)")


@dataclass(eq=False)
class Frame:
    """An open brace block: kind is 'namespace', 'library' or 'other'.

    Compared by identity (eq=False): lines sit in the same blocks only if they are the
    very same blocks, not blocks with equal headers.
    """

    kind: str
    header: str
    line: int
    usings: list[tuple[int, str]] = field(default_factory=list)  # (last line, declaration)


@dataclass
class Scan:
    """What `scan` learned about a C++ file, indexed by 1-based line number."""

    lines: list[str]
    frames_at: list[tuple[Frame, ...]]  # frames open at the start of each line
    conds_at: list[tuple[tuple[str, bool], ...]]  # open #if sections: (directives, top-level?)
    directive_lines: dict[int, int]  # first line -> last line of each directive
    file_usings: list[tuple[int, str]]  # (last line, declaration)


def _at_namespace_scope(frames: Iterable[Frame]) -> bool:
    """Whether only namespaces are open: directives and usings there apply to all below."""
    return all(f.kind == "namespace" for f in frames)


def scan(text: str, path: str) -> Scan:
    """Track braces, namespaces, registration blocks and #if nesting, line by line.

    Comments, string and character literals and preprocessor lines do not count as braces.
    """
    lines = text.split("\n")
    frames: list[Frame] = []
    conds: list[tuple[str, bool]] = []
    frames_at: list[tuple[Frame, ...]] = [()]
    conds_at: list[tuple[tuple[str, bool], ...]] = [()]
    directive_lines: dict[int, int] = {}
    file_usings: list[tuple[int, str]] = []
    head: list[str] = []
    in_block_comment = False

    def record_line() -> None:  # what is open at the start of the next line
        frames_at.append(tuple(frames))
        conds_at.append(tuple(conds))

    n = 0
    while n < len(lines):
        number = n + 1
        record_line()
        line = lines[n]
        if not in_block_comment and line.lstrip().startswith("#"):
            last = n
            while lines[last].endswith("\\") and last + 1 < len(lines):
                last += 1
                record_line()
            directive_lines[number] = last + 1
            d = " ".join(lines[n : last + 1])
            word = re.match(r"#\s*(\w*)", d.strip()).group(1)
            top = _at_namespace_scope(frames)
            if word in ("if", "ifdef", "ifndef"):
                conds.append((d.strip(), top))
            elif word in ("elif", "else") and conds:
                directives, was_top = conds[-1]
                conds[-1] = (directives + "\n" + d.strip(), was_top)
            elif word == "endif" and conds:
                conds.pop()
            n = last + 1
            continue
        i = 0
        while i < len(line):
            c = line[i]
            if in_block_comment:
                end = line.find("*/", i)
                if end < 0:
                    i = len(line)
                else:
                    in_block_comment = False
                    i = end + 2
                continue
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                in_block_comment = True
                i += 2
                continue
            m = re.match(r'R"([^()\\\s]{0,16})\(', line[i:])
            if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
                closing = ")" + m.group(1) + '"'
                rest = "\n".join(lines[n:])
                end = rest.find(closing, i + m.end())
                if end < 0:
                    raise StackError(f"{path}:{number}: unterminated raw string")
                consumed = rest[: end + len(closing)]
                extra = consumed.count("\n")
                for _ in range(extra):
                    record_line()
                head.append(consumed[i:])
                n += extra
                line = lines[n]
                i = len(consumed) - consumed.rfind("\n") - 1 if extra else end + len(closing)
                continue
            if c in "\"'":
                if c == "'" and i > 0 and line[i - 1].isalnum():  # digit separator 1'000
                    i += 1
                    continue
                j = i + 1
                while j < len(line) and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                head.append(line[i : j + 1])
                i = j + 1
                continue
            if c == "{":
                h = " ".join("".join(head).split())
                if found := _NAMESPACE.search(h):
                    frames.append(Frame("namespace", found.group(0).strip(), number))
                elif found := _LIBRARY.search(h):
                    frames.append(Frame("library", found.group(0).strip(), number))
                else:
                    frames.append(Frame("other", h, number))
                head = []
            elif c == "}":
                if not frames:
                    raise StackError(f"{path}:{number}: unbalanced '}}' (cannot scan this file)")
                frames.pop()
                head = []
            elif c == ";":
                h = " ".join("".join(head).split())
                if _USING.match(h) and _at_namespace_scope(frames):
                    (frames[-1].usings if frames else file_usings).append((number, h + ";"))
                head = []
            else:
                if not head and c.isspace():
                    i += 1
                    continue
                head.append(c)
            i += 1
        if head:
            head.append(" ")
        n += 1
    if frames:
        raise StackError(
            f"{path}: braces do not balance (block opened at line {frames[-1].line}); "
            "cannot scan this file"
        )
    frames_at.append(())  # "line len+1": after the end of the file
    conds_at.append(tuple(conds))
    return Scan(lines, frames_at, conds_at, directive_lines, file_usings)


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Line numbers as (first, last) runs of consecutive lines: each run is one block."""
    runs: list[tuple[int, int]] = []
    for k in sorted(numbers):
        if runs and runs[-1][1] == k - 1:
            runs[-1] = (runs[-1][0], k)
        else:
            runs.append((k, k))
    return runs


def _is_code(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith(("//", "/*", "*"))


def added_lines_tu(
    text: str, added: list[int], path: str, inserts: dict[int, list[str]] | None = None
) -> str:
    """A translation unit holding the lines `added` to upstream file `path` (see module doc).

    `inserts` ({line: generated lines}, from list_expansions) go right before that line of
    `text`, which must be in `added` or follow one of its runs, inside the same blocks.
    Returns "" when the added lines hold no code (comments, blank lines).
    """
    pending = dict(inserts or {})
    s = scan(text, path)
    last_line = len(s.lines)
    added = [k for k in added if 1 <= k <= last_line]
    if not any(_is_code(s.lines[k - 1]) for k in added):
        return ""

    def balanced(a: int, b: int) -> bool:
        return s.frames_at[a] == s.frames_at[b + 1]

    def slide(a: int, b: int) -> tuple[int, int] | None:
        # git may place an added block a few lines off ("+}\n+\n+f() {\n+...\n }" for
        # "}\n+\n+f() {\n+...\n+}"): shifting a run over equal lines is the same change.
        if balanced(a, b):
            return a, b
        x, y = a, b
        while y < last_line and s.lines[x - 1] == s.lines[y]:
            x, y = x + 1, y + 1
            if balanced(x, y):
                return x, y
        x, y = a, b
        while x > 1 and s.lines[y - 1] == s.lines[x - 2]:
            x, y = x - 1, y - 1
            if balanced(x, y):
                return x, y
        return None

    runs: dict[int, int] = {}
    for a, b in _runs(added):
        found = slide(a, b)
        if found is None:
            raise StackError(
                f"{path}:{a}-{b}: the added lines do not form whole blocks; cannot be overlaid"
            )
        a, b = found
        inner = [f for f in s.frames_at[a] if f.kind == "other"]
        if inner:
            raise StackError(
                f"{path}:{a}: lines added inside an existing function or class body "
                f"(opened at line {inner[-1].line}: {inner[-1].header[:60]!r}) cannot be "
                "overlaid: the wheel keeps the old body. Move the new code into a function "
                "of its own, or into a new file."
            )
        runs[a] = b

    out = [
        f"// @generated by stacktool.overlay from {path}: only the lines the stack adds to it,",
        "// in their namespaces and registration blocks (see stacktool/overlay/added_lines.py).",
    ]

    def open_frames(frames: tuple[Frame, ...], before: int) -> int:
        for f in frames:
            header = f.header
            if f.kind == "library":
                header = re.sub(r"\bTORCH_LIBRARY\s*\(", "TORCH_LIBRARY_FRAGMENT(", header)
                out.append(f'#line {f.line} "{path}"')  # registrations report this line
            out.append(header + " {")
            out.extend(u for end, u in f.usings if end < before)
        return len(frames)

    def insert(k: int) -> bool:
        lines = pending.pop(k, None)
        out.extend(lines or [])
        return lines is not None

    def directive(k: int) -> int:
        last = s.directive_lines[k]
        out.append(f'#line {k} "{path}"')
        out.extend(s.lines[k - 1 : last])
        return last + 1

    end_of_runs = max(runs.values())
    k = 1
    while k <= end_of_runs:
        if k in s.directive_lines and _at_namespace_scope(s.frames_at[k]) and k not in runs:
            k = directive(k)  # file/namespace-scope directives, in file order
            continue
        if k not in runs:  # (a run may start with a directive: it is emitted with the run)
            out.extend(u for end, u in s.file_usings if end == k)
            k += 1
            continue
        b = runs[k]
        inner_conds = [d for d, top in s.conds_at[k] if not top]
        opened = open_frames(s.frames_at[k], k)
        out.extend(inner_conds)
        out.append(f'#line {k} "{path}"')
        j = k
        while j <= b:
            if j in s.directive_lines and _at_namespace_scope(s.frames_at[j]):
                out.append("}" * opened)
                j = directive(j)
                opened = open_frames(s.frames_at[j], j)
                out.append(f'#line {j} "{path}"')
                continue
            if insert(j):
                out.append(f'#line {j} "{path}"')
            out.append(s.lines[j - 1])
            j += 1
        insert(b + 1)
        out.extend("#endif" for _ in inner_conds)
        out.append("}" * opened)
        k = b + 1
    # #if sections still open where the runs end: their #endif lines come later in the file
    out.extend("#endif" for _, top in s.conds_at[end_of_runs + 1] if top)
    if pending:
        raise StackError(f"{path}:{min(pending)}: the lines generated for this line could not "
                         "be placed in its translation unit (a bug of stacktool)")  # fmt: skip
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- macro lists


def _matching_paren(code: list[str], number: int, col: int) -> tuple[int, int] | None:
    """(line, column) of the `)` closing the `(` that starts at or after code[number][col]
    (1-based line numbers), None if no `(` comes first."""
    depth = 0
    for k in range(number, len(code) + 1):
        line = code[k - 1]
        for c in range(col if k == number else 0, len(line)):
            ch = line[c]
            if depth == 0 and not ch.isspace() and ch != "(":
                return None
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and ch == ")":
                return k, c
    return None


def list_expansions(
    text: str, path: str, lists: dict[str, tuple[str, list[str]]], skip: Iterable[int] = ()
) -> tuple[list[int], dict[int, list[str]]]:
    """Where upstream file `path` expands the macro lists `lists` (added_list_entries), and
    how to expand them again with the added entries only (see the module doc).

    Returns (the lines of the expansions, {line: lines to insert before it}) for
    added_lines_tu. Lines in `skip` (added by the stack: new code, compiled with the
    whole list) are left alone. StackError for a use the overlay cannot redo.
    """
    if not lists:
        return [], {}
    s = scan(text, path)
    code = code_lines(text)
    skip = set(skip)
    in_directive = {k for first, last in s.directive_lines.items() for k in range(first, last + 1)}
    # #define directives inside blocks (those at namespace scope reach the TU anyway)
    block_defines = []
    for first in sorted(s.directive_lines):
        m = re.match(r"\s*#\s*define\s+(\w+)", code[first - 1])
        if m and not _at_namespace_scope(s.frames_at[first]):
            block_defines.append((first, m.group(1)))
    lines: list[int] = []
    sites: list[tuple[int, int, str]] = []
    for name in lists:
        for number, line in enumerate(code, 1):
            m = re.search(rf"\b{name}\b", line)
            if not m or number in skip:
                continue
            where = f"{path}:{number}: {name}, to which the stack adds entries,"
            if number in in_directive:
                raise StackError(f"{where} is used in a preprocessor directive; the overlay "
                                 "cannot follow it (a full from-source build is needed)")  # fmt: skip
            end = _matching_paren(code, number, m.end())
            if end is None:
                raise StackError(f"{where} is used without arguments; cannot be overlaid")
            last, col = end
            if line[: m.start()].strip() or code[last - 1][col + 1 :].strip() not in ("", ";"):
                raise StackError(f"{where} is expanded on lines shared with other code; put "
                                 "the expansion on lines of its own")  # fmt: skip
            frames = s.frames_at[number]
            if not frames or frames[-1].kind != "library" or any(f.kind == "other" for f in frames):
                inside = frames[-1].header[:60] if frames else "file scope"
                raise StackError(
                    f"{where} is expanded outside a registration block (in {inside!r}); the "
                    "overlay can only expand it again, with the added entries alone, directly "
                    "inside a TORCH_LIBRARY_IMPL / TORCH_LIBRARY_FRAGMENT block"
                )
            sites.append((number, last, name))
    inserts: dict[int, list[str]] = {}
    for number, last, name in sorted(sites):
        param, entries = lists[name]
        # the block's helper macros the expansion names, and the ones those name
        wanted = set(re.findall(r"\w+", " ".join(code[number - 1 : last])))
        helpers: dict[int, str] = {}
        while wanted:
            ident = wanted.pop()
            found = [
                first for first, defined in block_defines if defined == ident and first < number
            ]
            if found and found[-1] not in helpers:
                helpers[found[-1]] = ident
                body = code[found[-1] - 1 : s.directive_lines[found[-1]]]
                wanted |= set(re.findall(r"\w+", " ".join(body))) - {ident, name}
        prelude = inserts.setdefault(number, [])
        for first, ident in sorted(helpers.items()):
            prelude += [f"#undef {ident}", f'#line {first} "{path}"']
            prelude += s.lines[first - 1 : s.directive_lines[first]]
        prelude += [
            f"// {name} with only the entries the stack adds to it",
            f'#pragma push_macro("{name}")',
            f"#undef {name}",
            f"#define {name}({param}) {' '.join(entries)}",
        ]
        inserts.setdefault(last + 1, []).append(f'#pragma pop_macro("{name}")')
        lines += range(number, last + 1)
    return lines, inserts
