"""The attn timing worker's floor (stacktool/bench/attn.py): the ATen calls it makes, on fakes."""

import unittest
from unittest import mock

from stacktool.bench.attn import floor_step


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

    def mm(self, a, b):
        self.log.append(f"mm({a}, {b})")
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


if __name__ == "__main__":
    unittest.main()
