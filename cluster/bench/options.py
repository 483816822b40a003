"""Option types and the options several benches take, each with the bench's own default."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} must not be negative")
    return value


def add_latency_options(parser: argparse.ArgumentParser, messages: int, rate: int) -> None:
    parser.add_argument("--latency-messages", type=positive_int, default=messages,
                        help=f"messages timed for the produce latency (default {messages})")
    parser.add_argument("--latency-rate", type=positive_int, default=rate,
                        help=f"messages per second during the latency phase (default {rate})")


def add_phase_timeout(parser: argparse.ArgumentParser, seconds: int) -> None:
    parser.add_argument("--phase-timeout", type=positive_int, default=seconds, metavar="SECONDS",
                        help=f"a phase that takes longer stops the run with exit status 1 (default {seconds})")
