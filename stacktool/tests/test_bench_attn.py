"""The attn timing worker (stacktool/bench/attn.py) on fakes: the calls the floor and the
GEMMs alone make, the steps per thread count, the rows it writes."""

import sys
import unittest
from unittest import mock

from stacktool.bench import attn
from stacktool.bench.attn import floor_step, gemms_step
from stacktool.bench.common import FWD, FWD_BWD, QUICK


class Fake:
    """A tensor (or the torch module) that records the calls made on it."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __repr__(self):
        return self.name

    @property
    def T(self):
        return Fake(f"{self.name}.T", self.log)

    def detach(self):
        return self

    def tanh_(self):
        self.log.append(f"{self.name}.tanh_()")
        return self

    def mm(self, a, b, out=None):
        self.log.append(f"mm({a}, {b})" + f" -> {out}" * (out is not None))
        return Fake(f"mm({a}, {b})", self.log)


class FloorTest(unittest.TestCase):
    def test_the_floor_makes_the_calls_of_attn_and_attn_backward(self):
        log = []
        torch = Fake("torch", log)
        torch.addmm = lambda c, a, b: log.append(f"addmm({c}, {a}, {b})") or Fake("gx", log)
        torch.ops = mock.Mock()
        torch.ops.aten.tanh_backward.grad_input = lambda g, a, grad_input: log.append(
            f"tanh_backward({g}, {a}, grad_input={grad_input})"
        )
        q, k, v, go, ga = (Fake(name, log) for name in ("q", "k", "v", "go", "ga"))
        floor_step(torch, q, k, v, go, ga)()
        a = "mm(q, k.T)"
        self.assertEqual(log, [
            a, f"{a}.tanh_()",  # the kernel: tanh in place, no second n x n buffer
            f"mm({a}, v)",
            f"mm({a}.T, go)",  # grad_v
            "addmm(ga, go, v.T)",  # gA + gO v^T in one call
            f"tanh_backward(gx, {a}, grad_input=gx)",  # written into that buffer
            "mm(gx, k)", "mm(gx.T, q)",  # grad_q, grad_k
        ])  # fmt: skip


class GemmsTest(unittest.TestCase):
    def gemms(self, backward):
        """The calls of one gemms_step step (called twice) and the outputs it allocated."""
        log, allocated = [], []
        torch = Fake("torch", log)
        torch.empty = lambda *shape: allocated.append(shape) or Fake(f"E{len(allocated)}", log)
        torch.empty_like = lambda t: allocated.append(t.name) or Fake(f"E{len(allocated)}", log)
        q, k, v, go, ga = (Fake(name, log) for name in ("q", "k", "v", "go", "ga"))
        q.shape, v.shape = (8, 3), (8, 4)
        step = gemms_step(torch, q, k, v, go, ga, backward=backward)
        step()
        calls = list(log)
        step()
        self.assertEqual(log, calls * 2)  # nothing allocated or changed by a step
        return calls, allocated

    def test_forward_makes_the_two_gemms_into_preallocated_outputs(self):
        calls, allocated = self.gemms(backward=False)
        self.assertEqual(calls, ["mm(q, k.T) -> E1", "mm(E1, v) -> E2"])
        self.assertEqual(allocated, [(8, 8), (8, 4), (8, 4), (8, 8), "q", "k"])

    def test_backward_adds_the_four_gemms_of_the_gradients(self):
        calls, _ = self.gemms(backward=True)
        self.assertEqual(calls, [
            "mm(q, k.T) -> E1", "mm(E1, v) -> E2",  # a, o
            "mm(E1.T, go) -> E3",  # grad_v
            "mm(go, v.T) -> E4",  # gx, n x n
            "mm(E4, k) -> E5", "mm(E4.T, q) -> E6",  # grad_q, grad_k
        ])  # fmt: skip


class TimeWorkerTest(unittest.TestCase):
    def time_worker(self, native_only=False):
        """time_worker on fakes: (torch, its methods, the steps of each measure(), result)."""
        torch = mock.MagicMock(__version__="2.6.0", __file__="/t/torch/__init__.py")
        methods = {"native": mock.Mock(), "composite": mock.Mock()}
        measured = []

        def measure(steps, settings, timer):
            measured.append(steps)
            return {key: {"ms": 1.0, "rounds_ms": [1.0]} for key in steps}

        load = mock.Mock(return_value=(torch, methods))
        with (mock.patch.object(attn, "load_torch", load),
              mock.patch.object(attn, "measure", measure),
              mock.patch.object(attn, "thread_counts", return_value=(1, 2)),
              mock.patch.dict(sys.modules, {"torch.utils.benchmark": mock.Mock()}),
              mock.patch.object(attn, "say")):  # fmt: skip
            found = attn.time_worker(mock.Mock(), QUICK, native_only)
        self.assertEqual(load.call_args.kwargs, {"with_function": not native_only})
        self.assertEqual(found["torch_file"], "/t/torch/__init__.py")  # what pr4.py checks
        return torch, methods, measured, found

    def test_every_step_at_each_thread_count_in_one_measure_and_a_row_per_count(self):
        torch, methods, measured, found = self.time_worker()
        self.assertEqual(len(measured), len(QUICK.sizes))  # one measure() per size
        forward = {"native", "composite", "gemms", "compile", "compile_attn"}
        both = {"native", "composite", "floor", "gemms", "compile", "compile_attn"}
        self.assertEqual(
            set(measured[0]),
            {(c, FWD, m) for c in (1, 2) for m in forward}
            | {(c, FWD_BWD, m) for c in (1, 2) for m in both},
        )
        self.assertTrue(all(key[0] == count for key, (_, count) in measured[0].items()))
        # torch.compile compiles per size and thread count, its kernels built for that count
        self.assertEqual(
            [(c.args, c.kwargs) for c in torch.compile.call_args_list[:4]],
            [((methods[m],), {"options": {"cpp.threads": c}}) for c in (1, 2)
             for m in ("composite", "native")],
        )  # fmt: skip
        self.assertEqual(torch.compile.call_count, 4 * len(QUICK.sizes))
        self.assertEqual(found["threads"], [1, 2])
        self.assertEqual(
            [(row["size"][0], row["threads"], row["pass"]) for row in found["rows"][:4]],
            [(512, 1, FWD), (512, 1, FWD_BWD), (512, 2, FWD), (512, 2, FWD_BWD)],
        )
        self.assertEqual(set(found["rows"][1]["ms"]), both)
        self.assertNotIn("profile", found)  # the quick run profiles nothing

    def test_native_only_times_the_native_op_alone(self):
        # PR 4's tree's run (pr4.py): no baselines, no torch.compile, no PR 2 Function
        torch, _, measured, found = self.time_worker(native_only=True)
        self.assertEqual(
            set(measured[0]), {(c, p, "native") for c in (1, 2) for p in (FWD, FWD_BWD)}
        )
        torch.compile.assert_not_called()
        self.assertEqual(
            [set(row["ms"]) for row in found["rows"]], [{"native"}] * 4 * len(QUICK.sizes)
        )


if __name__ == "__main__":
    unittest.main()
