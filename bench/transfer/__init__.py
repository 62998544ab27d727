"""Offline transfer to unseen GPUs and units: SiMoE against the baselines under the protocol, its
reports and diagnostics, and the starter model trained on the protocol's training units.
"""
