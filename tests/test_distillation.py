"""Server-side distillation on public probes (server/distillation.py) and the strategy's use
of it: the averaged encoder moves toward the nodes' own, only the program encoder changes,
probe agreements follow how alike experts rank, a bad probe file is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import BadInputError
from server.distillation import distill_shared, expert_scores, probe_agreements
from server.registry import Registry
from server.round_outcome import RoundOutcome
from server.run_config import ServerRunConfig
from simoe_model.features import FEATURE_DIM
from simoe_model.model import Expert, SiMoE, SiMoEConfig, shared_arrays
from simoe_model.probe_file import load_probes, save_probes


def probe_file(path: Path, tasks: int = 3, per_task: int = 8, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = [rng.normal(size=(per_task * 2, FEATURE_DIM)) for _ in range(tasks)]
    save_probes(path, [(r, np.arange(0, per_task * 2 + 1, 2)) for r in rows])
    return path


def model_arrays(seed: int) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return shared_arrays(SiMoE())


def expert(seed: int) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return {k: v.numpy().copy() for k, v in Expert(SiMoEConfig()).state_dict().items()}


def encoder_keys(arrays: dict[str, np.ndarray]) -> list[str]:
    return [k for k in arrays if k.startswith("program_encoder.") and ".norm." not in k]


def test_distillation_moves_only_the_program_encoder_toward_the_teachers(
    tmp_path: Path,
) -> None:
    probes = load_probes(probe_file(tmp_path / "p.npz"))
    average = model_arrays(0)
    teachers = [(model_arrays(s), expert(10 + s)) for s in (1, 2, 3)]
    arrays, before, after = distill_shared(average, teachers, probes, steps=40, seed=0)
    assert after < 0.8 * before  # the teachers' scores are followed more closely
    changed = {k for k in arrays if not np.array_equal(arrays[k], average[k])}
    assert changed and changed <= set(encoder_keys(average))  # hardware encoder, gate as averaged
    again, _, _ = distill_shared(average, teachers, probes, steps=40, seed=0)
    assert all(np.array_equal(again[k], arrays[k]) for k in arrays)  # deterministic
    same, b0, a0 = distill_shared(average, teachers, probes, steps=0, seed=0)
    assert all(np.array_equal(same[k], average[k]) for k in average) and np.isnan(b0 + a0)


def test_probe_agreements_say_how_alike_two_experts_rank_the_probes(tmp_path: Path) -> None:
    probes = load_probes(probe_file(tmp_path / "p.npz"))
    arrays = model_arrays(0)
    first = expert(1)
    flipped = {k: v.copy() for k, v in first.items()}
    flipped["head.2.weight"] = -flipped["head.2.weight"]  # the reverse order on every task
    pairs = probe_agreements(arrays, {"a": first, "b": dict(first), "c": flipped}, probes)
    value = {(a, b): v for a, b, v in pairs}
    assert value[("a", "b")] == pytest.approx(1.0) and value[("b", "a")] == pytest.approx(1.0)
    assert value[("a", "c")] == pytest.approx(-1.0)
    scores = expert_scores(arrays, {"a": first}, probes)
    assert [len(s) for s in scores["a"]] == [8, 8, 8]


@pytest.mark.filterwarnings("ignore:An input array is constant")
@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(2, 6),
    candidates=st.integers(2, 9),
    levels=st.integers(1, 4),  # few levels: ties, and now and then a constant row
    seed=st.integers(0, 2**16),
)
def test_the_spearman_matrix_is_scipys_spearman_of_every_pair(
    rows: int, candidates: int, levels: int, seed: int
) -> None:
    """probe_agreements ranks all pairs at once (spearman_matrix); each entry must be what
    scipy's spearmanr gives that pair, ties and constant rows (NaN) included."""
    from scipy.stats import spearmanr

    from server.distillation import spearman_matrix

    scores = np.random.default_rng(seed).integers(0, levels, size=(rows, candidates))
    matrix = spearman_matrix(scores.astype(np.float32))
    for i in range(rows):
        for j in range(rows):
            with np.errstate(invalid="ignore", divide="ignore"):
                expected = float(spearmanr(scores[i], scores[j]).statistic)
            if np.isnan(expected):
                assert np.isnan(matrix[i, j])
            else:
                assert matrix[i, j] == pytest.approx(expected, abs=1e-9)


def test_a_bad_probe_file_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        load_probes(tmp_path / "none.npz")
    (tmp_path / "junk.npz").write_text("not an npz")
    with pytest.raises(BadInputError, match="not an .npz"):
        load_probes(tmp_path / "junk.npz")
    np.savez(tmp_path / "narrow.npz", rows_0=np.zeros((4, 3)), offsets_0=np.array([0, 2, 4]))
    with pytest.raises(BadInputError, match="needs rows"):
        load_probes(tmp_path / "narrow.npz")
    np.savez(tmp_path / "empty.npz", other=np.zeros(2))
    with pytest.raises(BadInputError, match="no probe task"):
        load_probes(tmp_path / "empty.npz")


def test_the_strategy_distils_the_average_only_when_asked(tmp_path: Path) -> None:
    from server.aggregation import make_strategy
    from server.similarity import model_similarity

    probes = str(probe_file(tmp_path / "p.npz"))
    teachers = [(model_arrays(s), expert(10 + s)) for s in (1, 2)]
    with Registry(tmp_path / "registry.sqlite") as registry:
        off = make_strategy(ServerRunConfig(), registry, model_similarity)
        on = make_strategy(
            ServerRunConfig(probes=probes, distill_steps=5), registry, model_similarity
        )
        results = []
        for strategy in (off, on):
            outcome = RoundOutcome(round=1, sampled=[], delivered={})
            outcome.aggregated = model_arrays(0)
            strategy.distill(outcome, teachers)
            results.append(outcome.aggregated)
    key = encoder_keys(results[0])[0]
    assert np.array_equal(results[0][key], model_arrays(0)[key])  # off: the average stands
    assert not np.array_equal(results[1][key], model_arrays(0)[key])
    with pytest.raises(ValueError, match="--distill-steps and --teacher-epochs need probes"):
        from server.strategy import SiMoEStrategy

        SiMoEStrategy(registry, model_similarity, distill_steps=5)


def test_distillation_toward_given_scores_follows_them(tmp_path: Path) -> None:
    """distill_to_scores: teachers given as scores (a node's teacher model the server never
    sees), each read through the node's expert on the average: the encoder moves until the
    experts order the probes as the scores do; only the program encoder changes."""
    from scipy.stats import spearmanr

    from server.distillation import distill_to_scores

    probes = load_probes(probe_file(tmp_path / "p.npz"))
    average = model_arrays(0)
    heads = [expert(10 + s) for s in (1, 2)]
    rng = np.random.default_rng(0)
    targets = [[rng.normal(size=t.n).astype(np.float32) for t in probes] for _ in heads]

    def agreement(arrays: dict[str, np.ndarray]) -> float:
        scores = expert_scores(arrays, {f"h{i}": h for i, h in enumerate(heads)}, probes)
        return float(
            np.mean(
                [
                    spearmanr(s, t).statistic
                    for i in range(len(heads))
                    for s, t in zip(scores[f"h{i}"], targets[i], strict=True)
                ]
            )
        )

    arrays, before, after = distill_to_scores(
        average, list(zip(heads, targets, strict=True)), probes, steps=150, seed=0, lr=1e-2
    )
    assert after < 0.5 * before and agreement(arrays) > agreement(average) + 0.2
    changed = {k for k in arrays if not np.array_equal(arrays[k], average[k])}
    assert changed and changed <= set(encoder_keys(average))


def test_wrong_shaped_teacher_scores_reject_the_update_in_one_line(tmp_path: Path) -> None:
    """A reply's probe scores must be one finite float per probe candidate of the probe set
    the server sent (and only when it asked): anything else rejects that node's update."""
    from types import SimpleNamespace

    from flwr.app import MetricRecord, RecordDict

    from schemas.messages import REC_METRICS, REC_OWN_EXPERT, REC_PROBE_SCORES, REC_SHARED
    from schemas.protocol import arrays_to_record
    from server.aggregation import make_strategy
    from server.reply_checks import UpdateRejected
    from server.similarity import model_similarity

    probes = str(probe_file(tmp_path / "p.npz"))  # 3 tasks of 8 candidates
    current = model_arrays(0)

    def reply(scores: dict[str, np.ndarray] | None) -> SimpleNamespace:  # a reply's content
        content = RecordDict(
            {
                REC_SHARED: arrays_to_record(current),
                REC_OWN_EXPERT: arrays_to_record(expert(1)),
                REC_METRICS: MetricRecord({"num-examples": 10.0}),
            }
        )
        if scores is not None:
            content[REC_PROBE_SCORES] = arrays_to_record(scores)
        return SimpleNamespace(content=content)

    good = {f"scores_{i}": np.zeros(8, np.float32) for i in range(3)}
    with Registry(tmp_path / "registry.sqlite") as registry:
        on = make_strategy(
            ServerRunConfig(probes=probes, teacher_epochs=1, teacher_distill_steps=5),
            registry,
            model_similarity,
        )
        off = make_strategy(ServerRunConfig(probes=probes), registry, model_similarity)
        assert on._check_reply(reply(good), current)[0] is not None
        assert on._check_reply(reply(None), current)[0] is not None  # no teacher: no scores
        assert [len(s) for s in on.check_probe_scores(reply(good).content)] == [8, 8, 8]
        bad = [
            ({**good, "scores_1": np.zeros(7, np.float32)}, "shape \\(7,\\), expected \\(8,\\)"),
            ({k: good[k] for k in ("scores_0", "scores_1")}, "not scores_0..2"),
            ({**good, "scores_2": np.full(8, np.nan, np.float32)}, "not finite"),
        ]
        for scores, why in bad:
            with pytest.raises(UpdateRejected, match=why) as caught:
                on._check_reply(reply(scores), current)
            assert "\n" not in str(caught.value)
        with pytest.raises(UpdateRejected, match="did not ask for"):
            off._check_reply(reply(good), current)
        with pytest.raises(ValueError, match="--teacher-epochs need probes"):
            make_strategy(
                ServerRunConfig(teacher_epochs=1, probes="none"), registry, model_similarity
            )
        # it weighs a distillation
        with pytest.raises(ValueError, match="--teacher-balance needs --teacher-distill-steps"):
            make_strategy(
                ServerRunConfig(probes=probes, teacher_epochs=1, teacher_balance=True),
                registry,
                model_similarity,
            )
        # the new global distilled toward the teachers' scores only when asked
        outcome = RoundOutcome(round=1, sampled=[], delivered={})
        outcome.aggregated = dict(current)
        teachers = [(expert(1), [np.arange(8, dtype=np.float32)] * 3)]
        off.distill(outcome, teachers, to_teacher_scores=True)
        assert outcome.aggregated is not None
        key = encoder_keys(current)[0]
        assert np.array_equal(outcome.aggregated[key], current[key])
        on.distill(outcome, teachers, to_teacher_scores=True)
        assert not np.array_equal(outcome.aggregated[key], current[key])


def _expert_on(seed: int, hardware: np.ndarray) -> dict[str, np.ndarray]:
    return {**expert(seed), "hardware": hardware.astype(np.float32)}


def test_balanced_teachers_weigh_a_lone_hardware_as_much_as_a_crowd(tmp_path: Path) -> None:
    """cluster_weights / distill_to_scores(balance=True) (the seventh round's option): three
    teachers on near-equal hardware and one alone; each weighs 1 / its summed positive z-cosine
    (mean 1), so the lone one weighs more than each of the crowd and, distilled, its probe
    order is followed more closely than with all alike."""
    from server.distillation import cluster_weights, distill_to_scores
    from simoe_model.hardware import HARDWARE_DIM

    rng = np.random.default_rng(1)
    crowd = rng.normal(size=HARDWARE_DIM)
    hardware = [crowd + 0.01 * rng.normal(size=HARDWARE_DIM) for _ in range(3)]
    hardware.append(-crowd)  # the lone one, far from the crowd in z
    model = SiMoE()
    load = torch.as_tensor(np.stack(hardware))
    w = cluster_weights(model, list(load))
    assert float(w.mean()) == pytest.approx(1.0)
    assert float(w[3]) > 1.5 * float(w[:3].max())  # the lone one
    assert float(w[:3].max() - w[:3].min()) < 0.1  # the crowd alike

    probes = load_probes(probe_file(tmp_path / "p.npz"))
    average = model_arrays(0)
    heads = [_expert_on(20 + i, h) for i, h in enumerate(hardware)]
    crowd_target = [rng.normal(size=t.n).astype(np.float32) for t in probes]
    lone_target = [rng.normal(size=t.n).astype(np.float32) for t in probes]
    targets = [crowd_target] * 3 + [lone_target]

    def lone_error(balance: bool) -> float:  # the lone teacher's task-centred squared error
        arrays, _, _ = distill_to_scores(
            average, list(zip(heads, targets, strict=True)), probes, steps=20, seed=0,
            lr=1e-2, balance=balance,
        )  # fmt: skip
        scores = expert_scores(arrays, {"lone": heads[3]}, probes)["lone"]
        return float(
            np.mean(
                [
                    np.mean(((s - s.mean()) - (t - t.mean())) ** 2)
                    for s, t in zip(scores, lone_target, strict=True)
                ]
            )
        )

    assert lone_error(True) < 0.9 * lone_error(False)


def test_the_newcomer_copy_cost_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/federation/newcomer_copy_cost.py: one JSON line with its settings and times."""
    import json

    from bench.federation import newcomer_copy_cost

    newcomer_copy_cost.main(["--teachers", "2", "--steps", "2"])
    result = json.loads(capsys.readouterr().out)
    assert (result["teachers"], result["steps"], result["probe_programs"]) == (2, 2, 886)
    assert result["cpu_s"] > 0 and result["wall_s"] > 0


def test_the_newcomer_copy_diagnosis_refuses_a_folder_without_runs(tmp_path: Path) -> None:
    """bench/federation/newcomer_copy_diagnose.py on a folder that is no federation-helps
    --work: one line and a non-zero exit, before any fleet is read."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bench.federation.newcomer_copy_diagnose", "--work",
         str(tmp_path), "--protocol", "test", "--seeds", "0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "no seed0/server/registry.sqlite" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
