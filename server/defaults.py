"""What a deployment runs unless told otherwise (`simoe-server start`, a run config
without these keys). Kept apart from the strategy code so the CLI imports them cheaply.

Chosen on the protocol's validation units over 3 seeds against the other variants of
`docs/results/federation_helps_variants_validation.md`: FedAdam on the server (a step of
about DEPLOYED_SERVER_LR per learned value per round) with many rounds of one local epoch
(docs/model.md, "Federation helps"). `AggregationConfig` and `SiMoEStrategy` themselves
default to plain FedAvg, the library's neutral choice (the tests and the poisoning bench
use it).
"""

DEPLOYED_SERVER_OPTIMIZER = "adam"
DEPLOYED_SERVER_LR = 0.01
DEPLOYED_EPOCHS = 1
