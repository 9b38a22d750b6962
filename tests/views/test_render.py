"""The terminal's titles read the verdict's facts: a further metric's alpha share is the one its tests were judged at."""

import pytest

from modern_gpt.verdict.metrics import judge_metrics
from modern_gpt.views.render import report_metric_titles
from tests.verdict.test_verdict_metrics import _two_rows


@pytest.mark.parametrize(
    ("shift_b", "wall_b", "share"), [(-0.1, False, "0.05 (val's passed on)"), (0.0, False, "0.01")]
)
def test_a_metrics_title_names_the_share_it_was_judged_at(shift_b, wall_b, share):
    design, runs = _two_rows(shift_b, wall_b)
    (title,) = report_metric_titles(judge_metrics(design, runs, ["val_loss", "code_loss"]), design)
    assert title.startswith("code_loss, metric 2 of 2") and title.endswith(f"alpha share {share}"), title


def test_a_row_without_val_tests_does_not_keep_vals_share():
    """b's runs failed, so val has one test; it is rejected and val's share went on: the title says so (the view
    once re-derived this from the verdicts and said 0.01)."""
    design, runs = _two_rows(0, True)
    (title,) = report_metric_titles(judge_metrics(design, runs, ["val_loss", "code_loss"]), design)
    assert title.endswith("alpha share 0.05 (val's passed on)"), title
