"""Peers and scores for SiMoE on real, brute-forced GPU tuning spaces (issue 22)."""
