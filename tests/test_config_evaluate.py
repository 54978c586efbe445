"""The evaluation's and the solve's test-time settings (`trm_kaggle.config.evaluate`, `trm_kaggle.config.solve`):
a choice of trajectory given with one trajectory is refused, whichever rule it names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trm_kaggle.config import EvaluateConfig, SolveConfig
from trm_kaggle.errors import TRMError

ONE_TRAJECTORY = "needs trajectories of 2 or more: with one, trajectory 0 runs alone and without noise"


@pytest.mark.parametrize("select", ["q_halt", "first_halt"])
def test_a_trajectory_choice_with_one_trajectory_is_refused_whichever_rule_it_names(select):
    """`--trajectory-select q_halt` with one trajectory was taken without a word (q_halt was the default, so an
    explicit one could not be told from none), while first_halt was refused: nothing reads either."""
    for make in (lambda **kw: EvaluateConfig(**kw), lambda **kw: SolveConfig(challenges="c.json", weights="w", **kw)):
        with pytest.raises(ValidationError, match=f"trajectory_select '{select}' {ONE_TRAJECTORY}"):
            make(trajectory_select=select)
        assert make(trajectories=2, trajectory_noise=0.1, trajectory_select=select).trajectory_select == select
    with pytest.raises(TRMError, match=f"trajectory_select '{select}' {ONE_TRAJECTORY}"):
        EvaluateConfig().updated(trajectory_select=select)


def test_without_a_choice_q_halt_answers_and_the_configs_round_trip():
    """No choice is q_halt; a config rebuilt from its own fields (`updated`, `revalidated`) and the solve's
    evaluation settings stay valid with one trajectory."""
    cfg = EvaluateConfig()
    assert cfg.trajectory_select is None and cfg.selection == "q_halt" and not cfg.stops_at_first_halt
    assert cfg.updated(batch_size=8).selection == "q_halt"
    assert EvaluateConfig.model_validate(cfg.model_dump()).trajectory_select is None
    solve = SolveConfig(challenges="c.json", weights="w", seed=3)
    assert solve.evaluation().selection == "q_halt" and solve.evaluation().trajectory_select is None
    chosen = SolveConfig(challenges="c.json", weights="w", trajectories=2, trajectory_noise=0.1,
                         trajectory_select="first_halt").evaluation()
    assert chosen.selection == "first_halt" and chosen.stops_at_first_halt
    assert EvaluateConfig(trajectories=2, trajectory_noise=0.1).selection == "q_halt"


@pytest.mark.parametrize("select", ["q_halt", "first_halt"])
def test_submit_and_evaluate_refuse_a_trajectory_choice_with_one_trajectory_in_the_same_words(tmp_path, capsys,
                                                                                               select):
    """Both commands, before any work: the same line for either rule, nothing written."""
    from trm_kaggle.cli import main

    (tmp_path / "ch.json").write_text("{}")
    said = []
    for argv in (["submit", "--challenges", str(tmp_path / "ch.json"), "--weights", str(tmp_path / "w"),
                  "--output", str(tmp_path / "out.json")],
                 ["evaluate", "--weights", str(tmp_path / "w"), "--data", str(tmp_path / "d")]):
        assert main(argv + ["--trajectory-select", select]) == 2
        said.append(capsys.readouterr().err.strip())
    assert said[0] == said[1] == f"error: invalid option: --trajectory-select '{select}' {ONE_TRAJECTORY}", said
    assert not (tmp_path / "out.json").exists()
