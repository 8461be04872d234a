"""``toolgate eval --learn-first F``: the passes before and after learning measure alike."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from toolgate import Router
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder, TokenStates
from toolgate.evaluation.evaluate import LabelledQuery, evaluate
from toolgate.evaluation.learning import evaluate_learning
from toolgate.routing.feedback import LearnConfig


class CountingEmbedder:
    """The int8 model, counting how often it embeds each text."""

    def __init__(self) -> None:
        self._model = Embedder(precision="int8", progress=False)
        self.embedded: Counter[str] = Counter()

    @property
    def model_id(self) -> str:
        return self._model.model_id

    @property
    def dim(self) -> int:
        return self._model.dim

    def embed(self, texts: Sequence[str] | str) -> np.ndarray:
        batch = [texts] if isinstance(texts, str) else list(texts)
        self.embedded.update(batch)
        return self._model.embed(batch)

    def embed_tokens(self, text: str) -> TokenStates:
        self.embedded[text] += 1
        return self._model.embed_tokens(text)


QUERIES = [
    LabelledQuery("1", "open an issue about the login bug", ("create_issue",)),
    LabelledQuery("2", "what will the weather be tomorrow", ("get_forecast",)),
    LabelledQuery("3", "post the release notes to the team channel", ("post_message",)),
    LabelledQuery("4", "read the config file from disk", ("read_file",)),
]


def test_both_passes_embed_every_evaluated_query() -> None:
    """route_ms times the model in the pass before learning: so must the pass after."""
    embedder = CountingEmbedder()
    router = Router.from_catalog(
        demo_catalog(),
        embedder=embedder,  # type: ignore[arg-type]
        cache=None,
    )
    evaluate_learning(router, QUERIES, 0.5)
    assert [embedder.embedded[item.query] for item in QUERIES[2:]] == [2, 2]


def test_an_evaluated_part_without_gold_reports_no_ranking_figures() -> None:
    router = Router.from_catalog(demo_catalog(), cache=None)
    irrelevant = [LabelledQuery("5", "tell me a joke", ()), LabelledQuery("6", "hi", ())]
    queries = [*QUERIES[:2], *irrelevant]
    report = evaluate_learning(router, queries, 0.5)
    assert (report["ndcg@10"], report["before"]["ndcg@10"]) == (None, None)


def test_gold_given_as_ids_is_learned_from_as_names_are() -> None:
    """Only names were looked up: a set labelled with ids (server/name) learned nothing, and
    the report's "after" was the "before" again."""
    router = Router.from_catalog(demo_catalog(), cache=None)
    ids = {tool.name: tool.id for tool in router.catalog}
    by_id = [replace(item, gold=tuple(ids[name] for name in item.gold)) for item in QUERIES]
    learned = evaluate_learning(router, by_id, 0.5)["learned_rows"]
    assert learned > 0
    assert learned == evaluate_learning(router, QUERIES, 0.5)["learned_rows"]


def test_a_router_that_learns_is_measured_without_its_memory_and_keeps_it() -> None:
    """ "before" is the figures without learning, and the router's own memory (traffic it
    learned from: here that requests like an evaluated query took read_file) is back after."""
    router = Router.from_catalog(demo_catalog(), cache=None)
    queries = [*QUERIES[:2], LabelledQuery("5", QUERIES[2].query, ("read_file",)), QUERIES[3]]
    plain = evaluate(router, queries[2:])
    own = router.learn(":memory:", config=replace(LearnConfig(), rate_per_tool=1e12))
    served = [tool.id for tool in router.catalog.with_name("read_file")]
    for said in ("", " now", " please", " today", " asap"):  # a lesson of several requests
        router.feedback(queries[2].query + said, used=served)
    assert evaluate(router, queries[2:])["mrr"] != plain["mrr"]  # the lesson is felt
    report = evaluate_learning(router, queries, 0.5)
    assert report["before"]["mrr"] == plain["mrr"]
    assert router.memory is own


def test_a_router_that_routed_the_queries_before_still_embeds_them_in_both_passes() -> None:
    """A deployment's router (one that learns) has routed queries like these: their vectors,
    memoised, made the pass before learning skip the model that the pass after runs."""
    embedder = CountingEmbedder()
    router = Router.from_catalog(
        demo_catalog(),
        embedder=embedder,  # type: ignore[arg-type]
        cache=None,
    )
    for item in QUERIES[2:]:
        router.route(item.query)
    evaluate_learning(router, QUERIES, 0.5)
    assert [embedder.embedded[item.query] for item in QUERIES[2:]] == [3, 3]
