"""The common autotune protocol: tune spaces, seeding, measurement, sweeps, the cache and shipped tables."""

from .cache import CacheWarning, DecisionCache, decision_trusted, default_cache, default_cache_dir
from .compiling import CompileReport, compile_all
from .entries import EntryError
from .fleet import ImportReport, Machine
from .placeholders import placeholder
from .space import EMPTY, Config, Failure, Timing, TuneResult, TuneSettings, TuneSpace
from .sweep import pick_backend, pick_winner, sweep
from .tables import ShippedTables, default_tables_dir, shipped_tables, write_table
from .timer import do_bench, measure, measurement_count

__all__ = [
    "EMPTY", "CacheWarning", "CompileReport", "Config", "DecisionCache", "EntryError", "Failure", "ImportReport", "Machine",
    "ShippedTables", "Timing", "TuneResult", "TuneSettings", "TuneSpace", "compile_all", "decision_trusted", "default_cache",
    "default_cache_dir", "default_tables_dir", "do_bench", "measure", "measurement_count", "pick_backend", "pick_winner",
    "placeholder", "shipped_tables", "sweep", "write_table",
]
