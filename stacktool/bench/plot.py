"""bench.png: composite's and torch.compile's time over native torch.attn's, per size, at the
largest thread count timed (run by the plot worker, under the venv's Python, which has
matplotlib)."""

from pathlib import Path

from stacktool.bench.common import FWD, FWD_BWD, LABELS, fmt_threads
from stacktool.bench.targets import TIME_TARGETS

PLOTTED = ("composite", "compile")  # the ratios the targets (and the text) are about


def composite_bound(n: int, name: str) -> float | None:
    """The composite / native target at this n and pass, if one applies."""
    for target in TIME_TARGETS:
        if target.other == "composite" and name in target.passes and target.applies(n):
            return target.bound
    return None


def ratio_series(timing: dict) -> dict:
    """{pass: sizes, {method: [its time / native's per size]}, the composite target per size}:
    what the plot draws, from the rows of the largest thread count."""
    found = {}
    count = max(timing["threads"])
    for name in (FWD, FWD_BWD):
        rows = [row for row in timing["rows"] if (row["pass"], row["threads"]) == (name, count)]
        series = {}
        for method in PLOTTED:
            values = [
                row["ms"][method] / row["ms"]["native"]
                if row["ms"].get(method) and row["ms"].get("native") else None
                for row in rows
            ]  # fmt: skip
            if any(v is not None for v in values):
                series[method] = values
        found[name] = {
            "sizes": [tuple(row["size"]) for row in rows],
            "ratios": series,
            "composite target": [composite_bound(row["size"][0], name) for row in rows],
        }
    return found


# y ticks of the ratio plot: fine ones around 1.0 where the ratios are close, else coarse
FINE_TICKS = (0.5, 0.7, 0.8, 0.9, 1, 1.15, 1.3, 1.5, 2, 3, 5, 7, 10)
COARSE_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)


def plot(timing: dict, png: Path) -> None:
    """Composite's and torch.compile's time over native torch.attn's, per size, forward and
    forward+backward: above 1.0 the native op is faster. The composite target is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    series = ratio_series(timing)
    values = [v for data in series.values() for vs in data["ratios"].values() for v in vs if v]
    fine = bool(values) and min(values) >= FINE_TICKS[0] and max(values) <= FINE_TICKS[-1]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), sharey=True)
    styles = {"composite": "-o", "compile": "-s"}
    for ax, (name, data) in zip(axes, series.items(), strict=True):
        x = range(len(data["sizes"]))
        for method, values in data["ratios"].items():
            points = [(i, v) for i, v in zip(x, values, strict=True) if v is not None]
            ax.plot(*zip(*points, strict=True), styles[method],
                    label=f"{LABELS[method]} / native")  # fmt: skip
        marks = [(i, v) for i, v in zip(x, data["composite target"], strict=True) if v]
        if marks:
            ax.plot(*zip(*marks, strict=True), "_", color="tab:blue", markersize=22,
                    markeredgewidth=2, label="composite target (1.5 / 1.15)")  # fmt: skip
        ax.axhline(1.0, color="black", linewidth=1.2, label="1.0: same time (compile target)")
        labels = [f"n={n}\nd={d}\ndv={dv}" for n, d, dv in data["sizes"]]
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set(title=name, xlabel="size (n, d, dv)", yscale="log")
        ax.yaxis.set_major_locator(ticker.FixedLocator(FINE_TICKS if fine else COARSE_TICKS))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("method's time / native torch.attn's\n(above 1.0: native is faster)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"torch.attn against the composite and torch.compile, float32, "
                 f"{fmt_threads(max(timing['threads']))}, one run of ./stack bench")  # fmt: skip
    fig.savefig(png, dpi=110, bbox_inches="tight")
