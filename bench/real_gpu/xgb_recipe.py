"""MetaSchedule's recipe on a parameter space: XGBoost on the target's own measurements.

Why: issue 22 asks for MetaSchedule's way of tuning as a peer at the same budget: no
knowledge from other GPUs, a cost model trained online on what was measured on the
target, steering which configurations are measured next. This module replays that recipe
on a brute-forced space (the measurements are looked up, not run).

What follows TVM MetaSchedule (tvm/s_tir/meta_schedule, the version installed here):
- the model is its `XGBModel`: labels are normalised throughput `min_cost / cost`, a
  failed configuration has cost 1e10 (`_mean_cost` of a result without run_secs), i.e.
  label ~0, the worst; the objective is its squared error weighted by the label
  (`PackSum.obj_square_error`: gradient (pred - y) * y, hessian y), so a failed
  configuration counts as measured but carries no weight, as in MetaSchedule;
  `XGBConfig` defaults max_depth 10, gamma 0.001, min_child_weight 0, eta 0.2; up to
  10,000 rounds with early stopping after 50 rounds without gain in training RMSE;
- epsilon-greedy: `EvolutionarySearch(eps_greedy=0.05)` measures 5% random
  configurations; here the random share is kept at 5% of all model-chosen measurements
  over the run (with a batch of 4, one random pick per 20 measurements);
- the model's top unmeasured configurations are chosen by ranking the whole space
  exactly (MetaSchedule's evolutionary search approximates that argmax in spaces too
  large to enumerate; these spaces have at most 17,956 configurations).

What differs, and why: MetaSchedule measures batches of 64 and predicts at random until
100 samples (`num_warmup_samples=100`), so at a budget of 16 or 64 it would be random
search. Here a random initial batch of `init=8` is measured, then the model is retrained
after every `batch=4` measurements: at a budget of 16 the model is trained twice and picks
8 of the 16 configurations; at 64, 14 times and picks 56. Eight points is the smallest
initial sample that gives a tree ensemble of depth 10 something to split on in spaces
with 4-15 parameters; batches of 4 retrain often while keeping the number of model fits
(and the replay's wall time) small. Features: the caller's program representation;
`log2_features` (log2 of 1 + each raw parameter value) is the plain default used in
the tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: MetaSchedule's XGBConfig defaults (tvm s_tir/meta_schedule/cost_model/xgb_model.py).
XGB_PARAMS: dict[str, float | int] = {
    "max_depth": 10,
    "gamma": 0.001,
    "min_child_weight": 0,
    "eta": 0.2,
}
EPS_GREEDY = 0.05
EARLY_STOPPING_ROUNDS = 50
MAX_ROUNDS = 10_000
FAILED_COST = 1e10


def log2_features(param_values: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """log2(1 + value) of each raw parameter value (1 + so that 0-valued flags are finite)."""
    arr = np.asarray(param_values, dtype=float)
    return np.log2(1.0 + np.maximum(arr, 0.0))


def _fit_predict(x_train: np.ndarray, y: np.ndarray, x_all: np.ndarray, seed: int) -> np.ndarray:
    """Train MetaSchedule's weighted-square-error XGBoost on (x, y); predict on x_all."""
    import xgboost as xgb

    dtrain = xgb.DMatrix(x_train, label=y)
    dtrain.set_weight(y)

    def obj(pred: np.ndarray, _d: xgb.DMatrix) -> tuple[np.ndarray, np.ndarray]:
        return (pred - y) * y, np.ones_like(pred) * y

    def rmse(pred: np.ndarray, _d: xgb.DMatrix) -> tuple[str, float]:
        return "p-rmse", float(np.sqrt(np.mean((pred - y) ** 2)))

    params = {**XGB_PARAMS, "seed": seed, "nthread": 1, "disable_default_eval_metric": 1}
    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=MAX_ROUNDS,
        obj=obj,
        custom_metric=rmse,
        evals=[(dtrain, "tr")],
        early_stopping_rounds=EARLY_STOPPING_ROUNDS,
        verbose_eval=False,
    )
    best = getattr(booster, "best_iteration", None)
    rng = (0, best + 1) if best is not None else (0, 0)
    return booster.predict(xgb.DMatrix(x_all), iteration_range=rng)


def xgb_trace(
    features: np.ndarray,
    times_ms: np.ndarray,
    budget: int,
    seed: int,
    init: int = 8,
    batch: int = 4,
) -> list[int]:
    """Config indices in the order MetaSchedule's XGBoost recipe measures them.

    `features[i]`: config i's representation; `times_ms[i]`: its time, NaN if it failed.
    Measures `init` random configs, then repeatedly trains on all measurements so far
    and measures the `batch` unmeasured configs the model ranks highest (5% of picks at
    random, MetaSchedule's eps-greedy share), until `budget` configs are measured.
    """
    x = np.asarray(features, dtype=np.float32)
    times = np.asarray(times_ms, dtype=float)
    n = x.shape[0]
    budget = min(budget, n)
    rng = np.random.default_rng(seed)
    order = list(rng.permutation(n)[: min(init, budget)])
    measured = np.zeros(n, dtype=bool)
    measured[order] = True
    chosen_by_model = 0
    while len(order) < budget:
        take = min(batch, budget - len(order))
        idx = np.asarray(order)
        cost = np.where(np.isnan(times[idx]), FAILED_COST, times[idx])
        y = (cost.min() / cost).astype(np.float32)
        unmeasured = np.nonzero(~measured)[0]
        n_rand = int(EPS_GREEDY * (chosen_by_model + take)) - int(EPS_GREEDY * chosen_by_model)
        picks: list[int] = []
        if take - n_rand > 0:
            if np.all(y == y[0]):  # nothing to learn from (e.g. all failed): random
                scores = rng.random(unmeasured.size)
            else:
                scores = _fit_predict(x[idx], y, x[unmeasured], seed)
            # ties broken at random so equal predictions do not follow config order
            tie = rng.random(unmeasured.size)
            best = np.lexsort((tie, -scores))[: take - n_rand]
            picks = [int(i) for i in unmeasured[best]]
        if n_rand:
            rest = np.setdiff1d(unmeasured, picks, assume_unique=True)
            picks += [int(i) for i in rng.choice(rest, size=n_rand, replace=False)]
        chosen_by_model += take
        order += picks
        measured[picks] = True
    return [int(i) for i in order]
