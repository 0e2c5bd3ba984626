"""Size buckets and program kinds: the slices every report uses."""

import numpy as np
import pytest

from behavioral_pq.corpus.buckets import (
    BUCKET_NAMES,
    bucket_counts,
    program_kind,
    project_origin,
    size_bucket,
    slices,
)


@pytest.mark.parametrize("count, bucket", [(0, "<200"), (199, "<200"), (200, "200-1k"), (999, "200-1k"),
                                           (1000, "1k-5k"), (4999, "1k-5k"), (5000, "5k-50k"),
                                           (49_999, "5k-50k"), (50_000, ">50k"), (374_000, ">50k")])
def test_bucket_boundaries_include_the_lower_bound(count, bucket):
    assert size_bucket(count) == bucket


def test_counts_list_every_bucket_in_order():
    counts = bucket_counts([5, 300, 301, 70_000])
    assert list(counts) == list(BUCKET_NAMES)
    assert counts == {"<200": 1, "200-1k": 2, "1k-5k": 0, "5k-50k": 0, ">50k": 1}


def test_a_module_is_real_when_any_input_came_from_a_project():
    assert project_origin("sqlite") == "project:sqlite"
    assert program_kind(["jotai"]) == "small"
    assert program_kind(["csmith", "project:lua"]) == "real"
    for bad in ("", "a:b", "a/b", " x"):
        with pytest.raises(ValueError):
            project_origin(bad)


def test_slices_are_masks_over_kind_and_size():
    kinds = ["small", "small", "real", "real"]
    masks = slices(kinds, [10, 2000, 2000, 60_000])
    assert list(masks) == ["all", "<200", "1k-5k", ">50k", "small", "small <200", "small 1k-5k", "real",
                           "real 1k-5k", "real >50k"]
    assert masks["1k-5k"].tolist() == [False, True, True, False]
    assert masks["real >50k"].tolist() == [False, False, False, True]
    assert all(m.dtype == np.bool_ for m in masks.values())
