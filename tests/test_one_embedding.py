"""What `embed(m)` gives is taken by every shipped artifact that reads embeddings: the predictors, the program
library and recommend_pipeline's `embedding=`."""

import numpy as np
import pytest

import behavioral_pq as bpq
from behavioral_pq.errors import LibraryError


@pytest.fixture(scope="module")
def module(examples):
    return examples["sum_array"]


@pytest.fixture(scope="module")
def embedding(module):
    return bpq.embed(module)


def test_the_default_embedding_begins_with_the_mean_pooling(module, embedding):
    mean = bpq.load_encoder().with_pooling("mean").embed(module)
    assert embedding.shape == (424,) and mean.shape == (224,)
    np.testing.assert_allclose(embedding[:224], mean, rtol=1e-6, atol=1e-6)


def test_the_library_takes_the_default_embedding(module, embedding):
    from behavioral_pq.tasks.guidance import load_library

    library = load_library()
    assert library.dim == 224                      # embedded under pooling "mean"
    mean = bpq.load_encoder().with_pooling("mean").embed(module)
    got, distances = library.neighbors(embedding, 5)
    want, want_distances = library.neighbors(mean, 5)
    assert len(got) == 5 and (got == want).all()
    np.testing.assert_allclose(distances, want_distances, rtol=1e-5)
    with pytest.raises(LibraryError, match="dimensions"):
        library.neighbors(np.zeros(300, np.float32), 5)   # not the mean plus a count tail


def test_recommend_pipeline_takes_the_default_embedding(module, embedding):
    found = bpq.recommend_pipeline(module, budget=3, embedding=embedding)
    assert found.compilations <= 3 and found.instruction_count <= found.oz_count
    assert found.pipeline


def test_the_predictors_take_the_default_embedding(module, embedding):
    from behavioral_pq.tasks.predictors import load_predictor

    oz = load_predictor(kind="oz-benefit")
    assert float(oz.predict_embeddings(embedding[None])[0]) == pytest.approx(bpq.predict_oz_benefit(module), abs=1e-6)
    best = load_predictor(kind="best-pass")
    probabilities = best.predict_embeddings(embedding[None])
    assert probabilities.shape[0] == 1
    top = best.ranked(probabilities[0], 1)[0]
    assert top.name == bpq.predict_best_pass(module, k=1)[0].name
