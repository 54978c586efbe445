import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from trm_kaggle.data.augment import (INVERSE_TRANSFORM, aug_name, augment_grid, dihedral, invert_perm,
                                     inverse_dihedral, parse_aug_name, random_augmentations, transformed_shape,
                                     unaugment_grid)

# upstream's definitions, written with numpy's named functions, as the reference for ours
REFERENCE = [lambda a: a, lambda a: np.rot90(a, 1), lambda a: np.rot90(a, 2), lambda a: np.rot90(a, 3),
             np.fliplr, np.flipud, lambda a: a.T, lambda a: np.fliplr(np.rot90(a, 1))]

grids = st.integers(1, 30).flatmap(lambda h: st.integers(1, 30).flatmap(
    lambda w: arrays(np.uint8, (h, w), elements=st.integers(0, 9))))


@pytest.mark.parametrize("t", range(8))
def test_dihedral_matches_reference_definitions(t):
    g = np.arange(12).reshape(3, 4)
    assert np.array_equal(dihedral(g, t), REFERENCE[t](g))
    assert dihedral(g, t).shape == transformed_shape(g.shape, t)


@pytest.mark.parametrize("t", range(8))
@settings(max_examples=30, deadline=None)
@given(g=grids)
def test_dihedral_inverse_exact(t, g):
    assert np.array_equal(inverse_dihedral(dihedral(g, t), t), g)
    assert np.array_equal(dihedral(inverse_dihedral(g, t), t), g)


def test_inverse_table_is_the_group_inverse():
    g = np.arange(6).reshape(2, 3)
    for t in range(8):
        assert np.array_equal(dihedral(dihedral(g, t), INVERSE_TRANSFORM[t]), g)


def test_every_colour_permutation_inverts_exactly():
    # all 9! permutations of colours 1..9 at once
    perms = np.zeros((362880, 10), dtype=np.uint8)
    perms[:, 1:] = np.array(list(itertools.permutations(range(1, 10))), dtype=np.uint8)
    inv = invert_perm(perms)
    colours = np.arange(10)
    assert (np.take_along_axis(inv, perms.astype(np.intp), axis=1) == colours).all()
    assert (np.take_along_axis(perms, inv.astype(np.intp), axis=1) == colours).all()
    assert (inv[:, 0] == 0).all()


@settings(max_examples=60, deadline=None)
@given(g=grids, t=st.integers(0, 7), perm=st.permutations(list(range(1, 10))))
def test_augment_roundtrip_and_name_roundtrip(g, t, perm):
    perm = np.array([0] + perm, dtype=np.uint8)
    aug = augment_grid(g, t, perm)
    assert np.array_equal(unaugment_grid(aug, t, perm), g)
    # colour-map first, then transform (upstream's order)
    assert np.array_equal(aug, REFERENCE[t](perm[g]))
    task, t2, perm2 = parse_aug_name(aug_name("0a1b2c3d", t, perm))
    assert (task, t2) == ("0a1b2c3d", t) and np.array_equal(perm2, perm)


def test_parse_plain_and_bad_names():
    task, t, perm = parse_aug_name("007bbfb7")
    assert (task, t) == ("007bbfb7", 0) and np.array_equal(perm, np.arange(10))
    for bad in ["x|||t9|||0123456789", "x|||t1|||1123456789", "x|||q1|||0123456789", "x|||t1|||012"]:
        with pytest.raises(ValueError):
            parse_aug_name(bad)


def test_random_augmentations_are_valid_and_cover_transforms():
    t, p = random_augmentations(np.random.default_rng(1), 4000)
    assert set(t.tolist()) == set(range(8))
    assert (p[:, 0] == 0).all()
    assert (np.sort(p, axis=1) == np.arange(10)).all()
