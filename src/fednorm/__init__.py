"""fednorm: Batch Normalization in federated learning, reproduced on one code base."""

__version__ = "0.1.0"
# The engine's revision: the commit that last changed what training computes (its float bits).
# Every run.json carries it; a claims ledger over runs of two revisions says so in its header.
# tests/fl/test_bitwise.py pins the engine's float64 bits under this name: a change that moves
# them must name its own commit here, then re-record (that test's --write refuses otherwise).
ENGINE_REVISION = "2cf004e"
