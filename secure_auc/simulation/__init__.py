"""Vectorised simulation of FedAUC's mechanisms over many repetitions (no MPC)."""
