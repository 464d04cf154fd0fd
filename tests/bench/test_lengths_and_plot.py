"""The check-latency section measures the context lengths it was asked for (within a stated
tolerance) and says which it measured; its figure labels the batched mode as the whole call and
shows each mode's spread, not only the median."""

from __future__ import annotations

import pytest

from mellea_local.bench.requirement_check import measure_requirement_checks, open_check_bench
from mellea_local.bench.subjects import REQUIREMENTS, fit_conversation, fit_tolerance
from mellea_local.embedded import build_model


@pytest.fixture(scope="module")
def check_bench(tiny_tokenizer):
    bench = open_check_bench(build_model(tiny_tokenizer, seed=5), tiny_tokenizer)
    yield bench
    bench.close()


def _shared(bench):
    from mellea_local.intrinsics.requirement_check import build_check_prompts

    return lambda ctx: build_check_prompts(bench.backend, ctx, [REQUIREMENTS[1]],
                                           bench.alora)[0].shared


@pytest.mark.parametrize("length", [64, 256, 1024, 3000])
def test_a_conversation_fits_the_length_asked(check_bench, length):
    ctx, counted = fit_conversation(_shared(check_bench), length)
    assert counted == _shared(check_bench)(ctx)  # what it reports is what a check sees
    assert abs(counted - length) <= fit_tolerance(length)
    assert ctx.as_list()[-1].role == "assistant"


def test_rows_say_what_was_asked_and_measured_with_the_spread(check_bench):
    result = measure_requirement_checks(check_bench, lengths=[256, 1024], repeats=3,
                                        skip_slow=True)
    for asked, row in zip([256, 1024], result["rows"], strict=True):
        assert row["requested_tokens"] == asked
        assert abs(row["context_tokens"] - asked) <= fit_tolerance(asked)
        for mode, (fastest, slowest) in row["spread_ms"].items():
            assert fastest <= row["median_ms"][mode] <= slowest
    pytest.importorskip("matplotlib")
    from mellea_local.bench.plots import latency_figure

    [ax] = latency_figure(result).axes
    assert "per call" in ax.get_ylabel() and "per check" not in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "8 checks in one call (whole call)" in labels
    # One spread band per mode drawn, spanning each row's fastest to slowest round.
    assert len(ax.collections) == len(labels)
    band = ax.collections[labels.index("8 checks in one call (whole call)")]
    ys = band.get_paths()[0].vertices[:, 1]
    spreads = [r["spread_ms"]["batch8"] for r in result["rows"]]
    assert min(ys) == pytest.approx(min(s[0] for s in spreads))
    assert max(ys) == pytest.approx(max(s[1] for s in spreads))
