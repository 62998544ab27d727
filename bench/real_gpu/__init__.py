"""Real GPU measurements (benchmark_hub): SiMoE and its peers, replayed on brute-forced spaces."""
