"""bench/federation/federation_helps.py on a tiny synthetic fleet: the real federation, in
seconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.node_state import NodeState
from agent.store import Store
from bench import reporting
from bench.federation import federation_helps as fh
from schemas import BadInputError
from server.registry import Registry, arrays_from_bytes
from simoe_model.model import shared_arrays


@pytest.fixture(scope="module")
def fleet() -> dict[str, fh.FleetGPU]:
    return fh.synthetic_gpus(4, 6, 16)


@pytest.fixture(scope="module")
def run(fleet, tmp_path_factory: pytest.TempPathFactory) -> tuple[fh.FederationHelpsReport, Path]:
    work = tmp_path_factory.mktemp("federation_helps")
    names = list(fleet)
    settings = fh.FederationHelpsSettings(
        rounds=2,
        epochs=1,
        k_experts=2,
        held_out_fraction=1 / 3,
        offline={names[3]: 0.5},
        central_epochs=1,
        similarity_steps=10,  # the server's fit on (off by default), so its path runs too
        command="python -m bench.federation.federation_helps --synthetic",
        data="synthetic",
    )
    report = fh.run_federation_helps(
        [fleet[n] for n in names[:3]], [fleet[names[3]]], work, settings, seed=0
    )
    return report, work


def test_nodes_are_scored_on_tasks_they_never_trained_on(run, fleet) -> None:
    report, work = run
    assert [r.gpu for r in report.nodes] == list(fleet)[:3]
    for row in report.nodes:
        assert (row.train_tasks, row.held_out_tasks) == (4, 2)
        assert 0 < row.own_only_top1 <= 1 and 0 < row.federated_top1 <= 1
        assert len(row.experts) == 2 and row.gpu not in row.experts
        train, held = fh.split_tasks(fleet[row.gpu], 1 / 3, 0, same_split=False)
        with Store(work / "nodes" / row.gpu / "store.sqlite") as store:
            stored = {r.task_name for r in store.records()}
        assert stored == {t.task_name for t in train}
        assert not stored & {t.task_name for t in held}
    # each node draws its own split unless told otherwise
    splits = {
        frozenset(t.task_name for t in fh.split_tasks(fleet[r.gpu], 1 / 3, 0, False)[1])
        for r in report.nodes
    }
    assert len(splits) > 1
    shared = {
        frozenset(t.task_name for t in fh.split_tasks(fleet[r.gpu], 1 / 3, 0, True)[1])
        for r in report.nodes
    }
    assert len(shared) == 1


def test_node_tunes_with_the_global_shared_parts_it_was_sent(run) -> None:
    """After a round with delivered experts, model.pt holds the global it received."""
    report, work = run
    with Registry(work / "server" / "registry.sqlite") as registry:
        versions = {
            r["version"]: arrays_from_bytes(r["weights"])
            for r in registry.db["model_versions"].rows
        }
    sent = versions[max(versions) - 1]  # the last round was sent the version before its own
    for row in report.nodes:
        saved = shared_arrays(NodeState(work / "nodes" / row.gpu).load_model())
        assert saved.keys() == sent.keys()
        assert all(np.array_equal(saved[k], sent[k]) for k in sent)


def test_newcomer_is_served_zero_shot(run, fleet) -> None:
    report, work = run
    [newcomer] = report.newcomers
    assert newcomer.gpu == list(fleet)[3]
    assert len(newcomer.experts) == 2 and 0 < newcomer.zero_shot_top1 <= 1
    assert newcomer.offline_top1 == 0.5 and report.offline_zero_shot_top1 == 0.5
    assert newcomer.central_top1 is not None and 0 < newcomer.central_top1 <= 1
    model = NodeState(work / "newcomers" / newcomer.gpu).load_model()
    assert sorted(model.expert_names) == sorted(newcomer.experts)  # no expert of its own
    assert newcomer.gpu in report.bytes_per_node_last_round


def test_own_only_model_is_reproducible(fleet) -> None:
    gpu = fleet[list(fleet)[0]]
    train, held = fh.split_tasks(gpu, 1 / 3, 0, False)
    scores = [
        fh.top1(fh.own_only_model(gpu, train, 2, 1, 0), held, gpu.dataset.hardware_vector)
        for _ in range(2)
    ]
    assert scores[0] == scores[1]


def test_report_files_are_labelled_and_hold_no_local_paths(run, tmp_path: Path) -> None:
    report, _ = run
    fh.write_report(report, tmp_path, "fh")
    data = json.loads((tmp_path / "fh.json").read_text())
    assert data["simulated"] is True
    assert fh.FederationHelpsReport.model_validate(data) == report
    text = (tmp_path / "fh.md").read_text()
    assert "SIMULATED" in text and report.command in text and "load average" in text
    assert "Federated better on" in text and "within 0.03" in text
    assert "central, same data" in text and report.central_epochs == 1
    command = reporting.public_command(
        "federation.federation_helps", ["--data", "/x/d1", "/x/d2", "--rounds", "3", "--work", "/y"]
    )
    assert (
        command
        == "python -m bench.federation.federation_helps --data DIR DIR2 --rounds 3 --work WORK"
    )


def test_bad_settings_are_bad_input(fleet, tmp_path: Path) -> None:
    gpus = list(fleet.values())
    two_rounds = fh.FederationHelpsSettings(rounds=2)
    with pytest.raises(BadInputError, match="newcomers must not be nodes"):
        fh.run_federation_helps(gpus[:2], gpus[1:2], tmp_path, two_rounds)
    with pytest.raises(BadInputError, match="at least 2"):
        fh.run_federation_helps(gpus[:2], [], tmp_path, fh.FederationHelpsSettings(rounds=1))
    with pytest.raises(BadInputError, match="--epochs"):  # the server's settings: one line
        fh.run_federation_helps(gpus[:2], [], tmp_path, two_rounds.model_copy(update={"epochs": 0}))


def test_seeds_summary_pairs_units_and_judges_the_gap(run) -> None:
    """Over seeds: each unit's seed mean, the paired difference and the 0.03 gap goal."""
    from bench.federation.federation_report import FederationHelpsSeeds, markdown_seeds, summary

    report, _ = run

    def shifted(seed: int, node_gain: float, gap: float) -> fh.FederationHelpsReport:
        nodes = [
            r.model_copy(update={"federated_top1": r.own_only_top1 + node_gain})
            for r in report.nodes
        ]
        newcomers = [
            r.model_copy(update={"central_top1": r.zero_shot_top1 + gap}) for r in report.newcomers
        ]
        return report.model_copy(update={"seed": seed, "nodes": nodes, "newcomers": newcomers})

    seeds = FederationHelpsSeeds(command="c", runs=[shifted(0, 0.01, 0.02), shifted(1, 0.03, 0.06)])
    s = summary(seeds)
    assert s["seeds"] == [0, 1] and s["nodes"] == 3 and s["nodes_better"] == 3
    mean, low, high = s["node_difference"]
    assert (
        mean == pytest.approx(0.02) and low == pytest.approx(0.02) and high == pytest.approx(0.02)
    )
    assert s["node_difference_per_seed"] == pytest.approx([0.01, 0.03])
    assert s["newcomer_gap"][0] == pytest.approx(0.04) and s["goal_met"] is False
    assert s["newcomer_gap_per_seed"] == pytest.approx([0.02, 0.06])
    text = markdown_seeds(seeds)
    assert "MISSED" in text and "SIMULATED" in text and "seeds [0, 1]" in text
    assert summary(FederationHelpsSeeds(command="c", runs=[shifted(0, 0.0, 0.01)]))["goal_met"]


def test_similarity_steps_option_reaches_the_server_and_the_report(run, fleet) -> None:
    """--similarity-steps is the deployment's own option: it sets the strategy's fit steps (0:
    the fit is off) and the report records it."""
    from server.aggregation import make_strategy

    report, _ = run
    assert fh.FederationHelpsSettings().similarity_steps == 0  # the bench's own default: off
    assert report.similarity_steps == 10  # the fixture turns it on
    off = fh.FederationHelpsSettings(rounds=2, similarity_steps=0).server_config(seed=0)
    on = fh.FederationHelpsSettings(rounds=2, similarity_steps=7).server_config(seed=0)
    assert (off.similarity_steps, on.similarity_steps) == (0, 7)
    strategy = make_strategy(off, registry=None, similarity=lambda *_: {})
    assert strategy.similarity_fit is None and strategy.similarity_steps == 0
    strategy = make_strategy(on, registry=None, similarity=lambda *_: {})
    assert strategy.similarity_fit is not None and strategy.similarity_steps == 7
    with pytest.raises(BadInputError, match="--similarity-steps"):
        fh.FederationHelpsSettings(rounds=2, similarity_steps=-1).server_config(seed=0)


def test_newcomer_similarity_is_ranked_against_measured_agreement(run, fleet) -> None:
    """Per newcomer: the model's cos(z) to each node against the nodes' measured agreement
    with it (mean per-task Spearman on shared candidates); their Spearman over the nodes."""
    from bench.federation.federation_baselines import similarity_against_agreement
    from bench.transfer.protocol_similarity import measured_agreements

    report, _ = run
    names = list(fleet)
    [row] = report.newcomers
    assert set(row.similarity_to_nodes) == set(names[:3])
    measured = measured_agreements([fleet[names[3]].dataset], [fleet[n].dataset for n in names[:3]])
    assert list(measured[fleet[names[3]].dataset.device].values()) == pytest.approx(
        [row.agreement_with_nodes[n] for n in names[:3]]
    )
    assert -1 <= row.similarity_rank_correlation <= 1

    class Follows:  # a similarity that orders the nodes as their agreement does, or reversed
        def __init__(self, sign: float) -> None:
            self.sign = sign

        def similarity(self, _h_a: np.ndarray, h_b: np.ndarray) -> float:
            node = next(n for n in names[:3] if fleet[n].dataset.hardware_vector is h_b)
            return self.sign * row.agreement_with_nodes[node]

    nodes = [fleet[n] for n in names[:3]]
    follows = similarity_against_agreement(Follows(1.0), fleet[names[3]], nodes)
    reverse = similarity_against_agreement(Follows(-1.0), fleet[names[3]], nodes)
    assert follows["similarity_rank_correlation"] == pytest.approx(1.0)
    assert reverse["similarity_rank_correlation"] == pytest.approx(-1.0)
    too_few = similarity_against_agreement(Follows(1.0), fleet[names[3]], nodes[:2])
    assert too_few["similarity_rank_correlation"] is None


def test_seeds_summary_reports_the_similarity_goal(run) -> None:
    """Over seeds: the mean rank correlation over newcomers, its interval and the 0.7 goal;
    the variants table says which fleet and similarity fit each row ran with."""
    from bench.federation.federation_report import (
        FederationHelpsSeeds,
        markdown_seeds,
        summary,
        variants_markdown,
    )

    report, _ = run

    def with_rho(seed: int, rho: float, steps: int | None) -> fh.FederationHelpsReport:
        newcomers = [
            r.model_copy(update={"similarity_rank_correlation": rho}) for r in report.newcomers
        ]
        return report.model_copy(
            update={"seed": seed, "newcomers": newcomers, "similarity_steps": steps}
        )

    seeds = FederationHelpsSeeds(command="c", runs=[with_rho(0, 0.6, 10), with_rho(1, 0.9, 10)])
    s = summary(seeds)
    assert s["similarity_rank_correlation"][0] == pytest.approx(0.75)
    assert s["similarity_rank_correlation_per_seed"] == pytest.approx([0.6, 0.9])
    assert "at least 0.7: met" in markdown_seeds(seeds)
    low = FederationHelpsSeeds(command="c", runs=[with_rho(0, 0.5, 0)])
    assert "at least 0.7: MISSED" in markdown_seeds(low)
    old = FederationHelpsSeeds(command="c", runs=[with_rho(0, 0.5, None)])
    old.runs[0].newcomers[0].similarity_rank_correlation = None
    table = variants_markdown({"new": seeds, "off": low, "old": old})
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| ")}
    assert "| 10 steps |" in rows["| new"] and "| off |" in rows["| off"]
    assert "| none (the run predates" in rows["| old"] and "| not recorded |" in rows["| old"]


def _variant_of(report: fh.FederationHelpsReport):  # noqa: ANN202
    """A variant's report over seeds made from `report`: its nodes gain `node_gain` over
    own-only, its newcomers trail central by `gap`, over `rounds` rounds."""
    from bench.federation.federation_report import FederationHelpsSeeds

    def variant(node_gain: float, gap: float, rounds: int = 2) -> FederationHelpsSeeds:
        nodes = [
            r.model_copy(update={"federated_top1": r.own_only_top1 + node_gain})
            for r in report.nodes
        ]
        newcomers = [
            r.model_copy(update={"central_top1": r.zero_shot_top1 + gap}) for r in report.newcomers
        ]
        one = report.model_copy(update={"nodes": nodes, "newcomers": newcomers, "rounds": rounds})
        return FederationHelpsSeeds(command="c", runs=[one])

    return variant


def test_the_variant_rule_prefers_the_smallest_gap_among_gaining_nodes(run) -> None:
    """FEDERATION_VARIANT_RULE: smallest newcomer gap among variants whose nodes gain; if no
    variant's nodes gain, the largest node difference; ties to the fewer epochs."""
    from bench.federation.federation_report import choose_variant

    variant = _variant_of(run[0])

    gaining = {"small_gap_loses": variant(-0.01, 0.01), "gains": variant(0.02, 0.05),
               "gains_smaller_gap": variant(0.01, 0.04)}  # fmt: skip
    assert choose_variant(gaining) == "gains_smaller_gap"
    losing = {"a": variant(-0.05, 0.01), "b": variant(-0.02, 0.09), "c": variant(-0.03, 0.0)}
    assert choose_variant(losing) == "b"
    tie = {"long": variant(0.01, 0.04, rounds=4), "short": variant(0.01, 0.04, rounds=2)}
    assert choose_variant(tie) == "short"


def test_the_third_round_rule_keeps_nodes_within_a_loss_and_takes_the_smallest_gap(run) -> None:
    """FEDERATION_VARIANT_RULE_R3: among the listed variants that were run, those whose nodes
    lose at most the allowed amount; the smallest gap to 3 decimals; ties to the fewer epochs,
    then to the earlier listed; none qualifying: None."""
    from bench.federation.federation_report import choose_variant_r3

    variant = _variant_of(run[0])

    reports = {"incumbent": variant(0.002, 0.05), "new": variant(-0.008, 0.03),
               "lossy": variant(-0.02, 0.0), "other_round": variant(0.1, 0.0)}  # fmt: skip
    among = ["new", "lossy", "not_run", "incumbent"]
    assert choose_variant_r3(reports, among, 0.01) == "new"
    assert choose_variant_r3(reports, among, 0.05) == "lossy"
    tied = {"new": variant(0.0, 0.0501, rounds=4), "incumbent": variant(0.0, 0.0499)}
    assert choose_variant_r3(tied, ["new", "incumbent"], 0.01) == "incumbent"  # fewer epochs
    same = {"new": variant(0.0, 0.04), "incumbent": variant(0.0, 0.04)}
    assert choose_variant_r3(same, ["incumbent", "new"], 0.01) == "incumbent"  # listed first
    assert choose_variant_r3({"lossy": variant(-0.5, 0.0)}, ["lossy"], 0.01) is None


def test_node_diagnosis_scores_each_node_four_ways(fleet, tmp_path: Path) -> None:
    """federation_node_diagnose: the mixture is what federation_helps scores, own-only at the
    chosen budget is its baseline, and the equal-effort own-only is the federation's epochs."""
    from bench.federation.federation_node_diagnose import node_diagnosis

    gpus = list(fleet.values())[:3]
    settings = fh.FederationHelpsSettings(rounds=2, epochs=1, k_experts=1, own_only_epochs=3)
    rows = node_diagnosis(gpus, settings, 0, tmp_path)
    report = fh.run_federation_helps(gpus, [], tmp_path / "again", settings, seed=0)
    for gpu, row in zip(gpus, report.nodes, strict=True):
        got = rows[gpu.name]
        assert got["mixture"] == pytest.approx(row.federated_top1)
        assert got["own_only_chosen"] == pytest.approx(row.own_only_top1)
        train, held = fh.split_tasks(gpu, 1 / 3, 0, False)
        equal = fh.top1(fh.own_only_model(gpu, train, 2, 1, 0), held, gpu.dataset.hardware_vector)
        assert got["own_only_equal"] == pytest.approx(equal)
        assert 0 < got["own_expert"] <= 1


def test_node_diagnosis_personal_fine_tune_is_what_the_deployment_does(
    fleet, tmp_path: Path
) -> None:
    """--personal E in the diagnosis scores the same model as the deployment's option
    (personal_epochs: the node's ClientApp fine-tunes in the last round); the head-only
    fine-tune is scored beside it."""
    from bench.federation.federation_node_diagnose import node_diagnosis

    gpus = list(fleet.values())[:3]
    settings = fh.FederationHelpsSettings(rounds=2, epochs=1, k_experts=1, own_only_epochs=3)
    rows = node_diagnosis(gpus, settings, 0, tmp_path, personal=(2,))
    asked = settings.model_copy(update={"personal_epochs": 2})
    report = fh.run_federation_helps(gpus, [], tmp_path / "again", asked, seed=0)
    for gpu, row in zip(gpus, report.nodes, strict=True):
        assert rows[gpu.name]["personal_2"] == pytest.approx(row.federated_top1)
        assert rows[gpu.name]["mixture"] == pytest.approx(row.federated_global_top1)
        assert 0 < rows[gpu.name]["personal_head_2"] <= 1


def test_node_diagnosis_summary_pairs_nodes_over_seeds(tmp_path: Path) -> None:
    from bench.federation.federation_node_diagnose import summary

    for seed, gain in [(0, 0.1), (1, 0.3)]:
        nodes = {
            name: {
                "mixture": 0.5 + gain,
                "own_expert": 0.5,
                "own_only_chosen": 0.9,
                "own_only_equal": 0.5,
            }  # fmt: skip
            for name in ("a100-sxm4-400w", "4090-ref")
        }
        (tmp_path / f"federation_node_diagnose_s{seed}.json").write_text(
            json.dumps({"seed": seed, "nodes": nodes})
        )
    lines = summary(tmp_path)
    assert "seeds [0, 1], 2 nodes" in lines[0] and "mixture 0.700" in lines[0]
    assert lines[1].startswith("mixture - own_only_equal: +0.200 [+0.200, +0.200], better on 2")
    assert lines[2].startswith("mixture - own_only_chosen: -0.200")
    with pytest.raises(BadInputError, match="no federation_node_diagnose"):
        summary(tmp_path / "empty")


def test_personal_epochs_score_what_the_node_tunes_with(run, fleet, tmp_path: Path) -> None:
    """--personal-epochs is the deployment's option: the server asks for the fine-tune, the
    node keeps personal.pt, and the node is scored with it (the averaged model's score and
    both CPU costs beside it); the variant rule counts its epochs."""
    from bench.federation.federation_report import FederationHelpsSeeds, choose_variant

    names = list(fleet)
    settings = fh.FederationHelpsSettings(
        rounds=2, epochs=1, k_experts=2, personal_epochs=2, central_epochs=0
    )
    assert settings.server_config(seed=0).personal_epochs == 2
    report = fh.run_federation_helps([fleet[n] for n in names[:3]], [], tmp_path, settings)
    assert report.personal_epochs == 2
    for row in report.nodes:
        node = NodeState(tmp_path / "nodes" / row.gpu)
        personal = node.load_personal_model()
        assert personal is not None and node.federation_state().personal_epochs == 2
        _, held = fh.split_tasks(fleet[row.gpu], 1 / 3, 0, same_split=False)
        hv = fleet[row.gpu].dataset.hardware_vector
        assert row.federated_top1 == fh.top1(personal, held, hv)
        assert row.federated_global_top1 == fh.top1(node.load_model(), held, hv)
        assert row.personal_cpu_s is not None and row.personal_cpu_s > 0
        assert row.own_only_cpu_s is not None and row.own_only_cpu_s > 0
    report = report.model_copy(update={"newcomers": run[0].newcomers})  # a gap to compare
    plain = report.model_copy(update={"personal_epochs": 0, "rounds": 3})
    tie = {"personal": FederationHelpsSeeds(command="c", runs=[report]),
           "plain": FederationHelpsSeeds(command="c", runs=[plain])}  # fmt: skip
    assert choose_variant(tie) == "plain"  # 3 x 1 epochs against 2 x 1 + 2 personal
    assert "personal fine-tune" in fh.markdown_seeds(tie["personal"])


def test_probe_options_reach_the_server_and_the_report(fleet, tmp_path: Path) -> None:
    """--distill-steps and --similarity-source probes: the bench writes its public probe set
    (features of each task's candidates, no latency), the server fits the similarity on the
    experts' probe agreements (every ordered node pair, not only the pairs nodes reported) and
    the report records both settings."""
    names = list(fleet)
    settings = fh.FederationHelpsSettings(
        rounds=2, epochs=1, k_experts=1, similarity_steps=5, similarity_source="probes",
        distill_steps=3, command="python -m bench.federation.federation_helps --synthetic",
        data="synthetic",
    )  # fmt: skip
    assert settings.needs_probes and not fh.FederationHelpsSettings().needs_probes
    report = fh.run_federation_helps(
        [fleet[n] for n in names[:3]], [fleet[names[3]]], tmp_path, settings, seed=0
    )
    assert (report.distill_steps, report.similarity_source) == (3, "probes")
    probes = np.load(tmp_path / "probes.npz")
    assert sorted(probes.files) == sorted(
        f"{kind}_{i}" for kind in ("rows", "offsets") for i in range(len(probes.files) // 2)
    )
    with Registry(tmp_path / "server" / "registry.sqlite") as registry:
        fits = registry.similarity_fits()
    assert fits and all(fit.pairs == 3 * 2 for fit in fits.values())  # k = 1 reports 3
    assert "+ distil 3" in fh.variants_markdown(
        {"x": fh.FederationHelpsSeeds(command="c", runs=[report])}
    )


def test_an_external_probe_file_is_what_the_server_reads(fleet, tmp_path: Path) -> None:
    """--probe-file: the server fits the similarity on that file's probes (the bench writes
    none of its own), the report names the file and its sha256; a missing file, or one no
    option would read, is one line before anything runs. With --teacher-epochs and
    --teacher-distill-steps the nodes send their teachers' scores on those probes (each
    keeps teacher.pt) and the report and the variants table say so."""
    import hashlib

    from simoe_model.features import FEATURE_DIM
    from simoe_model.probe_file import save_probes

    rng = np.random.default_rng(0)
    external = tmp_path / "suite.npz"
    save_probes(external, [(rng.normal(size=(12, FEATURE_DIM)), np.arange(0, 13, 2))] * 2)
    sha = fh.probe_file_digest(str(external), 0, "probes")
    assert sha == hashlib.sha256(external.read_bytes()).hexdigest()
    names = list(fleet)
    settings = fh.FederationHelpsSettings(
        rounds=2, epochs=1, k_experts=1, similarity_steps=5, similarity_source="probes",
        probe_file=str(external), probe_file_sha256=sha, command="c", data="synthetic",
        teacher_epochs=1, teacher_distill_steps=2,
    )  # fmt: skip
    work = tmp_path / "work"
    report = fh.run_federation_helps(
        [fleet[n] for n in names[:3]], [fleet[names[3]]], work, settings, seed=0
    )
    assert not (work / "probes.npz").exists()  # the bench's own probe set was not written
    assert (report.probe_file, report.probe_file_sha256) == (str(external), sha)
    assert (report.teacher_epochs, report.teacher_distill_steps) == (1, 2)
    assert all((work / "nodes" / n / "federation" / "teacher.pt").exists() for n in names[:3])
    with Registry(work / "server" / "registry.sqlite") as registry:
        assert registry.similarity_fits()
    table = fh.variants_markdown({"x": fh.FederationHelpsSeeds(command="c", runs=[report])})
    assert f"suite.npz, sha256 {sha[:8]}" in table and "teachers 1 ep/round, distil 2" in table
    with pytest.raises(BadInputError, match="does not exist"):
        fh.probe_file_digest(str(tmp_path / "missing.npz"), 0, "probes")
    with pytest.raises(BadInputError, match="read only with"):
        fh.probe_file_digest(str(external), 0, "reported")


def test_newcomers_get_a_copy_distilled_toward_the_teachers(fleet, tmp_path: Path) -> None:
    """--newcomer-distill-steps: the newcomer (no records of its own) is served the global with
    its program encoder distilled toward the nodes' teacher scores; its hardware encoder and
    gate are the global's, and the average the nodes train on is bit for bit what it is
    without the option (the same run, off). With --newcomer-teachers sent the copy follows
    only the teachers of the experts the newcomer is sent: another copy, the same average."""
    from simoe_model.features import FEATURE_DIM
    from simoe_model.probe_file import save_probes

    rng = np.random.default_rng(0)
    probes = tmp_path / "suite.npz"
    save_probes(probes, [(rng.normal(size=(12, FEATURE_DIM)), np.arange(0, 13, 2))] * 2)
    names = list(fleet)
    runs = {}
    for steps, teachers in ((0, "all"), (30, "all"), (30, "sent")):
        settings = fh.FederationHelpsSettings(
            rounds=2, epochs=1, k_experts=2, similarity_steps=5, similarity_source="probes",
            probe_file=str(probes), command="c", data="synthetic", teacher_epochs=1,
            newcomer_distill_steps=steps, newcomer_teachers=teachers,
        )  # fmt: skip
        work = tmp_path / f"steps{steps}{teachers}"
        report = fh.run_federation_helps(
            [fleet[n] for n in names[:3]], [fleet[names[3]]], work, settings, seed=0
        )
        with Registry(work / "server" / "registry.sqlite") as registry:
            globals_ = [arrays_from_bytes(r["weights"]) for r in registry.db["model_versions"].rows]
        newcomer = shared_arrays(NodeState(work / "newcomers" / names[3]).load_model())
        runs[steps, teachers] = (report, globals_, newcomer)
    (off, globals_off, plain), (on, globals_on, distilled) = runs[0, "all"], runs[30, "all"]
    sent_report, globals_sent, sent_copy = runs[30, "sent"]
    assert on.newcomer_distill_steps == 30 and off.newcomer_distill_steps == 0
    assert len(globals_on) == len(globals_off)
    for a, b, c in zip(globals_on, globals_off, globals_sent, strict=True):  # untouched
        assert all(np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k]) for k in a)
    sent = globals_on[-2]  # the last round was sent the version before its own
    assert all(np.array_equal(plain[k], sent[k]) for k in sent)  # off: the global itself
    moved = {k for k in sent if not np.array_equal(distilled[k], sent[k])}
    assert moved and all(k.startswith("program_encoder.") for k in moved)
    other = {k for k in sent if not np.array_equal(sent_copy[k], distilled[k])}
    assert other and all(k.startswith("program_encoder.") for k in other)  # 2 of 3 teachers
    assert "toward the sent experts' teachers" in fh.variants_markdown(
        {"x": fh.FederationHelpsSeeds(command="c", runs=[sent_report])}
    )
    table = fh.variants_markdown({"x": fh.FederationHelpsSeeds(command="c", runs=[on])})
    assert "newcomers' copy distilled 30" in table

    # the teachers outlive the server: a strategy built anew on the run's registry holds each
    # node's latest teacher (its expert as the registry keeps it) and serves a copy before
    # any round; on an empty registry it has none to serve
    from server.aggregation import make_strategy
    from server.round_outcome import RoundInputs
    from server.similarity import model_similarity

    settings = fh.FederationHelpsSettings(
        rounds=2, epochs=1, k_experts=2, similarity_steps=5, similarity_source="probes",
        probe_file=str(probes), teacher_epochs=1, newcomer_distill_steps=30,
    )  # fmt: skip
    inputs = RoundInputs(server_round=3, arrays=globals_on[-1], node_ids=[])
    for path, held in ((tmp_path / "steps30all", names[:3]), (tmp_path / "empty", [])):
        path.mkdir(exist_ok=True)
        with Registry(path / "server" / "registry.sqlite") as registry:
            restarted = make_strategy(
                settings.server_config(0, str(probes)), registry, model_similarity
            )
            assert sorted(restarted._teachers) == sorted(held)
            for name in held:
                expert, scores = restarted._teachers[name]
                kept = registry.expert(name)
                assert all(np.array_equal(expert[k], kept[k]) for k in kept)
                assert [s.shape for s in scores] == [(6,), (6,)]  # one per probe program
            copy = restarted.newcomer_arrays(inputs, len(globals_on))
            assert (copy is not None) == bool(held)
            if held:
                registry.drop_node(registry.node_by_name(names[0])["node_key"])
                assert names[0] not in registry.teachers(restarted.probe_digest())
