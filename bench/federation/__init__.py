"""Federation on a simulated fleet: whether it helps, why not, what it costs per round, what lying
nodes do to it, and the demo's newcomer over seeds.
"""
