"""attn's and tanh's CPU kernels at their edges: what `./stack sanitize` runs under the sanitizers.

A pytest file for the venv's Python (`python -m pytest stacktool/sanitize_sweep.py`; not
one of the tool's unit tests, which run under the system Python without torch). For each
size n of SIZES, at 1 and 2 threads, float and double, and each layout of grad_attn the
kernel reads differently (LAYOUTS), it calls torch.attn forward and backward (autograd) and
torch.ops.aten._attn_backward directly with each output_mask that changes what the
kernel computes, and checks every result against the composite formulas computed in double.

The edges, from PR 6's kernel (aten/src/ATen/native/cpu/AttnKernel.cpp): forward works in
runs of rows, one per thread (min(threads, ceil(n / kForwardBlockRows)) runs), each in
blocks of kForwardBlockRows (256); backward in min(threads, ceil(n / kBlockRows)) runs, in
blocks of min(kBlockRows (128) for one run, kRunBlockRows (96) for several, ceil(n / runs))
rows; the last block of a run is shorter. n = 1..300 passes every vector tail (8 floats and
4 doubles a vector with AVX2, 16 and 8 with AVX512) and one run of one to three blocks at
1 thread, two runs of one and two blocks at 2 threads (from one row under kBlockRows on:
below it, both run one run alike); each block size's multiples 1, 2 and 4, up to two rows
over or under, more blocks per run; 1023..1025 six backward blocks per run at 2 threads.
The block sizes are read from the kernel's source (every constexpr k...BlockRows), so the
edges follow them. With STACK_SWEEP_SIZES=edges (the gate's), 1..33 instead of 1..300, and
one row over or under each edge: every vector tail, and the block edges. The references
are computed on one thread: on a busy 2-core machine each 2-thread region waits for a core.

And PR 5's tanh kernel (test_tanh_kernel_edges) and GELU(tanh) kernels, forward and
backward (test_gelu_kernel_edges): every layout their loops tell apart, float, bfloat16 and
half, at every vector tail and around their buffer and thread split sizes.
"""

import contextlib
import itertools
import os
import re
from pathlib import Path

import pytest
import torch

KERNEL = Path(torch.__file__).resolve().parents[1] / "aten/src/ATen/native/cpu/AttnKernel.cpp"
D, DV = 5, 3  # q, k: (n, D); v: (n, DV); odd, so that no GEMM is a multiple of a vector


def block_rows() -> dict[str, int]:
    """The kernel's block sizes, as its source defines them (every constexpr k...BlockRows:
    kBlockRows 128, kRunBlockRows 96, kForwardBlockRows 256)."""
    text = KERNEL.read_text() if KERNEL.exists() else ""
    found = dict(re.findall(r"constexpr int64_t (k\w*BlockRows) = (\d+);", text))
    found = found or {"kBlockRows": "128", "kRunBlockRows": "96", "kForwardBlockRows": "256"}
    return {name: int(rows) for name, rows in found.items()}


def sizes(threads: int, edges_only: bool = False) -> list[int]:
    """1..300, 1023..1025, and each block size times 1, 2 and 4, up to two rows over or
    under; at 2 threads from one row under kBlockRows on (below it, one run: the code of 1
    thread). `edges_only` (the gate's): 1..33 (every vector tail, twice over) instead of
    1..300, and one row over or under each edge."""
    blocks, deltas = block_rows(), (-1, 0, 1) if edges_only else (-2, -1, 0, 1, 2)
    edges = {b * m + delta for b in blocks.values() for m in (1, 2, 4) for delta in deltas}
    found = {*range(1, 34 if edges_only else 301), 1023, 1024, 1025, *edges}
    two_runs = blocks.get("kBlockRows", min(blocks.values())) - 1
    return sorted(n for n in found if threads == 1 or n >= two_runs)


EDGES_ONLY = os.environ.get("STACK_SWEEP_SIZES") == "edges"  # sizes(edges_only=...)


# grad_attn (n x n) in each layout the kernel tells apart: read in place (inner stride 1, or
# 0: expanded), or copied block by block (copy_rows: any other inner stride), or absent.
LAYOUTS = {
    "none": None,
    "contiguous": lambda n, **kw: torch.randn(n, n, **kw),
    "transposed": lambda n, **kw: torch.randn(n, n, **kw).t(),
    "inner_stride_2": lambda n, **kw: torch.randn(n, 2 * n, **kw)[:, ::2],
    "row_stride_n_plus_9": lambda n, **kw: torch.randn(n, n + 9, **kw)[:, :n],
    "expanded_scalar": lambda n, **kw: torch.randn((), **kw).expand(n, n),
    "expanded_row": lambda n, **kw: torch.randn(n, **kw).expand(n, n),
    "expanded_column": lambda n, **kw: torch.randn(n, 1, **kw).expand(n, n),
}
# output_mask of each direct call: all, grad_q alone (no grad_k GEMM), grad_k alone (no
# grad_q GEMM), grad_v alone (no n x n gradient at all)
MASKS = ([True, True, True], [True, False, False], [False, True, False], [False, False, True])


@contextlib.contextmanager
def num_threads(threads: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def reference_backward(go, ga, q, k, v, a):
    """_attn_backward's three gradients by the composite formulas, in double (grad_v None
    without grad_output)."""
    go, ga, q, k, v, a = (None if t is None else t.double() for t in (go, ga, q, k, v, a))
    g = torch.zeros_like(a) if ga is None else ga.clone()
    if go is not None:
        g += go @ v.t()
    g *= 1 - a * a
    return g @ k, g.t() @ q, None if go is None else a.t() @ go


def masked(grads, mask):
    """What _attn_backward returns for `mask`: None where the mask leaves a gradient out."""
    return tuple(grad if wanted else None for grad, wanted in zip(grads, mask, strict=True))


def close(got, want, what: str, atol: float) -> None:
    """`got` is `want` (double) to float32's rounding (sums of up to 1025 products), or
    to double's."""
    want = want.to(got.dtype)
    rtol, atol = (1e-4, atol) if got.dtype == torch.float32 else (1e-7, 1e-7)  # assert_close's
    if got.shape != want.shape or not torch.allclose(got, want, rtol, atol):  # (fast) or why
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def check(actual, expected, what: str) -> None:
    for name, got, want in zip(("grad_q", "grad_k", "grad_v"), actual, expected, strict=True):
        if want is None:
            assert got is None, f"{what}: {name} is defined, expected None"
        else:
            close(got, want, f"{what}, {name}", atol=1e-3)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_attn_kernel_edges(layout, dtype, threads):
    make = LAYOUTS[layout]
    torch.manual_seed(0)
    for n in sizes(threads, EDGES_ONLY):
        what = f"n = {n}, {threads} thread(s), {dtype}, grad_attn {layout}"
        q = torch.randn(n, D, dtype=dtype) / D**0.5
        k, v = torch.randn(n, D, dtype=dtype), torch.randn(n, DV, dtype=dtype)
        go = torch.randn(n, DV, dtype=dtype)
        ga = None if make is None else make(n, dtype=dtype)
        # the op directly, each output_mask; and without grad_output
        calls = [(go, mask) for mask in MASKS] + ([(None, MASKS[0])] if ga is not None else [])
        with num_threads(threads):
            # forward, then backward through autograd (the kernel's both stubs)
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out, a = torch.attn(*leaves)
            outputs, grads = ((out,), (go,)) if ga is None else ((out, a), (go, ga))
            actual = torch.autograd.grad(outputs, leaves, grads)
            out, a = out.detach(), a.detach()
            direct = [torch.ops.aten._attn_backward(grad_output, ga, q, k, v, a, mask)
                      for grad_output, mask in calls]  # fmt: skip
        with num_threads(1), torch.no_grad():  # the references: in double, on one thread
            close(a, torch.tanh(q.double() @ k.double().t()), f"{what}: attn", atol=1e-4)
            close(out, a.double() @ v.double(), f"{what}: output", atol=1e-4)
            expected = reference_backward(go, ga, q, k, v, a)
            check(actual, expected, what)
            without_go = reference_backward(None, ga, q, k, v, a) if ga is not None else None
            for (grad_output, mask), got in zip(calls, direct, strict=True):
                grads = expected if grad_output is not None else without_go
                check(got, masked(grads, mask), f"{what}, _attn_backward, output_mask "
                      f"{mask}{', no grad_output' if grad_output is None else ''}")  # fmt: skip


# PR 5's tanh_float_loop (UnaryOpsKernel.cpp; float, and bfloat16 and half through float, in
# the AVX2 and AVX512 builds): a contiguous row through vec::map (its tail through loadu(ptr,
# count)), a strided one gathered into and scattered from a buffer of 8 KB (2048 floats,
# 4096 halves) in turn; TensorIterator splits a tensor between threads at 32768 elements.
# Each length at every vector tail and around those sizes, in every layout it tells apart
# (and rows of a 2-D tensor, a call of the loop each).
TANH_LENGTHS = sorted({*range(1, 70), *(e + d for e in (2048, 4096, 8192, 32768, 65536)
                                         for d in (-1, 0, 1))})  # fmt: skip
TANH_LAYOUTS = {
    "contiguous": lambda x: torch.tanh(x),
    "strided in": lambda x: torch.tanh(x.repeat_interleave(3)[::3]),
    "strided out": lambda x: torch.tanh(x, out=torch.empty(2 * len(x), dtype=x.dtype)[::2]),
    "strided in place": lambda x: x.repeat_interleave(2)[::2].tanh_(),
    "rows": lambda x: torch.tanh(padded_rows(x))[1],
}


def padded_rows(x):
    """Two rows of x, 5 elements apart: the loop runs once per contiguous row."""
    rows = torch.empty(2, len(x) + 5, dtype=x.dtype)[:, : len(x)]
    return rows.copy_(x.expand(2, len(x)))


def same_in_every_layout(layouts: dict, args: tuple, expected: tuple, what: str) -> None:
    """Each layout's results (a tuple) from `args`: the first layout's within a rounding of
    `expected` (computed in double), every other layout's bitwise the first's."""
    first = None
    for layout, run in layouts.items():
        got, where = run(*args), f"{what}, {layout}"
        if first is None:
            for g, e in zip(got, expected, strict=True):
                torch.testing.assert_close(g, e, msg=lambda m, w=where: f"{w}: {m}")
            first = got
        else:
            assert all(torch.equal(g, f) for g, f in zip(got, first, strict=True)), where


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["float32", "bfloat16", "float16"])  # fmt: skip
def test_tanh_kernel_edges(dtype, threads):
    layouts = {layout: lambda x, tanh=tanh: (tanh(x),) for layout, tanh in TANH_LAYOUTS.items()}
    torch.manual_seed(0)
    with num_threads(threads):
        for n in TANH_LENGTHS:
            x = (torch.randn(n) * 3).to(dtype)
            expected = (torch.tanh(x.double()).to(dtype),)
            same_in_every_layout(
                layouts, (x,), expected, f"tanh, n = {n}, {threads} thread(s), {dtype}"
            )


def test_sizes_cover_the_kernels_edges():
    """The sweep's sizes hold each block size's multiples, one row under and over them, at
    1 thread and, where there are two runs, at 2."""
    blocks = block_rows()
    for threads, edges_only in itertools.product((1, 2), (False, True)):
        found = set(sizes(threads, edges_only))
        for b, m, delta in itertools.product(blocks.values(), (1, 2, 4), (-1, 0, 1)):
            one_run = threads == 2 and b * m + delta < blocks.get("kBlockRows", b) - 1
            assert one_run or b * m + delta in found, (threads, b * m + delta)


# PR 5's GELU(tanh) loops (Activation.cpp; float, and bfloat16 and half through float):
# as tanh_float_loop, each operand strided or not, gathered into and scattered from buffers
# of kGeluBlock (2048) elements; backward reads two inputs (dy, x), each strided or not, and
# dy also expanded (stride 0: one element gathered over and over).
GELU_LAYOUTS = {
    "contiguous": lambda x, dy: (gelu(x), gelu_backward(dy, x)),
    "strided in": lambda x, dy: (gelu(x.repeat_interleave(3)[::3]),
                                 gelu_backward(dy.repeat_interleave(2)[::2], x.repeat_interleave(3)[::3])),
    "strided out": lambda x, dy: (
        torch.ops.aten.gelu.out(x, approximate="tanh", out=torch.empty(2 * len(x), dtype=x.dtype)[::2]),
        torch.ops.aten.gelu_backward.grad_input(dy, x, approximate="tanh",
                                                grad_input=torch.empty(2 * len(x), dtype=x.dtype)[::2])),
    "rows": lambda x, dy: (gelu(padded_rows(x))[1], gelu_backward(padded_rows(dy), padded_rows(x))[1]),
}  # fmt: skip


def gelu(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def gelu_backward(dy, x):
    return torch.ops.aten.gelu_backward(dy, x, approximate="tanh")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["float32", "bfloat16", "float16"])  # fmt: skip
def test_gelu_kernel_edges(dtype, threads):
    torch.manual_seed(0)
    with num_threads(threads):
        for n in TANH_LENGTHS:
            x, dy = (torch.randn(n) * 3).to(dtype), torch.randn(n).to(dtype)
            what = f"GELU(tanh), n = {n}, {threads} thread(s), {dtype}"
            expected = (
                gelu(x.double()).to(dtype),
                gelu_backward(dy.double(), x.double()).to(dtype),
            )
            same_in_every_layout(GELU_LAYOUTS, (x, dy), expected, what)
            one = dy[:1].expand(n)  # dy expanded: its one element's bits, as a contiguous copy's
            assert torch.equal(gelu_backward(one, x), gelu_backward(one.contiguous(), x)), what
