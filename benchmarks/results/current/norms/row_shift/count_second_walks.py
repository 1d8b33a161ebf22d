"""How many rows the Triton layer_norm's chunked walk would walk a second time, by row shift.

The walk sums ``d = x - shift`` and ``d^2`` over a row; where the shift lies farther from the
row's mean than the row's standard deviation (the kernel's ``_ill_placed``), those sums would
cancel, so the row is walked again about its mean. On a grid that runs every row at once, one
such row sets the kernel's time. This counts those rows on the CPU for the shift of the kernel
before (the median of the row's first, middle and last elements) and now (the median of the
means of 16 elements at the head, middle and tail), over inputs of several distributions.

    python3 count_second_walks.py [--rows 256] [--n 65536]
"""

import argparse

import torch


def shift(x: torch.Tensor, group: int) -> torch.Tensor:
    n = x.shape[1]
    g = min(n, group)
    heads = [x[:, s:s + g].mean(1) for s in (0, (n - g) // 2, n - g)]
    return torch.stack(heads).median(0).values


def second_walks(x: torch.Tensor, group: int) -> int:
    m = x.mean(1) - shift(x, group)
    return int((m * m > x.var(1, correction=0)).sum())


def inputs(rows: int, n: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    normal = torch.randn(rows, n, generator=g, dtype=torch.float64)
    massive = normal.clone()
    massive[:, [17, n // 3, n - 100]] *= 300  # three massive channels
    scales = 1 + 3 * torch.rand(n, generator=g, dtype=torch.float64)
    wave = torch.sin(torch.arange(n, dtype=torch.float64) / 50)
    return {
        "N(0, 1)": normal,
        "N(1000, 1)": normal + 1000,
        "Student t, 3 dof": torch.distributions.StudentT(3.0).sample((rows, n)).double(),
        "uniform [0, 1)": torch.rand(rows, n, generator=g, dtype=torch.float64),
        "N(0, 1), three massive channels": massive,
        "N(0, 1), channels scaled 1-4": normal * scales,
        "N(0, 1) + a wave along the row": normal + wave,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--n", type=int, default=65536)
    a = p.parse_args()
    torch.manual_seed(0)
    groups = (1, 4, 8, 16, 32)
    print(f"rows walked twice of {a.rows} x {a.n}, by the elements in each of the shift's three groups "
          "(1: the kernel before, 16: now)")
    print(f"| input | {' | '.join(str(k) for k in groups)} |")
    print(f"|---|{'---|' * len(groups)}")
    for name, x in inputs(a.rows, a.n).items():
        print(f"| {name} | {' | '.join(str(second_walks(x, k)) for k in groups)} |")


if __name__ == "__main__":
    main()
