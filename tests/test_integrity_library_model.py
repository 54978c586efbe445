"""Batches and sizes a library caller gives the model: one TypeError or ValueError naming the argument, never a
silent wrong answer (a negative identifier took another puzzle's row, a float token was cut to a whole one) nor
torch's internals (an embedding's "index out of range", an UnboundLocalError after max_steps=0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.model import ContinuousRollout, TinyRecursiveModel, act_rollout, check_batch

ARCH = ArchConfig(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                  puzzle_emb_len=1, forward_dtype="float32")
SEQ, VOCAB, IDS, ROWS = 8, 6, 4, 3


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = TinyRecursiveModel(ARCH, SEQ, VOCAB, IDS).eval()
    m.puzzle_emb.weights.normal_()  # rows differ: a wrong row would change the answer
    return m


def batch(**changed):
    b = {"inputs": torch.arange(ROWS * SEQ, dtype=torch.int32).view(ROWS, SEQ) % VOCAB,
         "labels": torch.zeros(ROWS, SEQ, dtype=torch.int32),
         "puzzle_identifiers": torch.arange(ROWS, dtype=torch.int32)}
    b.update(changed)
    return {k: v for k, v in b.items() if v is not None}


BAD_BATCHES = [
    ("not a dict", [1, 2], TypeError, r"batch: expected a dict of torch tensors, got list"),
    ("no identifiers", batch(puzzle_identifiers=None), ValueError, r"batch has no 'puzzle_identifiers'"),
    ("numpy inputs", batch(inputs=np.zeros((ROWS, SEQ), np.int32)), TypeError,
     r"batch\['inputs'\]: expected a torch tensor, got numpy.ndarray"),
    ("1-D inputs", batch(inputs=torch.zeros(SEQ, dtype=torch.int32)), ValueError,
     r"batch\['inputs'\]: expected \(rows, 8\) tokens, got shape \(8,\)"),
    ("a short row", batch(inputs=torch.zeros(ROWS, SEQ - 1, dtype=torch.int32)), ValueError,
     r"got shape \(3, 7\) \(the model was built for seq_len 8\)"),
    ("float inputs", batch(inputs=torch.full((ROWS, SEQ), 2.7)), TypeError,
     r"batch\['inputs'\]: expected whole numbers \(an integer dtype\), got torch.float32"),
    ("bool inputs", batch(inputs=torch.ones(ROWS, SEQ, dtype=torch.bool)), TypeError, r"got torch.bool"),
    ("float identifiers", batch(puzzle_identifiers=torch.zeros(ROWS)), TypeError,
     r"batch\['puzzle_identifiers'\]: expected whole numbers"),
    ("identifiers per row", batch(puzzle_identifiers=torch.zeros(ROWS + 1, dtype=torch.int32)), ValueError,
     r"batch\['puzzle_identifiers'\]: expected 3 rows as the inputs, got shape \(4,\)"),
    ("2-D identifiers", batch(puzzle_identifiers=torch.zeros(ROWS, 1, dtype=torch.int32)), ValueError,
     r"batch\['puzzle_identifiers'\]: expected one per row, shape \(3,\), got \(3, 1\)"),
    ("a token past the vocabulary", batch(inputs=torch.full((ROWS, SEQ), VOCAB, dtype=torch.int32)), ValueError,
     r"batch\['inputs'\] holds values from 6 to 6: expected tokens of the model's vocabulary, 0..5"),
    ("a negative token", batch(inputs=torch.full((ROWS, SEQ), -1, dtype=torch.int64)), ValueError,
     r"holds values from -1 to -1: expected tokens"),
    ("a negative identifier", batch(puzzle_identifiers=torch.tensor([0, -1, 2], dtype=torch.int32)), ValueError,
     r"batch\['puzzle_identifiers'\] holds values from -1 to 2: expected rows of the model's puzzle-embedding "
     r"table, 0..3"),
    ("an identifier past the table", batch(puzzle_identifiers=torch.tensor([0, 4, 2])), ValueError,
     r"from 0 to 4: expected rows of the model's puzzle-embedding table, 0..3"),
]


@pytest.mark.parametrize("bad, error, said", [b[1:] for b in BAD_BATCHES], ids=[b[0] for b in BAD_BATCHES])
def test_act_rollout_refuses_a_batch_the_model_cannot_run(model, bad, error, said):
    with pytest.raises(error, match=said):
        act_rollout(model, bad, 2)


@pytest.mark.parametrize("bad, error, said", [b[1:] for b in BAD_BATCHES[1:]], ids=[b[0] for b in BAD_BATCHES[1:]])
def test_continuous_rollout_refuses_a_source_batch_naming_it(model, bad, error, said):
    said = said.replace(r"batch\[", r"source\[1\]\[").replace("batch has", r"source\[1\] has")
    with pytest.raises(error, match=said):
        list(ContinuousRollout(model, 2, 2).run([batch(), bad]))


def test_scoring_needs_labels_and_one_set_of_keys(model):
    with pytest.raises(ValueError, match=r"source\[0\] has no 'labels' \(needed: inputs, puzzle_identifiers, labels\)"):
        ContinuousRollout(model, 2, 2).score([batch(labels=None)])
    with pytest.raises(ValueError, match=r"source\[0\]\['labels'\]: expected the inputs' shape \(3, 8\)"):
        ContinuousRollout(model, 2, 2).score([batch(labels=torch.zeros(ROWS, 2, dtype=torch.int32))])
    with pytest.raises(ValueError, match=r"source\[1\]: keys .* differ from source\[0\]'s"):
        list(ContinuousRollout(model, 2, 2).run([batch(), batch(labels=None)]))


@torch.no_grad()
def test_a_right_batch_runs_as_before(model):
    """The checks change no answer: a uint8 batch gives the int32 one's logits, a single row its own; an empty
    batch still gives an empty result."""
    ref = act_rollout(model, batch(), 2, keep_logits=True)
    same = act_rollout(model, batch(inputs=batch()["inputs"].to(torch.uint8)), 2, keep_logits=True)
    assert torch.equal(ref.logits, same.logits)
    one = act_rollout(model, {k: v[2:] for k, v in batch().items()}, 2, keep_logits=True)
    assert torch.allclose(one.logits[0], ref.logits[2], atol=1e-5)
    done = list(ContinuousRollout(model, 2, 2, keep_logits=True).run([batch()]))
    assert torch.allclose(torch.cat([d.logits for d in done])[np.argsort(np.concatenate([d.ids for d in done]))],
                          ref.logits, atol=1e-5)
    assert act_rollout(model, {k: v[:0] for k, v in batch().items()}, 2).tokens.shape == (0, SEQ)
    check_batch(model, batch(), labels=True)


@pytest.mark.parametrize("steps", [0, -1, 2.5, "2", True, float("nan")])
def test_act_rollout_max_steps_is_a_whole_number_from_one(model, steps):
    with pytest.raises(ValueError, match=r"max_steps=.*: expected a whole number from 1 to 4,096"):
        act_rollout(model, batch(), steps)


@torch.no_grad()
def test_act_rollout_takes_numpy_integer_steps(model):
    assert act_rollout(model, batch(), np.int64(2)).steps.tolist() == [2] * ROWS


@pytest.mark.parametrize("args, kw, said", [
    (("4", 2), {}, r"slots='4': expected a whole number"),
    ((2, 2.5), {}, r"max_steps=2.5: expected a whole number"),
    ((0, 2), {}, r"slots=0: expected a whole number"),
    ((2, 2), {"trajectories": 1.5}, r"trajectories=1.5: expected a whole number"),
    ((2, 2), {"noise": float("nan")}, r"noise=nan: expected a number from 0 to 1"),
    ((2, 2), {"seed": -1}, r"seed=-1: expected a whole number"),
    ((2, 2), {"select": ["q_halt"]}, r"select=\['q_halt'\]: expected one of q_halt, first_halt, all"),
])
def test_continuous_rollout_checks_its_numbers_when_built(model, args, kw, said):
    with pytest.raises(ValueError, match=said):
        ContinuousRollout(model, *args, **kw)


@pytest.mark.parametrize("sizes, said", [
    ((16.5, VOCAB, IDS), r"seq_len=16.5: expected a whole number from 1 to 1,048,576"),
    ((0, VOCAB, IDS), r"seq_len=0: expected a whole number"),
    ((SEQ, -1, IDS), r"vocab_size=-1: expected a whole number from 1 to 1,048,576"),
    ((SEQ, VOCAB, 0), r"num_puzzle_identifiers=0: expected a whole number from 1 to 16,777,216"),
    ((SEQ, True, IDS), r"vocab_size=True: expected a whole number"),
])
def test_model_sizes_are_whole_numbers_in_their_bounds(sizes, said):
    with pytest.raises(ValueError, match=said):
        TinyRecursiveModel(ARCH, *sizes)


def test_model_arch_is_an_arch_config():
    with pytest.raises(TypeError, match=r"arch: expected an ArchConfig \(ArchConfig.model_validate reads a dict\), "
                                        r"got dict"):
        TinyRecursiveModel(ARCH.model_dump(), SEQ, VOCAB, IDS)
    m = TinyRecursiveModel(ARCH, np.int64(SEQ), np.int32(VOCAB), np.int64(IDS))  # numpy's integers are whole
    assert (m.seq_len, m.vocab_size, m.num_puzzle_identifiers) == (SEQ, VOCAB, IDS)
    assert type(m.seq_len) is int
