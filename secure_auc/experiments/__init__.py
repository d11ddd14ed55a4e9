"""Experiments beside the library: the protocol comparison, the label-guessing attack,
the paper's published tables."""
