"""``python -m dispatch ab``: compare backends on shapes and dtypes."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("ab", help="A/B test backends: parity, latency, GB/s")
    p.set_defaults(func=lambda args: 1)
